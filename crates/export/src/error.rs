//! The export crate's error type.

use std::path::PathBuf;

/// What can go wrong exporting a model. Every variant names the layer or file at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A layer the ONNX exporter cannot express; nothing is written rather than a wrong graph.
    #[error("cannot export layer `{path}` ({kind}) to ONNX: {reason}")]
    Unsupported {
        /// The layer's path in the model (`layer1.0.conv1`, or `<root>`).
        path: String,
        /// Its kind (`Module::kind`).
        kind: &'static str,
        /// Why, and what to use instead where there is an alternative.
        reason: String,
    },
    /// Writing the file failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// libtorch failed while tracing or saving TorchScript.
    #[error("TorchScript export failed: {0}")]
    TorchScript(String),
    /// A file given as a TorchScript module is not one.
    #[error(
        "{}: not a TorchScript module ({reason}); export one with `torchlight export --format torchscript` \
         or `torch.jit.save` in Python",
        path.display()
    )]
    NotTorchScript {
        /// The file.
        path: std::path::PathBuf,
        /// What it is instead, in one line.
        reason: String,
    },
}

/// `Result` with [`ExportError`].
pub type Result<T, E = ExportError> = std::result::Result<T, E>;
