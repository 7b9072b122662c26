//! Seeded splits of a dataset: `random_split` (by fractions or counts, like
//! `torch.utils.data.random_split`), a stratified split by label, and per-class counts.
//!
//! A split is a pure function of (dataset length, sizes, seed) — and the labels, for the
//! stratified one — so the same seed gives the same validation set on every run and machine.
//! PyTorch's `random_split` without a `generator` draws from the global generator, which is the
//! usual cause of "my validation set changed between runs"; here the seed is required.

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::random::{randperm, shuffle};
use crate::subset::Subset;
use std::collections::BTreeMap;
use std::sync::Arc;
use torchlight_tensor::seed::{derive_seed, rng_from_seed};

/// Seed stream of splits: `derive_seed(seed, [STREAM_SPLIT])` seeds `random_split`,
/// `derive_seed(seed, [STREAM_SPLIT, 1])` the stratified split. It continues the stream tags of
/// `torchlight_tensor::seed` (1 epoch, 2 sample, 3 global).
pub const STREAM_SPLIT: u64 = 4;

/// The sizes of the parts of a split.
#[derive(Debug, Clone, PartialEq)]
pub enum SplitSizes {
    /// Fractions of the dataset summing to 1, e.g. `[0.8, 0.1, 0.1]`. As in PyTorch, part `i`
    /// gets `floor(n * f[i])` samples and the remainder is dealt one by one to parts
    /// `0, 1, 2, ...` in turn.
    Fractions(Vec<f64>),
    /// Exact counts summing to the dataset's length.
    Counts(Vec<usize>),
}

impl From<Vec<f64>> for SplitSizes {
    fn from(f: Vec<f64>) -> Self {
        SplitSizes::Fractions(f)
    }
}

impl From<&[f64]> for SplitSizes {
    fn from(f: &[f64]) -> Self {
        SplitSizes::Fractions(f.to_vec())
    }
}

impl<const K: usize> From<[f64; K]> for SplitSizes {
    fn from(f: [f64; K]) -> Self {
        SplitSizes::Fractions(f.to_vec())
    }
}

impl From<Vec<usize>> for SplitSizes {
    fn from(c: Vec<usize>) -> Self {
        SplitSizes::Counts(c)
    }
}

impl From<&[usize]> for SplitSizes {
    fn from(c: &[usize]) -> Self {
        SplitSizes::Counts(c.to_vec())
    }
}

impl<const K: usize> From<[usize; K]> for SplitSizes {
    fn from(c: [usize; K]) -> Self {
        SplitSizes::Counts(c.to_vec())
    }
}

impl SplitSizes {
    /// The sample count of each part for a dataset of `n` samples (PyTorch's rule for
    /// fractions). Fails naming `sizes` if fractions are outside `[0, 1]` or do not sum to 1
    /// (within 1e-9), or counts do not sum to `n`.
    pub fn lengths(&self, n: usize) -> Result<Vec<usize>> {
        let bad = |reason: String| DataError::Config { field: "sizes", reason };
        match self {
            SplitSizes::Fractions(fractions) => {
                if fractions.is_empty() {
                    return Err(bad("no fractions given".to_string()));
                }
                if let Some(f) = fractions.iter().find(|f| !(0.0..=1.0).contains(*f)) {
                    return Err(bad(format!("fraction {f} is outside [0, 1]")));
                }
                let sum: f64 = fractions.iter().sum();
                if (sum - 1.0).abs() > 1e-9 {
                    return Err(bad(format!("fractions {fractions:?} sum to {sum}, not 1")));
                }
                let mut lengths: Vec<usize> =
                    fractions.iter().map(|f| (n as f64 * f).floor() as usize).collect();
                let assigned: usize = lengths.iter().sum();
                let k = lengths.len();
                for i in 0..n.saturating_sub(assigned) {
                    lengths[i % k] += 1;
                }
                Ok(lengths)
            }
            SplitSizes::Counts(counts) => {
                let sum: usize = counts.iter().sum();
                if counts.is_empty() || sum != n {
                    return Err(bad(format!("counts {counts:?} sum to {sum}, not the dataset's length {n}")));
                }
                Ok(counts.clone())
            }
        }
    }
}

/// The dataset indices of each part of a random split of `0..n`: a seeded permutation cut
/// into consecutive runs of the part sizes, as PyTorch's `random_split` does.
pub fn random_split_indices(n: usize, sizes: impl Into<SplitSizes>, seed: u64) -> Result<Vec<Vec<usize>>> {
    let lengths = sizes.into().lengths(n)?;
    let perm = randperm(&mut rng_from_seed(derive_seed(seed, &[STREAM_SPLIT])), n);
    let mut rest = perm.as_slice();
    Ok(lengths
        .iter()
        .map(|&len| {
            let (part, tail) = rest.split_at(len);
            rest = tail;
            part.to_vec()
        })
        .collect())
}

