//! `TextFolder`: documents labelled by the folder they sit in, `root/<class>/**/*.txt`, the
//! text counterpart of torchvision's `ImageFolder`.

use crate::document::{is_empty_document, read_document};
use crate::error::{Result, TextError};
use crate::records::TextRecords;
use crate::report::{DocumentReport, Location};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlight_base::seed::Rng;
use torchlight_data::{DataError, Dataset};

/// The file endings read by default.
pub const TEXT_EXTENSIONS: &[&str] = &[".txt"];

/// Which files and classes a [`TextFolder`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFolderOptions {
    /// File name endings kept, compared case-insensitively (default [`TEXT_EXTENSIONS`]).
    pub extensions: Vec<String>,
    /// The class folders to read, when not all of them: aclImdb's `train/` also holds
    /// `unsup/`, 50 000 unlabelled reviews that must not become a third class, so it is read
    /// with `with_classes(["neg", "pos"])`. `None` (the default) reads every class folder.
    pub classes: Option<Vec<String>>,
}

impl Default for TextFolderOptions {
    fn default() -> Self {
        TextFolderOptions {
            extensions: TEXT_EXTENSIONS.iter().map(|e| e.to_string()).collect(),
            classes: None,
        }
    }
}

impl TextFolderOptions {
    /// Keeps files ending in one of `extensions` (e.g. `".txt"`, `".md"`).
    pub fn with_extensions<S: Into<String>>(mut self, extensions: impl IntoIterator<Item = S>) -> Self {
        self.extensions = extensions.into_iter().map(Into::into).collect();
        self
    }

    /// Reads only these class folders (numbered in sorted order whatever the order given);
    /// other folders are ignored, and a missing one is an error.
    pub fn with_classes<S: Into<String>>(mut self, classes: impl IntoIterator<Item = S>) -> Self {
        self.classes = Some(classes.into_iter().map(Into::into).collect());
        self
    }
}

/// Documents labelled by folder: `root/<class>/**/<file>.txt`.
///
/// Classes and order follow `torchvision.datasets.ImageFolder`: classes are the sub-folders of
/// `root` (names starting with `.` skipped), sorted by name in code-point order and numbered
/// from 0; a class's documents are the files under its folder, recursively, ordered by folder
/// path and then file name. A folder reached twice through symlinks is read once.
///
/// As a [`Dataset`], `get` reads the file and yields `(text, class_index)`. A file that
/// cannot be read or is not UTF-8, and an empty document (white space only), fail their sample
/// with `DataError::Sample` naming the file, so the loader's `ErrorPolicy::Fail` stops on them
/// and `ErrorPolicy::Skip` leaves them out and counts them, as with images; [`check`]
/// lists them all before training.
///
/// [`check`]: TextFolder::check
#[derive(Debug, Clone)]
pub struct TextFolder {
    root: PathBuf,
    classes: Arc<Vec<String>>,
    samples: Vec<(PathBuf, i64)>,
    /// Each document's text and 1-based line when the documents come from a records file
    /// ([`TextFolder::from_records`]) rather than one file each.
    records: Option<Arc<Vec<(String, u64)>>>,
}

