//! `BatchSampler`: a sampler's indices cut into batches, with `drop_last`.

use crate::error::{DataError, Result};
use crate::sampler::Sampler;

/// `BatchSampler(sampler, batch_size, drop_last)`: consecutive runs of `batch_size` indices.
/// The last batch is smaller when the length is not a multiple of `batch_size`, or dropped
/// with `drop_last`, as in PyTorch.
pub struct BatchSampler {
    sampler: Box<dyn Sampler>,
    batch_size: usize,
    drop_last: bool,
}

impl BatchSampler {
    /// Batches of `batch_size` (> 0, else an error naming `batch_size`) from `sampler`.
    pub fn new(sampler: impl Sampler + 'static, batch_size: usize, drop_last: bool) -> Result<Self> {
        if batch_size == 0 {
            return Err(DataError::Config { field: "batch_size", reason: "must be positive".to_string() });
        }
        Ok(BatchSampler { sampler: Box::new(sampler), batch_size, drop_last })
    }

    /// The number of batches per epoch (`len(batch_sampler)`).
    pub fn len(&self) -> usize {
        if self.drop_last {
            self.sampler.len() / self.batch_size
        } else {
            self.sampler.len().div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Whether a last, smaller batch is dropped.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// The batches of epoch `epoch`.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let indices = self.sampler.indices(epoch);
        let mut batches: Vec<Vec<usize>> = indices.chunks(self.batch_size).map(<[usize]>::to_vec).collect();
        if self.drop_last && batches.last().is_some_and(|b| b.len() < self.batch_size) {
            batches.pop();
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::SequentialSampler;

    #[test]
    fn last_batch_is_short_or_dropped() {
        let keep = BatchSampler::new(SequentialSampler::new(10), 4, false).unwrap();
        assert_eq!(keep.len(), 3);
        assert_eq!(keep.batches(0), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        let drop = BatchSampler::new(SequentialSampler::new(10), 4, true).unwrap();
        assert_eq!(drop.len(), 2);
        assert_eq!(drop.batches(0).len(), 2);
        assert!(BatchSampler::new(SequentialSampler::new(10), 0, false).is_err());
    }
}