/// `torch.utils.data.random_split(dataset, sizes, generator=torch.Generator().manual_seed(seed))`:
/// non-overlapping [`Subset`]s of `dataset` of the given sizes. The same seed and sizes give the
/// same parts on every run and machine (the permutation is not PyTorch's own, so the parts
/// differ from PyTorch's for the same seed).
pub fn random_split<D: Dataset + ?Sized>(
    dataset: &Arc<D>,
    sizes: impl Into<SplitSizes>,
    seed: u64,
) -> Result<Vec<Subset<D>>> {
    random_split_indices(dataset.len(), sizes, seed)?
        .into_iter()
        .map(|indices| Subset::new(Arc::clone(dataset), indices))
        .collect()
}

/// The dataset indices of each part of a split that keeps every label's proportion, like
/// scikit-learn's `train_test_split(..., stratify=labels)`.
///
/// The part sizes are exactly those of [`random_split_indices`] for the same `sizes`. Samples
/// are grouped by label (labels in ascending order, each group shuffled) and dealt to the parts
/// in an evenly interleaved pattern, so every label lands in each part in proportion, within
/// one sample. Each part is then shuffled so that its labels are mixed.
pub fn stratified_split_indices(
    labels: &[i64],
    sizes: impl Into<SplitSizes>,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let n = labels.len();
    let lengths = sizes.into().lengths(n)?;
    let mut rng = rng_from_seed(derive_seed(seed, &[STREAM_SPLIT, 1]));
    let mut by_label: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (index, &label) in labels.iter().enumerate() {
        by_label.entry(label).or_default().push(index);
    }
    let mut parts: Vec<Vec<usize>> = lengths.iter().map(|&l| Vec::with_capacity(l)).collect();
    // Deal position j of the label-grouped order to the part furthest behind its share
    // (largest `lengths[i] * (j + 1) - assigned[i] * n`): every part ends at exactly its length
    // and every contiguous run of positions (one label) is split in proportion.
    let mut position: u128 = 0;
    for mut group in by_label.into_values() {
        shuffle(&mut rng, &mut group);
        for index in group {
            position += 1;
            let part = (0..parts.len())
                .max_by_key(|&i| {
                    let target = lengths[i] as u128 * position;
                    let have = parts[i].len() as u128 * n as u128;
                    // Ties go to the lowest part index (max_by_key keeps the last maximum).
                    (target as i128 - have as i128, std::cmp::Reverse(i))
                })
                .unwrap_or(0);
            parts[part].push(index);
        }
    }
    for part in &mut parts {
        shuffle(&mut rng, part);
    }
    Ok(parts)
}

/// [`stratified_split_indices`] as [`Subset`]s of `dataset`; `labels[i]` is the label of
/// sample `i` (e.g. ImageFolder's targets), so `labels.len()` must equal `dataset.len()`.
pub fn stratified_split<D: Dataset + ?Sized>(
    dataset: &Arc<D>,
    labels: &[i64],
    sizes: impl Into<SplitSizes>,
    seed: u64,
) -> Result<Vec<Subset<D>>> {
    if labels.len() != dataset.len() {
        return Err(DataError::Config {
            field: "labels",
            reason: format!("{} labels for a dataset of {} samples", labels.len(), dataset.len()),
        });
    }
    stratified_split_indices(labels, sizes, seed)?
        .into_iter()
        .map(|indices| Subset::new(Arc::clone(dataset), indices))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subset::class_counts;

    #[test]
    fn fraction_lengths_follow_pytorch() {
        // torch.utils.data.random_split(range(10), [0.5, 0.3, 0.2]) -> [5, 3, 2];
        // range(11), [0.34, 0.33, 0.33] -> floor gives [3, 3, 3], remainder 2 -> [4, 4, 3];
        // range(7), [0.5, 0.5] -> [4, 3] (checked against torch 2.11.0).
        assert_eq!(SplitSizes::from([0.5, 0.3, 0.2]).lengths(10).unwrap(), [5, 3, 2]);
        assert_eq!(SplitSizes::from([0.34, 0.33, 0.33]).lengths(11).unwrap(), [4, 4, 3]);
        assert_eq!(SplitSizes::from([0.5, 0.5]).lengths(7).unwrap(), [4, 3]);
        assert!(SplitSizes::from([0.5, 0.6]).lengths(10).is_err());
        assert!(SplitSizes::from([5usize, 4]).lengths(10).is_err());
        assert_eq!(SplitSizes::from([6usize, 4]).lengths(10).unwrap(), [6, 4]);
    }

    #[test]
    fn parts_cover_the_dataset_once() {
        let parts = random_split_indices(100, [0.7, 0.2, 0.1], 9).unwrap();
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [70, 20, 10]);
        let mut all: Vec<usize> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn stratified_parts_keep_proportions() {
        // 60 of label 0, 30 of label 1, 10 of label 2.
        let labels: Vec<i64> = (0..100)
            .map(|i| {
                if i < 60 {
                    0
                } else if i < 90 {
                    1
                } else {
                    2
                }
            })
            .collect();
        let parts = stratified_split_indices(&labels, [0.8, 0.2], 1).unwrap();
        assert_eq!(parts[0].len(), 80);
        assert_eq!(parts[1].len(), 20);
        let val = class_counts(&labels, &parts[1]).unwrap();
        assert_eq!(val, BTreeMap::from([(0, 12), (1, 6), (2, 2)]));
        let mut all: Vec<usize> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }
}
