//! The data crate's error type.

use std::path::PathBuf;

/// What can go wrong while loading data. Every variant names the sample, file or field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// One sample could not be produced (unreadable file, wrong shape, failed transform).
    #[error("sample {index}{}: {message}", path.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default())]
    Sample {
        /// The sample's index in the dataset it was asked of.
        index: usize,
        /// The file it comes from, when there is one.
        path: Option<PathBuf>,
        /// What went wrong.
        message: String,
    },
    /// An index past the end of a dataset.
    #[error("index {index} is out of range for a dataset of {len} samples")]
    IndexOutOfRange {
        /// The index asked for.
        index: usize,
        /// The dataset's length.
        len: usize,
    },
    /// A configuration value that cannot work (a batch size of 0, split fractions over 1, ...).
    #[error("invalid `{field}`: {reason}")]
    Config {
        /// The field's name, as in the builder or config file.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}

/// `Result` with [`DataError`].
pub type Result<T, E = DataError> = std::result::Result<T, E>;
