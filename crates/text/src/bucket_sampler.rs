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
///
/// For data-parallel training, [`with_shard`](BucketSampler::with_shard) deals the epoch's
/// batches out to the ranks, as `DistributedSampler` deals out samples.
#[derive(Debug, Clone)]
pub struct BucketSampler {
    lengths: Vec<usize>,
    batch_size: usize,
    pool_batches: usize,
    seed: u64,
    /// `(rank, num_replicas)`; `(0, 1)` unsharded.
    shard: (usize, usize),
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
        Ok(BucketSampler { lengths, batch_size, pool_batches: 100, seed, shard: (0, 1) })
    }

    /// Rank `rank`'s share of each epoch's batches among `num_replicas` ranks: every rank
    /// draws the same batches (the same lengths, seed and epoch), the list is padded to a
    /// multiple of `num_replicas` by repeating batches from its start (as `DistributedSampler`
    /// pads samples, so every rank runs the same number of steps), and rank `rank` takes every
    /// `num_replicas`-th batch from `rank`. The ranks' batches are disjoint apart from that
    /// padding; the smaller batch, when there is one, stays the last of its rank's.
    ///
    /// # Errors
    /// [`TextError::Config`] naming `num_replicas` when it is 0, or `rank` when it is not below
    /// `num_replicas`.
    pub fn with_shard(mut self, rank: usize, num_replicas: usize) -> Result<Self> {
        if num_replicas == 0 {
            return Err(TextError::Config { field: "num_replicas", reason: "must be at least 1".into() });
        }
        if rank >= num_replicas {
            return Err(TextError::Config {
                field: "rank",
                reason: format!("{rank} is not below num_replicas ({num_replicas})"),
            });
        }
        self.shard = (rank, num_replicas);
        Ok(self)
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

    /// The batches of epoch `epoch` (this rank's, when sharded).
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let all = self.all_batches(epoch);
        let (rank, replicas) = self.shard;
        if replicas == 1 {
            return all;
        }
        Self::deal(all.len(), rank, replicas).map(|i| all[i].clone()).collect()
    }

    /// The positions in the epoch's list of `count` batches that rank `rank` of `replicas`
    /// takes: every `replicas`-th of the list padded (by wrapping round) to a multiple of
    /// `replicas`.
    fn deal(count: usize, rank: usize, replicas: usize) -> impl Iterator<Item = usize> {
        let total = count.div_ceil(replicas) * replicas;
        (rank..total).step_by(replicas).map(move |p| p % count)
    }

    /// Every rank's batches of epoch `epoch`, in the order they are dealt out.
    fn all_batches(&self, epoch: u64) -> Vec<Vec<usize>> {
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
        let (rank, replicas) = self.shard;
        if replicas == 1 {
            return self.lengths.len();
        }
        // Every batch is full but the last of the epoch's list; which documents fill them
        // changes with the epoch, their sizes do not.
        let n = self.lengths.len();
        let count = n.div_ceil(self.batch_size);
        let size = |i: usize| if i + 1 == count { n - i * self.batch_size } else { self.batch_size };
        Self::deal(count, rank, replicas).map(size).sum()
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

    #[test]
    fn shards_deal_out_the_batches_disjointly_with_equal_counts() {
        for (n, batch, replicas) in [(40, 4, 2), (42, 4, 2), (42, 4, 3), (30, 4, 4), (3, 4, 2), (0, 4, 2)] {
            let lengths: Vec<usize> = (0..n).map(|i| (i * 7) % 13).collect();
            let whole = BucketSampler::new(lengths.clone(), batch, 5).unwrap();
            let shards: Vec<BucketSampler> =
                (0..replicas).map(|r| whole.clone().with_shard(r, replicas).unwrap()).collect();
            let all = whole.batches(2);
            let dealt: Vec<Vec<Vec<usize>>> = shards.iter().map(|s| s.batches(2)).collect();
            let steps = dealt[0].len();
            assert_eq!(steps, all.len().div_ceil(replicas), "{n} {batch} {replicas}");
            for (s, batches) in shards.iter().zip(&dealt) {
                assert_eq!(batches.len(), steps, "every rank the same number of steps");
                assert_eq!(s.len(), batches.iter().map(Vec::len).sum::<usize>(), "len counts its indices");
                assert_eq!(s.indices(2), batches.concat());
                // Only the last batch of a rank may be short, so a loader cuts them back exactly.
                let (last, rest) = batches.split_last().map_or((None, &[][..]), |(l, r)| (Some(l), r));
                assert!(rest.iter().all(|b| b.len() == batch) && last.is_none_or(|b| b.len() <= batch));
            }
            // Each of the epoch's batches is dealt once; only the padding repeats some.
            for (i, b) in all.iter().enumerate() {
                assert_eq!(&dealt[i % replicas][i / replicas], b);
            }
            let mut seen: Vec<usize> = dealt.concat().concat();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "every document of the epoch");
        }
        assert!(BucketSampler::new(vec![1], 1, 0).unwrap().with_shard(2, 2).is_err());
        assert!(BucketSampler::new(vec![1], 1, 0).unwrap().with_shard(0, 0).is_err());
    }
}