impl TextFolder {
    /// Scans `root` for every class folder and `.txt` files.
    ///
    /// # Errors
    /// [`TextError::MissingRoot`], [`TextError::NoClasses`], [`TextError::EmptyClass`] naming
    /// the first class folder without documents, [`TextError::Io`] for an unreadable folder.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        Self::with_options(root, &TextFolderOptions::default())
    }

    /// Scans `root` with `options` (file endings, a chosen set of classes).
    ///
    /// # Errors
    /// As [`TextFolder::new`], and [`TextError::ClassMismatch`] when a chosen class has no
    /// folder.
    pub fn with_options(root: impl AsRef<Path>, options: &TextFolderOptions) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let found = find_classes(&root)?;
        let classes = match &options.classes {
            None => found,
            Some(chosen) => {
                let mut chosen = chosen.clone();
                chosen.sort();
                chosen.dedup();
                let have: HashSet<&String> = found.iter().collect();
                let missing: Vec<String> = chosen.iter().filter(|c| !have.contains(c)).cloned().collect();
                if !missing.is_empty() || chosen.is_empty() {
                    return Err(TextError::ClassMismatch { path: root, missing, extra: Vec::new() });
                }
                chosen
            }
        };
        Self::scan(root, Arc::new(classes), &options.extensions)
    }

    /// Scans `root` for exactly `classes` (a split sharing another split's numbering): every
    /// one must have a folder, and without `allow_extra` no other class folder may exist.
    pub(crate) fn with_class_list(
        root: PathBuf,
        classes: Arc<Vec<String>>,
        extensions: &[String],
        allow_extra: bool,
    ) -> Result<Self> {
        let found = find_classes(&root)?;
        let have: HashSet<&String> = found.iter().collect();
        let want: HashSet<&String> = classes.iter().collect();
        let missing: Vec<String> = classes.iter().filter(|c| !have.contains(c)).cloned().collect();
        let extra: Vec<String> = if allow_extra {
            Vec::new()
        } else {
            found.iter().filter(|c| !want.contains(c)).cloned().collect()
        };
        if !missing.is_empty() || !extra.is_empty() {
            return Err(TextError::ClassMismatch { path: root, missing, extra });
        }
        Self::scan(root, classes, extensions)
    }

    fn scan(root: PathBuf, classes: Arc<Vec<String>>, extensions: &[String]) -> Result<Self> {
        let extensions: Vec<String> = extensions.iter().map(|e| e.to_lowercase()).collect();
        let mut samples = Vec::new();
        for (index, class) in classes.iter().enumerate() {
            let dir = root.join(class);
            let files = class_files(&dir, &extensions)?;
            if files.is_empty() {
                return Err(TextError::EmptyClass { path: dir, extensions });
            }
            samples.extend(files.into_iter().map(|p| (p, index as i64)));
        }
        Ok(TextFolder { root, classes, samples, records: None })
    }

    /// The records of one CSV, TSV or JSON-lines file as a folder of documents, so the splits
    /// and loaders of a records file are the ones of a folder: `root()` and every sample's
    /// path are the file, `read` gives the record's text, and an empty record's error (in
    /// [`check`](TextFolder::check) and `get`) names the file and the line it starts on.
    pub fn from_records(records: TextRecords) -> Self {
        let path = records.path().to_path_buf();
        let samples = records.targets().iter().map(|&t| (path.clone(), t)).collect();
        let texts =
            records.texts().iter().enumerate().map(|(i, text)| (text.clone(), records.line(i))).collect();
        TextFolder {
            root: path,
            classes: Arc::new(records.classes().to_vec()),
            samples,
            records: Some(Arc::new(texts)),
        }
    }

    /// The 1-based line document `index` starts on, for documents read from a records file;
    /// `None` for a folder's (one file each) or past the end.
    pub fn line(&self, index: usize) -> Option<u64> {
        self.records.as_ref().and_then(|r| r.get(index)).map(|(_, line)| *line)
    }

    /// The folder scanned.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The class names, sorted; a class's index is its position here.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    pub(crate) fn class_list(&self) -> Arc<Vec<String>> {
        Arc::clone(&self.classes)
    }

    /// Class name to index, like torchvision's `class_to_idx`.
    pub fn class_to_idx(&self) -> BTreeMap<String, i64> {
        self.classes.iter().enumerate().map(|(i, c)| (c.clone(), i as i64)).collect()
    }

    /// Every `(path, class_index)`, in order (torchvision's `samples`).
    pub fn samples(&self) -> &[(PathBuf, i64)] {
        &self.samples
    }

    /// The class index of every document (torchvision's `targets`).
    pub fn targets(&self) -> Vec<i64> {
        self.samples.iter().map(|(_, t)| *t).collect()
    }

    /// The text of document `index` (empty documents included).
    ///
    /// # Errors
    /// [`TextError::Io`] or [`TextError::NotUtf8`] naming the file.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn read(&self, index: usize) -> Result<String> {
        match &self.records {
            Some(records) => Ok(records[index].0.clone()),
            None => read_document(&self.samples[index].0),
        }
    }

    /// Reads every document once and lists the unreadable and the empty ones, so a run can
    /// refuse bad data (or say what `ErrorPolicy::Skip` will leave out) before epoch 1.
    pub fn check(&self) -> DocumentReport {
        let mut report = DocumentReport { documents: self.samples.len(), ..Default::default() };
        if let Some(records) = &self.records {
            report.empty = records
                .iter()
                .filter(|(text, _)| is_empty_document(text))
                .map(|(_, line)| Location { path: self.root.clone(), line: Some(*line) })
                .collect();
            return report;
        }
        for (path, _) in &self.samples {
            let at = || Location { path: path.clone(), line: None };
            match read_document(path) {
                Ok(text) if is_empty_document(&text) => report.empty.push(at()),
                Ok(_) => {}
                Err(e) => report.unreadable.push((at(), reason(&e))),
            }
        }
        report
    }
}

/// The reason alone, for messages that name the file themselves.
pub(crate) fn reason(e: &TextError) -> String {
    match e {
        TextError::Io { error, .. } => error.to_string(),
        TextError::NotUtf8 { offset, .. } => format!("not UTF-8 text (invalid byte at offset {offset})"),
        other => other.to_string(),
    }
}

/// The message of an empty document's sample error.
pub(crate) const EMPTY_DOCUMENT: &str = "empty document (white space only)";

impl Dataset for TextFolder {
    type Item = (String, i64);

