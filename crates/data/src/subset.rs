//! `Subset`: the samples of a shared dataset at a list of indices (`torch.utils.data.Subset`).

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use torchlight_tensor::seed::Rng;

/// The samples of `dataset` at `indices`, in that order: sample `i` of the subset is sample
/// `indices[i]` of the dataset. Like PyTorch's `Subset`, but the indices are checked once.
pub struct Subset<D: ?Sized> {
    dataset: Arc<D>,
    indices: Vec<usize>,
}

impl<D: Dataset + ?Sized> Subset<D> {
    /// A subset; fails with [`DataError::IndexOutOfRange`] if an index is past the end.
    pub fn new(dataset: Arc<D>, indices: Vec<usize>) -> Result<Self> {
        let len = dataset.len();
        if let Some(&index) = indices.iter().find(|&&i| i >= len) {
            return Err(DataError::IndexOutOfRange { index, len });
        }
        Ok(Subset { dataset, indices })
    }

    /// The indices into the underlying dataset.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The underlying dataset.
    pub fn dataset(&self) -> &Arc<D> {
        &self.dataset
    }

    /// The number of samples per label in this subset, given the underlying dataset's labels
    /// (`labels[i]` is the label of dataset sample `i`, e.g. ImageFolder's `targets`).
    pub fn class_counts(&self, labels: &[i64]) -> Result<BTreeMap<i64, usize>> {
        if labels.len() != self.dataset.len() {
            return Err(DataError::Config {
                field: "labels",
                reason: format!("{} labels for a dataset of {} samples", labels.len(), self.dataset.len()),
            });
        }
        class_counts(labels, &self.indices)
    }
}

impl<D: Dataset + ?Sized> Dataset for Subset<D> {
    type Item = D::Item;

    fn len(&self) -> usize {
        self.indices.len()
    }

    /// Errors come from the underlying dataset and name its index (and file).
    fn get(&self, index: usize, rng: &mut Rng) -> Result<D::Item> {
        let &inner =
            self.indices.get(index).ok_or(DataError::IndexOutOfRange { index, len: self.indices.len() })?;
        self.dataset.get(inner, rng)
    }
}

/// The number of samples per label among `indices` (`labels[i]` is sample `i`'s label), to
/// spot class imbalance in a split. Labels are keys in ascending order; labels with no sample
/// among `indices` are absent.
pub fn class_counts(labels: &[i64], indices: &[usize]) -> Result<BTreeMap<i64, usize>> {
    let mut counts = BTreeMap::new();
    for &index in indices {
        let &label = labels.get(index).ok_or(DataError::IndexOutOfRange { index, len: labels.len() })?;
        *counts.entry(label).or_insert(0) += 1;
    }
    Ok(counts)
}
