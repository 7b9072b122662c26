//! The data crate's error type.

use std::path::PathBuf;
use std::time::Duration;
use torchlight_base::ArrayError;

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
    /// An inconsistent [`Array`](crate::Array), or samples of one batch with different shapes
    /// (PyTorch's `default_collate` raises "stack expects each tensor to be equal size") or
    /// element types; for tensor samples too. The variant names the samples (and key) at fault.
    #[error(transparent)]
    Array(#[from] ArrayError),
    /// A sample that cannot be collated with the rest of its batch for a reason other than its
    /// shape (other keys; a tensor of another element type or device).
    #[error("sample {index} cannot be collated: {reason}")]
    Collate {
        /// The sample at fault.
        index: usize,
        /// Why.
        reason: String,
    },
    /// A panic while loading a sample or collating a batch, caught and turned into an error.
    #[error("panic while {}: {message}", index.map(|i| format!("loading sample {i}")).unwrap_or_else(|| "collating a batch".to_string()))]
    Panic {
        /// The sample being loaded, or `None` when collation panicked.
        index: Option<usize>,
        /// The panic's message.
        message: String,
    },
    /// No batch arrived from the workers within the loader's `timeout`.
    #[error("batch {batch} did not arrive within {waited:?}")]
    Timeout {
        /// The batch's position in the epoch.
        batch: usize,
        /// How long the consumer waited.
        waited: Duration,
    },
    /// Every loader worker thread has exited, so no more batches can come.
    #[error("the loader's worker threads have exited while batch {batch} was pending")]
    WorkersExited {
        /// The batch's position in the epoch.
        batch: usize,
    },
    /// A loader worker thread could not be started.
    #[error("cannot start a loader worker thread: {0}")]
    Spawn(std::io::Error),
    /// A libtorch error while building batch tensors (in the message, so not also a `source()`).
    #[cfg(feature = "tch")]
    #[error("building batch tensors: {0}")]
    Tensor(torchlight_tensor::TensorError),
    /// A tch error while building batch tensors (in the message, so not also a `source()`).
    #[cfg(feature = "tch")]
    #[error("building batch tensors: {0}")]
    Tch(tch::TchError),
}

#[cfg(feature = "tch")]
impl From<torchlight_tensor::TensorError> for DataError {
    fn from(e: torchlight_tensor::TensorError) -> Self {
        DataError::Tensor(e)
    }
}

#[cfg(feature = "tch")]
impl From<tch::TchError> for DataError {
    fn from(e: tch::TchError) -> Self {
        DataError::Tch(e)
    }
}

/// `Result` with [`DataError`].
pub type Result<T, E = DataError> = std::result::Result<T, E>;
