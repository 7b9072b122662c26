//! `TextSplitFolders` and `TextSplits`: a `root/{train,val,test}/<class>/*.txt` layout (the
//! aclImdb layout), with a seeded stratified validation split when there is no `val/`.

use crate::error::{Result, TextError};
use crate::report::DocumentReport;
use crate::text_folder::{TextFolder, TextFolderOptions};
use std::path::Path;
use std::sync::Arc;
use torchlight_data::{stratified_split_indices, Dataset, Subset};

/// The split folders of a data root, sharing one class numbering (`train/`'s): the text
/// counterpart of vision's `SplitFolders`.
#[derive(Debug, Clone)]
pub struct TextSplitFolders {
    /// `root/train`.
    pub train: TextFolder,
    /// `root/val`, when present.
    pub val: Option<TextFolder>,
    /// `root/test`, when present.
    pub test: Option<TextFolder>,
}

impl TextSplitFolders {
    /// Loads `root/train` (required), `root/val` and `root/test` (each optional), every class
    /// folder and `.txt` files.
    ///
    /// # Errors
    /// [`TextError::MissingRoot`] for `root`, [`TextError::MissingSplit`] without
    /// `root/train`, [`TextError::ClassMismatch`] when `val/` or `test/` has other class
    /// folders than `train/`, and anything [`TextFolder::new`] reports for a split.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(root, &TextFolderOptions::default())
    }

    /// [`TextSplitFolders::open`] with `options`. With chosen classes (aclImdb:
    /// `with_classes(["neg", "pos"])`, leaving out `train/unsup/`), every split must have
    /// those folders and may have others, which are ignored.
    pub fn open_with(root: impl AsRef<Path>, options: &TextFolderOptions) -> Result<Self> {
        let root = root.as_ref();
        if !root.is_dir() {
            return Err(TextError::MissingRoot { path: root.to_path_buf() });
        }
        let train_root = root.join("train");
        if !train_root.is_dir() {
            return Err(TextError::MissingSplit { path: train_root });
        }
        let train = TextFolder::with_options(&train_root, options)?;
        let other = |name: &str| -> Result<Option<TextFolder>> {
            let dir = root.join(name);
            if !dir.is_dir() {
                return Ok(None);
            }
            let allow_extra = options.classes.is_some();
            TextFolder::with_class_list(dir, train.class_list(), &options.extensions, allow_extra).map(Some)
        };
        let val = other("val")?;
        let test = other("test")?;
        Ok(TextSplitFolders { train, val, test })
    }

    /// The class names all splits share, sorted.
    pub fn classes(&self) -> &[String] {
        self.train.classes()
    }

    /// [`TextFolder::check`] over every split: the unreadable and empty documents of all.
    pub fn check(&self) -> DocumentReport {
        let mut report = DocumentReport::default();
        for folder in [Some(&self.train), self.val.as_ref(), self.test.as_ref()].into_iter().flatten() {
            let part = folder.check();
            report.documents += part.documents;
            report.unreadable.extend(part.unreadable);
            report.empty.extend(part.empty);
        }
        report
    }

    /// The training and validation sets: `val/` when there is one (`val_fraction` unused),
    /// else a seeded stratified split of `train/` holding out `val_fraction` of each class
    /// (`torchlight_data::stratified_split_indices`, the image recipe's rule), the same for
    /// the same seed on every machine.
    ///
    /// # Errors
    /// [`TextError::Config`] naming `val_fraction` when it is needed and not in `(0, 1)`.
    pub fn split(self, val_fraction: f64, seed: u64) -> Result<TextSplits> {
        let classes = self.train.classes().to_vec();
        let all = |folder: TextFolder| -> Result<Subset<TextFolder>> {
            let n = folder.len();
            Ok(Subset::new(Arc::new(folder), (0..n).collect())?)
        };
        let test = self.test.map(all).transpose()?;
        let (train, val) = match self.val {
            Some(val) => (all(self.train)?, all(val)?),
            None => {
                if !(val_fraction > 0.0 && val_fraction < 1.0) {
                    return Err(TextError::Config {
                        field: "val_fraction",
                        reason: format!(
                            "{val_fraction} is not between 0 and 1, and there is no val/ folder to validate on"
                        ),
                    });
                }
                let targets = self.train.targets();
                let mut parts =
                    stratified_split_indices(&targets, &[1.0 - val_fraction, val_fraction][..], seed)?
                        .into_iter();
                let (train_part, val_part) =
                    (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
                let folder = Arc::new(self.train);
                (Subset::new(Arc::clone(&folder), train_part)?, Subset::new(folder, val_part)?)
            }
        };
        Ok(TextSplits { train, val, test, classes })
    }
}

/// The splits as the loaders see them: subsets of the folders, sharing one class numbering.
pub struct TextSplits {
    /// The training documents.
    pub train: Subset<TextFolder>,
    /// The validation documents (`val/`, or the held-out part of `train/`).
    pub val: Subset<TextFolder>,
    /// The test documents, when there is a `test/`.
    pub test: Option<Subset<TextFolder>>,
    /// Class names, sorted as torchvision's ImageFolder sorts them.
    pub classes: Vec<String>,
}

impl TextSplits {
    /// The class index of every training document, in split order.
    pub fn train_targets(&self) -> Vec<i64> {
        let samples = self.train.dataset().samples();
        self.train.indices().iter().map(|&i| samples[i].1).collect()
    }

    /// The text of every readable training document, in split order: what a vocabulary or
    /// a tokenizer is built from (never the validation or test documents). Unreadable
    /// documents are left out; [`TextSplitFolders::check`] names them.
    pub fn train_texts(&self) -> impl Iterator<Item = String> + '_ {
        let folder = self.train.dataset();
        self.train.indices().iter().filter_map(move |&i| folder.read(i).ok())
    }
}
