//! Collation into tch tensors (the `tch` feature): [`DefaultCollate`] for `Array` and `Tensor`
//! samples, and [`ArrayToTensor`].

use crate::collate::{labels, stack_keyed, ArrayCollate, Collate, DefaultCollate};
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
        let (flat, kind) = match &self.buffer {
            Buffer::U8(v) => (Tensor::f_from_slice(v)?, Kind::Uint8),
            Buffer::F32(v) => (Tensor::f_from_slice(v)?, Kind::Float),
            Buffer::I64(v) => (Tensor::f_from_slice(v)?, Kind::Int64),
        };
        let tensor = flat.f_view(shape.as_slice())?;
        if pin_memory && pinning_supported() {
            let mut pinned = empty_pinned(&shape, kind)?;
            pinned.f_copy_(&tensor)?;
            Ok(pinned)
        } else {
            Ok(tensor)
        }
    }
}

impl Collate<Array> for DefaultCollate {
    type Staged = Array;
    type Batch = Tensor;

    fn stage(&self, items: Vec<(usize, Array)>) -> Result<Array> {
        ArrayCollate.stage(items)
    }

    fn finish(&self, staged: Array, pin_memory: bool) -> Result<Tensor> {
        staged.to_tensor(pin_memory)
    }
}

/// `(Array, i64)` and `(Array, Array)` samples: stacked as [`ArrayCollate`] stacks them, then
/// each part becomes a tensor (labels an `int64` tensor `[N]`).
impl<T> Collate<(Array, T)> for DefaultCollate
where
    ArrayCollate: Collate<(Array, T), Staged = (Array, Array)>,
{
    type Staged = (Array, Array);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Array, T))>) -> Result<(Array, Array)> {
        ArrayCollate.stage(items)
    }

    fn finish(&self, (inputs, targets): (Array, Array), pin_memory: bool) -> Result<(Tensor, Tensor)> {
        Ok((inputs.to_tensor(pin_memory)?, targets.to_tensor(pin_memory)?))
    }
}

impl Collate<BTreeMap<String, Array>> for DefaultCollate {
    type Staged = BTreeMap<String, Array>;
    type Batch = BTreeMap<String, Tensor>;

    fn stage(&self, items: Vec<(usize, BTreeMap<String, Array>)>) -> Result<Self::Staged> {
        ArrayCollate.stage(items)
    }

    fn finish(&self, staged: Self::Staged, pin_memory: bool) -> Result<Self::Batch> {
        staged.into_iter().map(|(key, array)| Ok((key, array.to_tensor(pin_memory)?))).collect()
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
