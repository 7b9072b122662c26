//! `BucketSampler`: an epoch's order that puts documents of similar length in the same
//! batch, so padded batches carry little padding.

use crate::error::{Result, TextError};
use torchlight_base::rand::seq::SliceRandom;
use torchlight_base::seed::{epoch_seed, rng_from_seed};
use torchlight_data::Sampler;

/// Length bucketing (torchtext's `BucketIterator`, AllenNLP's `BucketBatchSampler`): each
/// epoch the indices are shuffled, cut into pools of `pool_batches * batch_size`, each pool
/// sorted by length (ties in shuffled order) and cut into batches, and the full batches are
/// shuffled; a last, smaller batch (when the length is not a multiple of `batch_size`) comes
/// last. Every index occurs exactly once per epoch.
///
/// Epoch `e`'s batches are a pure function of (`lengths`, `batch_size`, `pool_batches`, seed,
/// `e`), drawn from `epoch_seed(seed, e)`: the same at any worker count and after a resume.
///
/// As a [`Sampler`] it gives the batches one after another, so a `DataLoader` whose
/// `batch_size` equals this one's cuts them back exactly (with `drop_last`, the smaller batch
/// is the one dropped); [`batches`](BucketSampler::batches) gives them directly.
#[derive(Debug, Clone)]
pub struct BucketSampler {
    lengths: Vec<usize>,
    batch_size: usize,
    pool_batches: usize,
    seed: u64,
}

impl BucketSampler {
    /// Buckets documents of these token `lengths` (from
    /// [`Tokenized::lengths`](crate::Tokenized::lengths)) into batches of `batch_size`, in
    /// pools of 100 batches (torchtext's), from `seed`.
    ///
    /// # Errors
    /// [`TextError::Config`] naming `batch_size` when it is 0.
    pub fn new(lengths: Vec<usize>, batch_size: usize, seed: u64) -> Result<Self> {
        if batch_size == 0 {
            return Err(TextError::Config { field: "batch_size", reason: "must be positive".into() });
        }
        Ok(BucketSampler { lengths, batch_size, pool_batches: 100, seed })
    }

    /// Sorts within pools of `pool_batches` batches: fewer mixes lengths more (more padding,
    /// more randomness); `usize::MAX` sorts the whole epoch.
    ///
    /// # Errors
    /// [`TextError::Config`] naming `pool_batches` when it is 0.
    pub fn with_pool_batches(mut self, pool_batches: usize) -> Result<Self> {
        if pool_batches == 0 {
            return Err(TextError::Config { field: "pool_batches", reason: "must be positive".into() });
        }
        self.pool_batches = pool_batches;
        Ok(self)
    }

    /// The batch size the loader must use too.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The batches of epoch `epoch`.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = rng_from_seed(epoch_seed(self.seed, epoch));
        let mut order: Vec<usize> = (0..self.lengths.len()).collect();
        order.shuffle(&mut rng);
        let pool = self.pool_batches.saturating_mul(self.batch_size);
        let mut full = Vec::new();
        let mut short = None;
        for chunk in order.chunks_mut(pool) {
            // Stable: equal lengths keep their shuffled order.
            chunk.sort_by_key(|&i| self.lengths[i]);
            for batch in chunk.chunks(self.batch_size) {
                if batch.len() == self.batch_size {
                    full.push(batch.to_vec());
                } else {
                    short = Some(batch.to_vec());
                }
            }
        }
        full.shuffle(&mut rng);
        full.extend(short);
        full
    }
}

impl Sampler for BucketSampler {
    fn len(&self) -> usize {
        self.lengths.len()
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        self.batches(epoch).concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_hold_similar_lengths() {
        let lengths: Vec<usize> = (0..40).map(|i| (i * 7) % 40).collect();
        let sampler =
            BucketSampler::new(lengths.clone(), 4, 3).unwrap().with_pool_batches(usize::MAX).unwrap();
        // Sorting the whole epoch: every batch spans 4 consecutive lengths.
        for batch in sampler.batches(0) {
            let l: Vec<usize> = batch.iter().map(|&i| lengths[i]).collect();
            assert_eq!(l.iter().max().unwrap() - l.iter().min().unwrap(), 3, "{l:?}");
        }
        assert!(BucketSampler::new(vec![1], 0, 0).is_err());
    }
}
