//! The text crate's error type.

use std::path::PathBuf;

/// What can go wrong reading text datasets and tokenizers. Every variant names the file (and
/// line, column or field) at fault; its message is one line and complete on its own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// A file or folder that cannot be read (the operating system's reason in `error`).
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A file that cannot be written.
    #[error("cannot write {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A document that is not valid UTF-8.
    #[error("{} is not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The byte offset of the first invalid sequence.
        offset: usize,
    },
    /// A dataset root that is not a folder.
    #[error("{} is not a folder", path.display())]
    MissingRoot {
        /// The path given.
        path: PathBuf,
    },
    /// A split layout without its `train/` folder.
    #[error("{} is missing: a split layout needs train/<class>/ folders", path.display())]
    MissingSplit {
        /// The `train` folder that was looked for.
        path: PathBuf,
    },
    /// A folder without class sub-folders.
    #[error("{} has no class folders", root.display())]
    NoClasses {
        /// The folder.
        root: PathBuf,
    },
    /// A class folder without documents.
    #[error("class folder {} has no files ending in {extensions:?}", path.display())]
    EmptyClass {
        /// The class folder.
        path: PathBuf,
        /// The extensions looked for.
        extensions: Vec<String>,
    },
    /// A split whose class folders differ from `train/`'s (or from the classes asked for).
    #[error("{} has other class folders than expected: missing {missing:?}, extra {extra:?} (choose the classes with `with_classes`)", path.display())]
    ClassMismatch {
        /// The split (or dataset) folder.
        path: PathBuf,
        /// Expected classes it lacks.
        missing: Vec<String>,
        /// Class folders it has that were not expected.
        extra: Vec<String>,
    },
    /// A file or folder name that is not UTF-8 (class names must be text).
    #[error("{} has a name that is not UTF-8", path.display())]
    NonUtf8Name {
        /// The path.
        path: PathBuf,
    },
    /// A header without a column the reader needs.
    #[error("{} has no `{column}` column (its columns: {found:?})", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column asked for.
        column: String,
        /// The columns the header has.
        found: Vec<String>,
    },
    /// A row (CSV/TSV record, JSON line) that cannot be read.
    #[error("{} line {line}: {reason}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// The 1-based line the row starts on.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A tokenizer file that cannot be used, or a tokenizer that fails (Hugging Face's message
    /// in `reason`).
    #[error("tokenizer {}: {reason}", path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(in memory)".to_string()))]
    Tokenizer {
        /// The tokenizer file, when there is one.
        path: Option<PathBuf>,
        /// What went wrong.
        reason: String,
    },
    /// A setting that cannot work (a `max_len` of 0, a validation fraction over 1, ...).
    #[error("invalid `{field}`: {reason}")]
    Config {
        /// The setting's name.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// A data-crate error (a split's sizes, a subset's indices).
    #[error(transparent)]
    Data(#[from] torchlight_data::DataError),
}

/// `Result` with [`TextError`].
pub type Result<T, E = TextError> = std::result::Result<T, E>;
