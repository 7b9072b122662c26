//! The checkpoint crate's error type.

use std::path::PathBuf;

/// What can go wrong saving or loading a checkpoint. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// The folder is not a Torchlight checkpoint (no `meta.json`, or a foreign one).
    #[error("{}: not a Torchlight checkpoint ({reason})", path.display())]
    NotACheckpoint {
        /// The folder.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// Written by a newer Torchlight with a format this one cannot read.
    #[error("{}: checkpoint format version {found} is newer than this Torchlight reads (up to {supported}); upgrade Torchlight", path.display())]
    NewerFormat {
        /// The `meta.json` file.
        path: PathBuf,
        /// Its format version.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A file shorter or longer than recorded: an interrupted copy or a truncated download.
    #[error("{}: truncated or overwritten: {found} bytes, the checkpoint recorded {expected}", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes recorded at save time.
        expected: u64,
        /// Bytes on disk.
        found: u64,
    },
    /// A file whose content does not match its recorded checksum, or that cannot be parsed.
    #[error("{}: corrupted: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The weights do not fit the model (another architecture or head size).
    #[error("{}: {error}", path.display())]
    Model {
        /// The weights file.
        path: PathBuf,
        /// Which keys are missing, unexpected or mis-shaped (in the message, so not also a
        /// `source()`).
        error: torchlight_nn::NnError,
    },
    /// The optimizer, scheduler or GradScaler state does not fit the objects given.
    #[error("{}: {error}", path.display())]
    Optim {
        /// The checkpoint folder.
        path: PathBuf,
        /// What does not fit (in the message, so not also a `source()`).
        error: torchlight_optim::OptimError,
    },
    /// A component the caller asked to restore is not in the checkpoint.
    #[error("{}: the checkpoint holds no {what}", path.display())]
    Missing {
        /// The checkpoint folder.
        path: PathBuf,
        /// The component (`optimizer state`, ...).
        what: &'static str,
    },
    /// The checkpoint on disk is no longer the one the caller read (another process saved
    /// over it since), so what the caller computed from it is not written into it.
    #[error("{}: changed on disk since it was read ({reason}); nothing was written", path.display())]
    Changed {
        /// The checkpoint folder.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// libtorch failed (saving tensors, restoring generator state).
    #[error("{}: {message}", path.display())]
    Torch {
        /// The file or folder.
        path: PathBuf,
        /// libtorch's message.
        message: String,
    },
}

/// `Result` with [`CheckpointError`].
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CheckpointError {
    let path = path.into();
    move |error| CheckpointError::Io { path, error }
}
