//! Collation: turning a batch's samples into a batch, in two steps: stacking in a worker, then
//! (for tensor batches) building tensors once per batch on the consumer thread.

use crate::error::{DataError, Result};
use std::collections::BTreeMap;
use torchlight_base::Array;

/// How a list of samples becomes a batch (PyTorch's `collate_fn`).
///
/// Split in two because tch tensors are not `Sync` (tch-rs issue 752): [`stage`] runs in a
/// worker thread and does the copying into one contiguous buffer (or tensor) per field;
/// [`finish`] runs on the thread that iterates the loader and makes the batch from it (into
/// pinned memory with `pin_memory`, for tensor batches).
///
/// [`stage`]: Collate::stage
/// [`finish`]: Collate::finish
pub trait Collate<Item>: Send + Sync + 'static {
    /// A batch as staged by a worker, sent from the worker to the consumer.
    type Staged: Send + 'static;
    /// The batch handed to the training loop.
    type Batch;

    /// Stacks the samples of one batch; each comes with its dataset index, which errors name.
    /// `items` is never empty.
    fn stage(&self, items: Vec<(usize, Item)>) -> Result<Self::Staged>;

    /// Makes the batch on the consuming thread; a tensor batch goes into pinned host memory
    /// when `pin_memory` is set and CUDA is usable.
    fn finish(&self, staged: Self::Staged, pin_memory: bool) -> Result<Self::Batch>;
}

/// PyTorch's `default_collate` without tensors: [`Array`] samples are stacked into `Array`
/// batches, for a program that feeds another engine (burn, candle, ort) or converts batches
/// itself. Needs no libtorch, so it works without this crate's `tch` feature.
///
/// - `Array` -> `Array [N, S...]`
/// - `(Array, i64)` (input, label) -> `(Array [N, S...], Array [N] int64)`
/// - `(Array, Array)` (input, target) -> `(Array [N, S...], Array [N, T...])`
/// - `BTreeMap<String, Array>` -> `BTreeMap<String, Array>`; every sample must have the first
///   sample's keys.
///
/// Samples of different shapes fail with [`ArrayError::ShapeMismatch`](crate::ArrayError::ShapeMismatch) (inside
/// [`DataError::Array`]), naming both samples' indices and shapes; `pin_memory` does nothing
/// here.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArrayCollate;

impl Collate<Array> for ArrayCollate {
    type Staged = Array;
    type Batch = Array;

    fn stage(&self, items: Vec<(usize, Array)>) -> Result<Array> {
        let refs: Vec<(usize, &Array)> = items.iter().map(|(i, a)| (*i, a)).collect();
        Ok(Array::stack(&refs, None)?)
    }

    fn finish(&self, staged: Array, _pin_memory: bool) -> Result<Array> {
        Ok(staged)
    }
}

impl Collate<(Array, i64)> for ArrayCollate {
    type Staged = (Array, Array);
    type Batch = (Array, Array);

    fn stage(&self, items: Vec<(usize, (Array, i64))>) -> Result<(Array, Array)> {
        let refs: Vec<(usize, &Array)> = items.iter().map(|(i, (a, _))| (*i, a)).collect();
        Ok((Array::stack(&refs, None)?, labels(items.iter().map(|(_, (_, label))| *label))?))
    }

    fn finish(&self, staged: (Array, Array), _pin_memory: bool) -> Result<(Array, Array)> {
        Ok(staged)
    }
}

impl Collate<(Array, Array)> for ArrayCollate {
    type Staged = (Array, Array);
    type Batch = (Array, Array);

    fn stage(&self, items: Vec<(usize, (Array, Array))>) -> Result<(Array, Array)> {
        let inputs: Vec<(usize, &Array)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        let targets: Vec<(usize, &Array)> = items.iter().map(|(i, (_, y))| (*i, y)).collect();
        Ok((Array::stack(&inputs, Some("0"))?, Array::stack(&targets, Some("1"))?))
    }

    fn finish(&self, staged: (Array, Array), _pin_memory: bool) -> Result<(Array, Array)> {
        Ok(staged)
    }
}

impl Collate<BTreeMap<String, Array>> for ArrayCollate {
    type Staged = BTreeMap<String, Array>;
    type Batch = BTreeMap<String, Array>;

    fn stage(&self, items: Vec<(usize, BTreeMap<String, Array>)>) -> Result<Self::Staged> {
        stack_keyed(&items, |refs, key| Ok(Array::stack(refs, Some(key))?))
    }

    fn finish(&self, staged: Self::Staged, _pin_memory: bool) -> Result<Self::Batch> {
        Ok(staged)
    }
}

