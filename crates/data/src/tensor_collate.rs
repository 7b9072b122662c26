//! Collation into tch tensors (the `tch` feature): [`DefaultCollate`] for `Array` and `Tensor`
//! samples, and [`ArrayToTensor`].

use crate::collate::{labels, stack_keyed, Collate, DefaultCollate};
use crate::error::{DataError, Result};
use std::collections::BTreeMap;
use tch::{Kind, Tensor};
use torchlight_base::{Array, ArrayError, Buffer};
use torchlight_tensor::{empty_pinned, pin_memory, pinning_supported};

/// Turning an [`Array`] into a tch tensor.
pub trait ArrayToTensor {
    /// A CPU tensor with this array's shape and elements (one copy into libtorch memory).
    ///
    /// With `pin_memory`, the tensor is allocated in pinned host memory where CUDA is usable
    /// (ready for a non-blocking copy to the GPU), like PyTorch's `pin_memory=True`; on
    /// CPU-only machines the flag is a no-op. Pinned blocks come from libtorch's caching host
    /// allocator, so a batch's block is reused for a later batch once the batch is dropped and
    /// the copies recorded on it have finished.
    fn to_tensor(&self, pin_memory: bool) -> Result<Tensor>;
}

impl ArrayToTensor for Array {
    fn to_tensor(&self, pin_memory: bool) -> Result<Tensor> {
        self.check()?;
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        // Straight into uninitialised (pinned where asked) memory: one copy, no zero fill.
        let mut tensor = if pin_memory && pinning_supported() {
            empty_pinned(&shape, kind_of(&self.buffer))?
        } else {
            Tensor::f_empty(shape.as_slice(), (kind_of(&self.buffer), tch::Device::Cpu))?
        };
        fill(&mut tensor, [&self.buffer]);
        Ok(tensor)
    }
}

/// The tensor element type of `buffer`'s elements.
fn kind_of(buffer: &Buffer) -> Kind {
    match buffer {
        Buffer::U8(_) => Kind::Uint8,
        Buffer::F32(_) => Kind::Float,
        Buffer::I64(_) => Kind::Int64,
    }
}

/// Copies `buffers` one after the other into `tensor`, a fresh contiguous CPU tensor of their
/// element type holding exactly their elements together (every caller allocates it so).
fn fill<'a>(tensor: &mut Tensor, buffers: impl IntoIterator<Item = &'a Buffer>) {
    let total = tensor.numel();
    let base = tensor.data_ptr();
    let mut at = 0usize;
    for buffer in buffers {
        let len = buffer.len();
        assert!(at + len <= total && kind_of(buffer) == tensor.kind(), "fill: buffers do not fit the tensor");
        // SAFETY: `tensor` is a contiguous CPU tensor of `total` elements of this buffer's
        // element type (checked just above, with the bounds), allocated by the caller and
        // borrowed exclusively here, so elements `at..at + len` are valid, writable and do not
        // overlap the source `Vec`.
        unsafe {
            match buffer {
                Buffer::U8(v) => std::ptr::copy_nonoverlapping(v.as_ptr(), (base as *mut u8).add(at), len),
                Buffer::F32(v) => std::ptr::copy_nonoverlapping(v.as_ptr(), (base as *mut f32).add(at), len),
                Buffer::I64(v) => std::ptr::copy_nonoverlapping(v.as_ptr(), (base as *mut i64).add(at), len),
            }
        }
        at += len;
    }
    assert_eq!(at, total, "fill: buffers do not fill the tensor");
}

/// Stacks `Array` samples straight into a new uninitialised tensor `[N, S...]` (no stacked
/// host buffer in between, no zero fill), with [`Array::stack`]'s checks and errors.
fn stack_arrays(items: &[(usize, &Array)], key: Option<&str>) -> Result<Tensor> {
    let shape: Vec<i64> = Array::stack_shape(items, key)?.into_iter().map(|d| d as i64).collect();
    let mut tensor = Tensor::f_empty(shape.as_slice(), (kind_of(&items[0].1.buffer), tch::Device::Cpu))?;
    fill(&mut tensor, items.iter().map(|(_, a)| &a.buffer));
    Ok(tensor)
}

