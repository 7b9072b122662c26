//! `ConcatDataset`: several datasets one after another (`torch.utils.data.ConcatDataset`).

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use torchlight_base::seed::Rng;

/// The samples of `datasets[0]`, then of `datasets[1]`, and so on, like PyTorch's
/// `ConcatDataset`. Errors come from the part and name the index within it.
pub struct ConcatDataset<D> {
    datasets: Vec<D>,
    /// `ends[k]`: one past the last global index of part `k` (PyTorch's `cumulative_sizes`).
    ends: Vec<usize>,
}

impl<D: Dataset> ConcatDataset<D> {
    /// The concatenation of `datasets` (which may be empty, or contain empty datasets).
    pub fn new(datasets: Vec<D>) -> Self {
        let ends = datasets
            .iter()
            .scan(0, |end, d| {
                *end += d.len();
                Some(*end)
            })
            .collect();
        ConcatDataset { datasets, ends }
    }

    /// The parts.
    pub fn datasets(&self) -> &[D] {
        &self.datasets
    }

    /// `(part, index within the part)` of global index `index`.
    pub fn locate(&self, index: usize) -> Result<(usize, usize)> {
        let part = self.ends.partition_point(|&end| end <= index);
        if part == self.datasets.len() {
            return Err(DataError::IndexOutOfRange { index, len: self.len() });
        }
        let start = if part == 0 { 0 } else { self.ends[part - 1] };
        Ok((part, index - start))
    }
}

impl<D: Dataset> Dataset for ConcatDataset<D> {
    type Item = D::Item;

    fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<D::Item> {
        let (part, local) = self.locate(index)?;
        self.datasets[part].get(local, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Range(usize, usize);
    impl Dataset for Range {
        type Item = usize;
        fn len(&self) -> usize {
            self.1 - self.0
        }
        fn get(&self, index: usize, _: &mut Rng) -> Result<usize> {
            Ok(self.0 + index)
        }
    }

    #[test]
    fn indices_run_through_the_parts() {
        let c = ConcatDataset::new(vec![Range(0, 3), Range(10, 10), Range(20, 22)]);
        let mut rng = torchlight_base::seed::rng_from_seed(0);
        assert_eq!(c.len(), 5);
        let got: Vec<usize> = (0..5).map(|i| c.get(i, &mut rng).unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 20, 21]);
        assert!(matches!(c.get(5, &mut rng), Err(DataError::IndexOutOfRange { index: 5, len: 5 })));
    }
}