/// PyTorch's `default_collate` for Torchlight's sample types, into tch tensors (with the
/// `tch` feature; without it this type collates nothing, and [`ArrayCollate`] stacks plain
/// buffers instead). Samples are stacked along a new leading dimension (`[S...]` ->
/// `[N, S...]`, same element type), labels become an `int64` tensor `[N]`, and keyed samples
/// become a map of stacked tensors:
///
/// - `Array` -> `Tensor [N, S...]`
/// - `(Array, i64)` (image, label) -> `(Tensor [N, S...], Tensor [N] int64)`
/// - `(Array, Array)` (input, target) -> `(Tensor [N, S...], Tensor [N, T...])`
/// - `BTreeMap<String, Array>` -> `BTreeMap<String, Tensor>`
/// - `Tensor` -> `Tensor [N, S...]`
/// - `(Tensor, Tensor)` (input, target) -> `(Tensor [N, S...], Tensor [N, T...])`
/// - `(Tensor, i64)` -> `(Tensor [N, S...], Tensor [N] int64)`
/// - `BTreeMap<String, Tensor>` -> `BTreeMap<String, Tensor>`
///
/// Keyed samples must all have the first sample's keys; in errors, the elements of a pair are
/// keys `0` and `1`. Samples are stacked by the worker that
/// loaded them (tensors are `Send`): `Array` samples copied straight into an uninitialised
/// batch tensor (no stacked host buffer, no zero fill), tensor samples with `torch.stack`; the
/// consuming thread only pins the batch, when asked. Samples of different shapes fail with [`ArrayError::ShapeMismatch`](crate::ArrayError::ShapeMismatch)
/// (inside [`DataError::Array`]), naming both samples' indices and shapes; `Array`s of other
/// element types with [`ArrayError::DTypeMismatch`](crate::ArrayError::DTypeMismatch); tensors of other element types or devices
/// with [`DataError::Collate`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultCollate;

/// The labels of a batch as an `int64` array `[N]`.
pub(crate) fn labels(labels: impl Iterator<Item = i64>) -> Result<Array> {
    let labels: Vec<i64> = labels.collect();
    let n = labels.len();
    Ok(Array::from_i64(labels, vec![n])?)
}

/// Stacks keyed samples key by key with `stack`, after checking that every sample has the
/// keys of the first.
pub(crate) fn stack_keyed<T, S>(
    items: &[(usize, BTreeMap<String, T>)],
    stack: impl Fn(&[(usize, &T)], &str) -> Result<S>,
) -> Result<BTreeMap<String, S>> {
    let Some((first_index, first)) = items.first() else {
        return Ok(BTreeMap::new());
    };
    for (index, sample) in items {
        if !sample.keys().eq(first.keys()) {
            return Err(DataError::Collate {
                index: *index,
                reason: format!(
                    "keys {:?} differ from those of sample {first_index}, the first of its batch: {:?}",
                    sample.keys().collect::<Vec<_>>(),
                    first.keys().collect::<Vec<_>>()
                ),
            });
        }
    }
    first
        .keys()
        .map(|key| {
            let refs: Vec<(usize, &T)> = items.iter().map(|(i, sample)| (*i, &sample[key])).collect();
            Ok((key.clone(), stack(&refs, key)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_base::ArrayError;

    fn keyed(index: usize, keys: &[&str]) -> (usize, BTreeMap<String, Array>) {
        let map = keys
            .iter()
            .map(|k| (k.to_string(), Array::from_u8(vec![index as u8; 2], vec![2]).unwrap()))
            .collect();
        (index, map)
    }

    #[test]
    fn array_collate_stacks_inputs_labels_and_keys() {
        let a = Array::from_f32(vec![1.0, 2.0], vec![2]).unwrap();
        let b = Array::from_f32(vec![3.0, 4.0], vec![2]).unwrap();
        let (x, y) = ArrayCollate.stage(vec![(0, (a, 7)), (1, (b, 9))]).unwrap();
        assert_eq!((x.shape, y), (vec![2, 2], Array::from_i64(vec![7, 9], vec![2]).unwrap()));
        let a = Array::from_f32(vec![1.0, 2.0], vec![2]).unwrap();
        let t = Array::from_f32(vec![0.5], vec![1]).unwrap();
        let (x, y) = ArrayCollate.stage(vec![(0, (a.clone(), t.clone())), (1, (a, t))]).unwrap();
        assert_eq!((x.shape, y.shape), (vec![2, 2], vec![2, 1]));
        let maps = ArrayCollate.stage(vec![keyed(3, &["a", "b"]), keyed(4, &["a", "b"])]).unwrap();
        assert_eq!(maps["b"], Array::from_u8(vec![3, 3, 4, 4], vec![2, 2]).unwrap());
    }

    #[test]
    fn samples_with_other_keys_are_named() {
        let err = ArrayCollate.stage(vec![keyed(3, &["a", "b"]), keyed(8, &["a"])]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, DataError::Collate { index: 8, .. }) && msg.contains("sample 3"), "{msg}");
    }

    #[test]
    fn a_ragged_batch_is_a_shape_mismatch() {
        let a = Array::from_u8(vec![1, 2], vec![2]).unwrap();
        let b = Array::from_u8(vec![1, 2, 3], vec![3]).unwrap();
        let err = ArrayCollate.stage(vec![(5, a), (6, b)]).unwrap_err();
        assert!(
            matches!(err, DataError::Array(ArrayError::ShapeMismatch { index: 6, first_index: 5, .. })),
            "{err}"
        );
    }
}
