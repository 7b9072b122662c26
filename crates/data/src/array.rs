//! `Array`: a plain host buffer with a shape, what loader workers produce instead of tensors.
//!
//! tch tensors are neither `Send`-friendly nor `Sync` (tch-rs issue 752), and building one per
//! sample costs an allocation in libtorch. Workers therefore return `Array`s and the consumer
//! stacks a whole batch into one tensor.

/// The element buffer of an [`Array`].
#[derive(Debug, Clone, PartialEq)]
pub enum Buffer {
    /// Bytes, e.g. decoded pixels before `ToTensor`.
    U8(Vec<u8>),
    /// Floats, e.g. a normalised `[C, H, W]` image.
    F32(Vec<f32>),
    /// Integers, e.g. labels or token ids.
    I64(Vec<i64>),
}

impl Buffer {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::U8(v) => v.len(),
            Buffer::F32(v) => v.len(),
            Buffer::I64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A row-major host array: `buffer` holds `shape.iter().product()` elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// The elements, row-major.
    pub buffer: Buffer,
    /// The shape, e.g. `[3, 224, 224]` for a CHW image.
    pub shape: Vec<usize>,
}
