//! The tensor crate's error type.

use tch::Device;

/// What can go wrong in `torchlight-tensor`. Every variant names the thing at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// A device string that is not `cpu`, `cuda`, `cuda:N` or `auto`.
    #[error("invalid device `{spec}`: {reason} (expected `cpu`, `cuda`, `cuda:N` or `auto`)")]
    InvalidDevice {
        /// The string as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// CUDA was asked for by name but this process cannot use it.
    #[error("device `{requested}` was requested but CUDA is not available: {reason}")]
    CudaUnavailable {
        /// The device string as given.
        requested: String,
        /// Why CUDA is unavailable (driver, libraries, ...).
        reason: String,
    },
    /// `cuda:N` with N past the number of visible GPUs.
    #[error("device `cuda:{index}` does not exist: {count} CUDA device(s) visible")]
    DeviceOutOfRange {
        /// The requested ordinal.
        index: usize,
        /// How many CUDA devices are visible.
        count: usize,
    },
    /// Autocast for a device/dtype pair PyTorch does not support either.
    #[error("autocast on {device:?} does not support {kind:?} (CUDA: Half, BFloat16; CPU: BFloat16, Half)")]
    UnsupportedAutocast {
        /// The device asked for.
        device: Device,
        /// The reduced-precision type asked for.
        kind: tch::Kind,
    },
    /// A tensor holds NaN or Inf values where finite ones were required.
    #[error("tensor `{name}` {shape:?} holds non-finite values: {nan} NaN and {inf} Inf of {numel}")]
    NonFinite {
        /// The name the caller gave the tensor.
        name: String,
        /// Its shape.
        shape: Vec<i64>,
        /// How many elements are NaN.
        nan: i64,
        /// How many elements are +Inf or -Inf.
        inf: i64,
        /// How many elements it has.
        numel: i64,
    },
    /// A tensor of the wrong rank or shape for a layout operation.
    #[error("tensor `{name}` has shape {shape:?}, expected {expected}")]
    Shape {
        /// The tensor's role in the operation (e.g. `image`).
        name: String,
        /// Its shape.
        shape: Vec<i64>,
        /// What was expected, in words (e.g. `4 dims [N, C, H, W]`).
        expected: String,
    },
    /// libtorch raised an error (its C++ exception, caught at the boundary).
    #[error("libtorch error in {op}: {message}")]
    Torch {
        /// The operation that failed.
        op: &'static str,
        /// libtorch's message, without its C++ backtrace.
        message: String,
    },
}

impl TensorError {
    pub(crate) fn torch(op: &'static str, err: impl std::fmt::Display) -> Self {
        TensorError::Torch { op, message: err.to_string() }
    }
}

/// `Result` with [`TensorError`].
pub type Result<T, E = TensorError> = std::result::Result<T, E>;