/// `Array` samples are stacked by the worker that loaded them straight into a tensor (tensors
/// are `Send`); the consuming thread only pins it, when asked.
impl Collate<Array> for DefaultCollate {
    type Staged = Tensor;
    type Batch = Tensor;

    fn stage(&self, items: Vec<(usize, Array)>) -> Result<Tensor> {
        let refs: Vec<(usize, &Array)> = items.iter().map(|(i, a)| (*i, a)).collect();
        stack_arrays(&refs, None)
    }

    fn finish(&self, staged: Tensor, pin_memory: bool) -> Result<Tensor> {
        Ok(pinned_if(staged, pin_memory))
    }
}

/// `(Array, i64)` samples: the inputs stacked as `Array` samples are, the labels an `int64`
/// tensor `[N]`.
impl Collate<(Array, i64)> for DefaultCollate {
    type Staged = (Tensor, Tensor);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Array, i64))>) -> Result<(Tensor, Tensor)> {
        let inputs: Vec<(usize, &Array)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        let labels = labels(items.iter().map(|(_, (_, label))| *label))?;
        Ok((stack_arrays(&inputs, None)?, labels.to_tensor(false)?))
    }

    fn finish(&self, (inputs, labels): (Tensor, Tensor), pin: bool) -> Result<(Tensor, Tensor)> {
        Ok((pinned_if(inputs, pin), pinned_if(labels, pin)))
    }
}

/// `(Array, Array)` samples: each part stacked as `Array` samples are.
impl Collate<(Array, Array)> for DefaultCollate {
    type Staged = (Tensor, Tensor);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Array, Array))>) -> Result<(Tensor, Tensor)> {
        let inputs: Vec<(usize, &Array)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        let targets: Vec<(usize, &Array)> = items.iter().map(|(i, (_, y))| (*i, y)).collect();
        Ok((stack_arrays(&inputs, Some("0"))?, stack_arrays(&targets, Some("1"))?))
    }

    fn finish(&self, (inputs, targets): (Tensor, Tensor), pin: bool) -> Result<(Tensor, Tensor)> {
        Ok((pinned_if(inputs, pin), pinned_if(targets, pin)))
    }
}

impl Collate<BTreeMap<String, Array>> for DefaultCollate {
    type Staged = BTreeMap<String, Tensor>;
    type Batch = BTreeMap<String, Tensor>;

    fn stage(&self, items: Vec<(usize, BTreeMap<String, Array>)>) -> Result<Self::Staged> {
        stack_keyed(&items, |refs, key| stack_arrays(refs, Some(key)))
    }

    fn finish(&self, staged: Self::Staged, pin: bool) -> Result<Self::Batch> {
        Ok(staged.into_iter().map(|(key, t)| (key, pinned_if(t, pin))).collect())
    }
}

impl Collate<Tensor> for DefaultCollate {
    type Staged = Tensor;
    type Batch = Tensor;

    fn stage(&self, items: Vec<(usize, Tensor)>) -> Result<Tensor> {
        let refs: Vec<(usize, &Tensor)> = items.iter().map(|(i, t)| (*i, t)).collect();
        stack_tensors(&refs, None)
    }

    fn finish(&self, staged: Tensor, pin: bool) -> Result<Tensor> {
        Ok(pinned_if(staged, pin))
    }
}

impl Collate<(Tensor, Tensor)> for DefaultCollate {
    type Staged = (Tensor, Tensor);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Tensor, Tensor))>) -> Result<(Tensor, Tensor)> {
        let inputs: Vec<(usize, &Tensor)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        let targets: Vec<(usize, &Tensor)> = items.iter().map(|(i, (_, y))| (*i, y)).collect();
        Ok((stack_tensors(&inputs, Some("0"))?, stack_tensors(&targets, Some("1"))?))
    }

    fn finish(&self, (inputs, targets): (Tensor, Tensor), pin: bool) -> Result<(Tensor, Tensor)> {
        Ok((pinned_if(inputs, pin), pinned_if(targets, pin)))
    }
}

