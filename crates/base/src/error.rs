//! The base crate's error type: what can be wrong with an [`Array`](crate::Array).

/// An [`Array`](crate::Array) that is inconsistent, or samples that cannot be stacked into one
/// batch (arrays, or tensors in `torchlight-data`). Every variant names the sample (and key) at
/// fault; `torchlight_data::DataError::Array` carries it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArrayError {
    /// A buffer whose length does not match its shape.
    #[error("array of shape {shape:?} needs {expected} elements but its buffer holds {len}")]
    Length {
        /// The shape.
        shape: Vec<usize>,
        /// The number of elements the shape needs.
        expected: usize,
        /// The number of elements in the buffer.
        len: usize,
    },
    /// Two samples of one batch have different shapes, so they cannot be stacked
    /// (PyTorch's `default_collate` raises "stack expects each tensor to be equal size").
    #[error("sample {index} has shape {shape:?} but sample {first_index}, the first of its batch, has shape {first_shape:?}{}", key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default())]
    ShapeMismatch {
        /// The sample whose shape differs from the first.
        index: usize,
        /// Its shape.
        shape: Vec<usize>,
        /// The first sample of the batch.
        first_index: usize,
        /// The first sample's shape.
        first_shape: Vec<usize>,
        /// The key, for keyed (map) samples.
        key: Option<String>,
    },
    /// Two samples of one batch have different element types.
    #[error("sample {index} has element type {dtype} but the first sample of its batch has {first_dtype}{}", key.as_ref().map(|k| format!(" (key `{k}`)")).unwrap_or_default())]
    DTypeMismatch {
        /// The sample whose element type differs from the first.
        index: usize,
        /// Its element type (`uint8`, `float32`, `int64`).
        dtype: &'static str,
        /// The first sample's element type.
        first_dtype: &'static str,
        /// The key, for keyed (map) samples.
        key: Option<String>,
    },
    /// A sample whose array is inconsistent (see [`ArrayError::Length`]).
    #[error("sample {index}: {reason}")]
    Invalid {
        /// The sample at fault.
        index: usize,
        /// What is wrong with its array.
        reason: String,
    },
    /// `Array::stack` of no arrays: the shape of the result is unknown.
    #[error("cannot stack an empty list of arrays")]
    EmptyStack,
}
