//! `TextSplitFolders` and `TextSplits`: a `root/{train,val,test}/<class>/*.txt` layout (the
//! aclImdb layout), with a seeded stratified validation split when there is no `val/`.

use crate::delimited::{read_delimited, DelimitedOptions};
use crate::error::{Result, TextError};
use crate::json_lines::read_json_lines;
use crate::records::{Columns, TextRecords};
use crate::report::DocumentReport;
use crate::text_folder::{TextFolder, TextFolderOptions};
use std::path::{Path, PathBuf};
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

    /// The splits of `root` whichever way they are stored: records files when `root` is one
    /// ([`records_files`]: a `.csv`, `.tsv` or `.jsonl` file, or a folder holding
    /// `train.csv`/`train.tsv`/`train.jsonl`), read by `columns`; else the folder layout of
    /// [`TextSplitFolders::open`].
    ///
    /// # Errors
    /// As [`TextSplitFolders::open`] for folders; for records, what [`read_delimited`] and
    /// [`read_json_lines`] report (a bad row named by file and line), and a label of `val` or
    /// `test` that the training file does not have.
    pub fn open_data(root: impl AsRef<Path>, columns: &Columns) -> Result<Self> {
        let root = root.as_ref();
        let Some((train, val, test)) = records_files(root) else {
            return Self::open(root);
        };
        let train = read_records(&train, columns)?;
        let fixed = columns.clone().with_classes(train.classes().iter().cloned());
        let other = |path: Option<PathBuf>| -> Result<Option<TextFolder>> {
            path.map(|p| read_records(&p, &fixed).map(TextFolder::from_records)).transpose()
        };
        let (val, test) = (other(val)?, other(test)?);
        Ok(TextSplitFolders { train: TextFolder::from_records(train), val, test })
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

/// The record file endings [`TextSplitFolders::open_data`] reads.
pub const RECORD_EXTENSIONS: &[&str] = &["csv", "tsv", "jsonl"];

/// The records files of a data root, `(train, val, test)`: `root` itself when it is a file
/// ending `.csv`, `.tsv` or `.jsonl` (no val or test file); else, for a folder without a
/// `train/` folder, `root/train.<ext>` for the first of those endings present, with
/// `root/val.<ext>` and `root/test.<ext>` of the same ending when present. `None` otherwise
/// (a TextFolder layout).
pub fn records_files(root: &Path) -> Option<(PathBuf, Option<PathBuf>, Option<PathBuf>)> {
    let known =
        |p: &Path| p.extension().and_then(|e| e.to_str()).is_some_and(|e| RECORD_EXTENSIONS.contains(&e));
    if root.is_file() {
        return known(root).then(|| (root.to_path_buf(), None, None));
    }
    if !root.is_dir() || root.join("train").is_dir() {
        return None;
    }
    let ext = RECORD_EXTENSIONS.iter().find(|e| root.join(format!("train.{e}")).is_file())?;
    let file = |name: &str| Some(root.join(format!("{name}.{ext}"))).filter(|p| p.is_file());
    Some((root.join(format!("train.{ext}")), file("val"), file("test")))
}

/// The records of `path` by its ending: `.jsonl` JSON lines ([`read_json_lines`]), `.tsv`
/// tab-separated, else CSV ([`read_delimited`]), read by `columns` (with
/// [`Columns::with_classes`], a label outside those classes is an error naming file and line).
pub fn read_records(path: &Path, columns: &Columns) -> Result<TextRecords> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => read_json_lines(path, columns),
        Some("tsv") => read_delimited(path, &DelimitedOptions::tsv().with_columns(columns.clone())),
        _ => read_delimited(path, &DelimitedOptions::csv().with_columns(columns.clone())),
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
