//! `Array`: a plain host buffer with a shape, what loader workers produce instead of tensors.
//!
//! tch tensors are not `Sync` (tch-rs issue 752), and building one per sample costs an
//! allocation in libtorch. Workers therefore return `Array`s and the consumer stacks a whole
//! batch into one tensor (`torchlight-data`), or hands the stacked `Array` to another engine.

use crate::error::ArrayError;

type Result<T, E = ArrayError> = std::result::Result<T, E>;

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

    /// The element type's name in PyTorch's vocabulary: `uint8`, `float32` or `int64`.
    pub fn dtype(&self) -> &'static str {
        match self {
            Buffer::U8(_) => "uint8",
            Buffer::F32(_) => "float32",
            Buffer::I64(_) => "int64",
        }
    }

    fn empty_like(&self, capacity: usize) -> Buffer {
        match self {
            Buffer::U8(_) => Buffer::U8(Vec::with_capacity(capacity)),
            Buffer::F32(_) => Buffer::F32(Vec::with_capacity(capacity)),
            Buffer::I64(_) => Buffer::I64(Vec::with_capacity(capacity)),
        }
    }

    /// Appends `other` if it holds the same element type; gives it back otherwise.
    fn extend_from(&mut self, other: &Buffer) -> std::result::Result<(), ()> {
        match (self, other) {
            (Buffer::U8(a), Buffer::U8(b)) => a.extend_from_slice(b),
            (Buffer::F32(a), Buffer::F32(b)) => a.extend_from_slice(b),
            (Buffer::I64(a), Buffer::I64(b)) => a.extend_from_slice(b),
            _ => return Err(()),
        }
        Ok(())
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

impl Array {
    /// An array, checking that `buffer` holds exactly `shape.iter().product()` elements.
    pub fn new(buffer: Buffer, shape: Vec<usize>) -> Result<Array> {
        let array = Array { buffer, shape };
        array.check()?;
        Ok(array)
    }

    /// A `f32` array (see [`Array::new`]).
    pub fn from_f32(values: Vec<f32>, shape: Vec<usize>) -> Result<Array> {
        Array::new(Buffer::F32(values), shape)
    }

    /// A `u8` array (see [`Array::new`]).
    pub fn from_u8(values: Vec<u8>, shape: Vec<usize>) -> Result<Array> {
        Array::new(Buffer::U8(values), shape)
    }

    /// An `i64` array (see [`Array::new`]).
    pub fn from_i64(values: Vec<i64>, shape: Vec<usize>) -> Result<Array> {
        Array::new(Buffer::I64(values), shape)
    }

    /// The number of elements the shape describes.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks that the buffer length matches the shape (the fields are public, so an array
    /// built by hand may be inconsistent).
    pub fn check(&self) -> Result<()> {
        if self.buffer.len() == self.numel() {
            Ok(())
        } else {
            Err(ArrayError::Length {
                shape: self.shape.clone(),
                expected: self.numel(),
                len: self.buffer.len(),
            })
        }
    }

    /// Stacks same-shaped arrays along a new leading dimension, like `torch.stack(xs, 0)`:
    /// `[S...]` each -> `[N, S...]`. Each array comes with its sample index, which errors name
    /// (`key` too, for keyed samples). `items` must not be empty.
    pub fn stack(items: &[(usize, &Array)], key: Option<&str>) -> Result<Array> {
        let shape = Array::stack_shape(items, key)?;
        let first = items[0].1;
        let mut buffer = first.buffer.empty_like(first.numel() * items.len());
        for (_, array) in items {
            buffer.extend_from(&array.buffer).expect("stack_shape checked the element types");
        }
        Ok(Array { buffer, shape })
    }

    /// The shape `[N, S...]` that [`Array::stack`] gives `items`, after the checks it makes
    /// (each array consistent, all of the first one's shape and element type), for code that
    /// stacks into its own memory (a tensor) instead of a new buffer.
    pub fn stack_shape(items: &[(usize, &Array)], key: Option<&str>) -> Result<Vec<usize>> {
        let Some(&(first_index, first)) = items.first() else {
            return Err(ArrayError::EmptyStack);
        };
        for &(index, array) in items {
            array.check().map_err(|e| ArrayError::Invalid { index, reason: e.to_string() })?;
            if array.shape != first.shape {
                return Err(ArrayError::ShapeMismatch {
                    index,
                    shape: array.shape.clone(),
                    first_index,
                    first_shape: first.shape.clone(),
                    key: key.map(str::to_string),
                });
            }
            if std::mem::discriminant(&array.buffer) != std::mem::discriminant(&first.buffer) {
                return Err(ArrayError::DTypeMismatch {
                    index,
                    dtype: array.buffer.dtype(),
                    first_dtype: first.buffer.dtype(),
                    key: key.map(str::to_string),
                });
            }
        }
        let mut shape = Vec::with_capacity(first.shape.len() + 1);
        shape.push(items.len());
        shape.extend_from_slice(&first.shape);
        Ok(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_the_length() {
        assert!(Array::from_f32(vec![0.0; 6], vec![2, 3]).is_ok());
        let err = Array::from_f32(vec![0.0; 5], vec![2, 3]).unwrap_err();
        assert!(matches!(err, ArrayError::Length { expected: 6, len: 5, .. }), "{err}");
    }

    #[test]
    fn stack_adds_a_leading_dimension() {
        let a = Array::from_u8(vec![1, 2], vec![2]).unwrap();
        let b = Array::from_u8(vec![3, 4], vec![2]).unwrap();
        let s = Array::stack(&[(0, &a), (5, &b)], None).unwrap();
        assert_eq!(s.shape, vec![2, 2]);
        assert_eq!(s.buffer, Buffer::U8(vec![1, 2, 3, 4]));
    }

    #[test]
    fn stack_names_mismatched_samples() {
        let a = Array::from_u8(vec![1, 2], vec![2]).unwrap();
        let b = Array::from_u8(vec![3, 4, 5], vec![3]).unwrap();
        let msg = Array::stack(&[(4, &a), (9, &b)], None).unwrap_err().to_string();
        assert!(msg.contains("sample 9") && msg.contains("[3]") && msg.contains("sample 4"), "{msg}");
        let c = Array::from_f32(vec![3.0, 4.0], vec![2]).unwrap();
        let err = Array::stack(&[(4, &a), (7, &c)], Some("x")).unwrap_err();
        assert!(matches!(err, ArrayError::DTypeMismatch { index: 7, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("float32") && msg.contains("uint8") && msg.contains("`x`"), "{msg}");
        assert!(matches!(Array::stack(&[], None), Err(ArrayError::EmptyStack)));
    }
}