impl Collate<(Tensor, i64)> for DefaultCollate {
    type Staged = (Tensor, Array);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Tensor, i64))>) -> Result<(Tensor, Array)> {
        let inputs: Vec<(usize, &Tensor)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        Ok((stack_tensors(&inputs, None)?, labels(items.iter().map(|(_, (_, label))| *label))?))
    }

    fn finish(&self, (inputs, labels): (Tensor, Array), pin: bool) -> Result<(Tensor, Tensor)> {
        Ok((pinned_if(inputs, pin), labels.to_tensor(pin)?))
    }
}

impl Collate<BTreeMap<String, Tensor>> for DefaultCollate {
    type Staged = BTreeMap<String, Tensor>;
    type Batch = BTreeMap<String, Tensor>;

    fn stage(&self, items: Vec<(usize, BTreeMap<String, Tensor>)>) -> Result<Self::Staged> {
        stack_keyed(&items, |refs, key| stack_tensors(refs, Some(key)))
    }

    fn finish(&self, staged: Self::Staged, pin: bool) -> Result<Self::Batch> {
        Ok(staged.into_iter().map(|(key, t)| (key, pinned_if(t, pin))).collect())
    }
}

fn pinned_if(tensor: Tensor, pin: bool) -> Tensor {
    if pin {
        pin_memory(&tensor)
    } else {
        tensor
    }
}

/// `torch.stack(tensors, 0)` after checking that every tensor has the first one's shape,
/// element type and device, so that a mismatch names the samples (and key) at fault.
fn stack_tensors(items: &[(usize, &Tensor)], key: Option<&str>) -> Result<Tensor> {
    let Some(&(first_index, first)) = items.first() else {
        return Err(DataError::Config {
            field: "items",
            reason: "cannot stack an empty list of tensors".into(),
        });
    };
    let (shape, kind, device) = (first.size(), first.kind(), first.device());
    let in_key = || key.map(|k| format!(" (key `{k}`)")).unwrap_or_default();
    for &(index, tensor) in items {
        if tensor.size() != shape {
            return Err(ArrayError::ShapeMismatch {
                index,
                shape: tensor.size().iter().map(|&d| d as usize).collect(),
                first_index,
                first_shape: shape.iter().map(|&d| d as usize).collect(),
                key: key.map(str::to_string),
            }
            .into());
        }
        if tensor.kind() != kind {
            return Err(DataError::Collate {
                index,
                reason: format!(
                    "element type {} differs from the {} of sample {first_index}, the first of its batch{}",
                    dtype_name(tensor.kind()),
                    dtype_name(kind),
                    in_key()
                ),
            });
        }
        if tensor.device() != device {
            return Err(DataError::Collate {
                index,
                reason: format!(
                    "device {:?} differs from the {device:?} of sample {first_index}, the first of its batch{}",
                    tensor.device(),
                    in_key()
                ),
            });
        }
    }
    let tensors: Vec<&Tensor> = items.iter().map(|(_, t)| *t).collect();
    Ok(Tensor::f_stack(&tensors, 0)?)
}

/// PyTorch's name of an element type (`torch.float32`, ...), without the `torch.`.
pub(crate) fn dtype_name(kind: Kind) -> String {
    match kind {
        Kind::Uint8 => "uint8".into(),
        Kind::Int8 => "int8".into(),
        Kind::Int16 => "int16".into(),
        Kind::Int => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Half => "float16".into(),
        Kind::Float => "float32".into(),
        Kind::Double => "float64".into(),
        Kind::BFloat16 => "bfloat16".into(),
        Kind::Bool => "bool".into(),
        other => format!("{other:?}"),
    }
}
