//! Collation: turning a batch's samples into batch tensors, in two steps: stacking plain
//! buffers in a worker, then building tensors once per batch on the consumer thread.

use crate::array::Array;
use crate::error::{DataError, Result};
use std::collections::BTreeMap;
use tch::Tensor;

/// How a list of samples becomes a batch (PyTorch's `collate_fn`).
///
/// Split in two because tch tensors must not cross threads (tch-rs issue 752): [`stage`] runs in
/// a worker thread and does the copying into one contiguous buffer per field; [`finish`] runs on
/// the thread that iterates the loader and turns each buffer into a tensor with one copy
/// (into pinned memory with `pin_memory`).
///
/// [`stage`]: Collate::stage
/// [`finish`]: Collate::finish
pub trait Collate<Item>: Send + Sync + 'static {
    /// A batch in plain host buffers, sent from a worker to the consumer.
    type Staged: Send + 'static;
    /// The batch handed to the training loop.
    type Batch;

    /// Stacks the samples of one batch; each comes with its dataset index, which errors name.
    /// `items` is never empty.
    fn stage(&self, items: Vec<(usize, Item)>) -> Result<Self::Staged>;

    /// Builds the batch's tensors, in pinned host memory when `pin_memory` is set and CUDA is
    /// usable (see [`Array::to_tensor`]).
    fn finish(&self, staged: Self::Staged, pin_memory: bool) -> Result<Self::Batch>;
}

/// PyTorch's `default_collate` for Torchlight's sample types: arrays are stacked along a new
/// leading dimension (`[S...]` -> `[N, S...]`, same element type), labels become an `int64`
/// tensor `[N]`, and keyed samples become a map of stacked tensors.
///
/// - `Array` -> `Tensor [N, S...]`
/// - `(Array, i64)` (image, label) -> `(Tensor [N, S...], Tensor [N] int64)`
/// - `BTreeMap<String, Array>` -> `BTreeMap<String, Tensor>`; every sample must have the
///   first sample's keys.
///
/// Samples of different shapes fail with [`DataError::ShapeMismatch`], naming both samples'
/// indices and shapes.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultCollate;

impl Collate<Array> for DefaultCollate {
    type Staged = Array;
    type Batch = Tensor;

    fn stage(&self, items: Vec<(usize, Array)>) -> Result<Array> {
        let refs: Vec<(usize, &Array)> = items.iter().map(|(i, a)| (*i, a)).collect();
        Array::stack(&refs, None)
    }

    fn finish(&self, staged: Array, pin_memory: bool) -> Result<Tensor> {
        staged.to_tensor(pin_memory)
    }
}

impl Collate<(Array, i64)> for DefaultCollate {
    type Staged = (Array, Array);
    type Batch = (Tensor, Tensor);

    fn stage(&self, items: Vec<(usize, (Array, i64))>) -> Result<(Array, Array)> {
        let refs: Vec<(usize, &Array)> = items.iter().map(|(i, (a, _))| (*i, a)).collect();
        let inputs = Array::stack(&refs, None)?;
        let labels: Vec<i64> = items.iter().map(|(_, (_, label))| *label).collect();
        let n = labels.len();
        Ok((inputs, Array::from_i64(labels, vec![n])?))
    }

    fn finish(&self, (inputs, labels): (Array, Array), pin_memory: bool) -> Result<(Tensor, Tensor)> {
        Ok((inputs.to_tensor(pin_memory)?, labels.to_tensor(pin_memory)?))
    }
}

impl Collate<BTreeMap<String, Array>> for DefaultCollate {
    type Staged = BTreeMap<String, Array>;
    type Batch = BTreeMap<String, Tensor>;

    fn stage(&self, items: Vec<(usize, BTreeMap<String, Array>)>) -> Result<Self::Staged> {
        let Some((first_index, first)) = items.first() else {
            return Ok(BTreeMap::new());
        };
        for (index, sample) in &items {
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
                let refs: Vec<(usize, &Array)> = items.iter().map(|(i, sample)| (*i, &sample[key])).collect();
                Ok((key.clone(), Array::stack(&refs, Some(key))?))
            })
            .collect()
    }

    fn finish(&self, staged: Self::Staged, pin_memory: bool) -> Result<Self::Batch> {
        staged.into_iter().map(|(key, array)| Ok((key, array.to_tensor(pin_memory)?))).collect()
    }
}