    fn len(&self) -> usize {
        self.samples.len()
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> torchlight_data::Result<(String, i64)> {
        let Some((path, target)) = self.samples.get(index) else {
            return Err(DataError::IndexOutOfRange { index, len: self.samples.len() });
        };
        let fail = |message: String| DataError::Sample { index, path: Some(path.clone()), message };
        let text = match &self.records {
            Some(records) => {
                let (text, line) = &records[index];
                if is_empty_document(text) {
                    return Err(fail(format!("line {line}: {EMPTY_DOCUMENT}")));
                }
                text.clone()
            }
            None => read_document(path).map_err(|e| fail(reason(&e)))?,
        };
        if is_empty_document(&text) {
            return Err(fail(EMPTY_DOCUMENT.to_string()));
        }
        Ok((text, *target))
    }
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    let io = |error| TextError::Io { path: dir.to_path_buf(), error };
    std::fs::read_dir(dir).map_err(io)?.collect::<std::io::Result<Vec<_>>>().map_err(io)
}

/// The sorted names of `root`'s sub-folders (symlinks followed, hidden names skipped).
pub(crate) fn find_classes(root: &Path) -> Result<Vec<String>> {
    if !root.is_dir() {
        return Err(TextError::MissingRoot { path: root.to_path_buf() });
    }
    let mut classes = Vec::new();
    for entry in read_dir(root)? {
        let path = entry.path();
        if is_hidden(&entry.file_name()) || !path.is_dir() {
            continue;
        }
        classes.push(entry.file_name().into_string().map_err(|_| TextError::NonUtf8Name { path })?);
    }
    if classes.is_empty() {
        return Err(TextError::NoClasses { root: root.to_path_buf() });
    }
    // Rust orders `String`s by UTF-8 bytes, which is Python's code-point order.
    classes.sort();
    Ok(classes)
}

/// The files under `dir` ending in one of `extensions`, by folder path then file name (the
/// order of torchvision's `sorted(os.walk(...))`); each real folder is read once.
fn class_files(dir: &Path, extensions: &[String]) -> Result<Vec<PathBuf>> {
    let real = |p: &Path| p.canonicalize().map_err(|error| TextError::Io { path: p.to_path_buf(), error });
    let mut folders: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    // Folders in increasing path order, so that of several paths to one real folder (through
    // symlinks) the first in sorted order is the one read.
    let mut pending = BinaryHeap::from([Reverse(dir.to_path_buf())]);
    let mut seen = HashSet::new();
    while let Some(Reverse(folder)) = pending.pop() {
        if !seen.insert(real(&folder)?) {
            continue;
        }
        let mut files = Vec::new();
        for entry in read_dir(&folder)? {
            let name = entry.file_name();
            if is_hidden(&name) {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                pending.push(Reverse(path));
            } else if extensions.iter().any(|e| name.to_string_lossy().to_lowercase().ends_with(e.as_str())) {
                files.push(path);
            }
        }
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        folders.push((folder, files));
    }
    folders.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    Ok(folders.into_iter().flat_map(|(_, files)| files).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &[u8]) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn classes_sorted_files_in_walk_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "pos/b.txt", b"good");
        write(root, "pos/a.txt", b"fine");
        write(root, "pos/sub/c.TXT", b"nice");
        write(root, "pos/notes.md", b"ignored");
        write(root, "neg/z.txt", b"bad");
        write(root, ".hidden/x.txt", b"hidden");
        write(root, "pos/.DS_Store", b"junk");
        let folder = TextFolder::new(root).unwrap();
        assert_eq!(folder.classes(), ["neg", "pos"]);
        let names: Vec<String> = folder
            .samples()
            .iter()
            .map(|(p, _)| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["neg/z.txt", "pos/a.txt", "pos/b.txt", "pos/sub/c.TXT"]);
        assert_eq!(folder.targets(), [0, 1, 1, 1]);
        let mut rng = torchlight_base::rng_from_seed(0);
        assert_eq!(folder.get(1, &mut rng).unwrap(), ("fine".to_string(), 1));
    }

    #[test]
    fn chosen_classes_and_empty_class() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "pos/a.txt", b"a");
        write(root, "neg/a.txt", b"b");
        write(root, "unsup/a.txt", b"c");
        let folder =
            TextFolder::with_options(root, &TextFolderOptions::default().with_classes(["pos", "neg"]))
                .unwrap();
        assert_eq!(folder.classes(), ["neg", "pos"]);
        assert_eq!(folder.len(), 2);
        let err = TextFolder::with_options(root, &TextFolderOptions::default().with_classes(["pos", "meh"]))
            .unwrap_err();
        assert!(matches!(&err, TextError::ClassMismatch { missing, .. } if missing == &["meh"]), "{err}");
        std::fs::create_dir(root.join("empty")).unwrap();
        let err = TextFolder::new(root).unwrap_err();
        assert!(matches!(&err, TextError::EmptyClass { path, .. } if path.ends_with("empty")), "{err}");
    }
}
