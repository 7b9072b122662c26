//! `DistributedSampler`: each rank's share of a dataset for data-parallel training, with
//! PyTorch's exact indices.

use crate::error::{DataError, Result};
use crate::sampler::Sampler;
use crate::torch_randperm::torch_randperm;

/// `torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=0,
/// drop_last=False)`: rank `rank`'s indices out of `num_replicas` disjoint shares.
///
/// Each epoch, the dataset's indices are shuffled (when `shuffle`) by
/// `torch.randperm(len, generator=torch.Generator().manual_seed(seed + epoch))`, reproduced bit
/// for bit, so a Torchlight rank and a PyTorch rank see the same samples; every rank shuffles
/// alike, so the shares are disjoint. The list is then made a multiple of `num_replicas` long,
/// either padded by repeating its start (default, so every rank runs the same number of steps)
/// or cut (`drop_last`), and rank `r` takes every `num_replicas`-th index from `r`.
///
/// Like the other samplers it is a pure function of the epoch (PyTorch's `set_epoch(e)` is the
/// `epoch` argument of [`Sampler::indices`]). Pair it with a DataLoader without `shuffle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    dataset_len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// Rank `rank`'s share of a dataset of `dataset_len` samples among `num_replicas` ranks,
    /// with PyTorch's defaults (shuffled, seed 0, padded). Fails naming `num_replicas` when it is
    /// 0 and `rank` when it is not below `num_replicas`.
    pub fn new(dataset_len: usize, num_replicas: usize, rank: usize) -> Result<Self> {
        if num_replicas == 0 {
            return Err(DataError::Config { field: "num_replicas", reason: "must be at least 1".into() });
        }
        if rank >= num_replicas {
            return Err(DataError::Config {
                field: "rank",
                reason: format!(
                    "invalid rank {rank}, rank should be in the interval [0, {}]",
                    num_replicas - 1
                ),
            });
        }
        Ok(DistributedSampler { dataset_len, num_replicas, rank, shuffle: true, seed: 0, drop_last: false })
    }

    /// Whether each epoch is shuffled (default true).
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffle's seed, the same on every rank (default 0). PyTorch seeds epoch `e` with
    /// `seed + e`; here the sum wraps at 2^64 where PyTorch would raise.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drops the tail that does not divide evenly among the ranks instead of padding with
    /// repeated indices (default false).
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// This rank's number of indices per epoch (PyTorch's `num_samples`), the same on every
    /// rank.
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            // ceil((len - replicas) / replicas) for an uneven length, i.e. the floor.
            self.dataset_len / self.num_replicas
        } else {
            self.dataset_len.div_ceil(self.num_replicas)
        }
    }

    /// All ranks' indices per epoch (`total_size`).
    pub fn total_size(&self) -> usize {
        self.num_samples() * self.num_replicas
    }

    /// This sampler's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }
}

impl Sampler for DistributedSampler {
    fn len(&self) -> usize {
        self.num_samples()
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut indices = if self.shuffle {
            torch_randperm(self.dataset_len, self.seed.wrapping_add(epoch))
        } else {
            (0..self.dataset_len).collect()
        };
        let total = self.total_size();
        if indices.len() < total {
            // Pad by repeating the list from its start, as often as needed.
            let base = indices.clone();
            indices.extend(base.iter().cycle().take(total - base.len()));
        } else {
            indices.truncate(total);
        }
        indices.into_iter().skip(self.rank).step_by(self.num_replicas).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_cover_the_set_and_have_equal_length() {
        for (len, replicas) in [(10, 3), (12, 4), (7, 4), (2, 5), (0, 2)] {
            for drop_last in [false, true] {
                let shards: Vec<Vec<usize>> = (0..replicas)
                    .map(|r| {
                        DistributedSampler::new(len, replicas, r)
                            .unwrap()
                            .with_drop_last(drop_last)
                            .indices(3)
                    })
                    .collect();
                let per_rank = shards[0].len();
                assert!(shards.iter().all(|s| s.len() == per_rank), "{len} {replicas} {drop_last}");
                let mut all: Vec<usize> = shards.concat();
                all.sort_unstable();
                let distinct = {
                    let mut d = all.clone();
                    d.dedup();
                    d
                };
                if drop_last {
                    // Disjoint, and only the uneven tail (fewer than `replicas`) is left out.
                    assert_eq!(distinct.len(), all.len());
                    assert_eq!(all.len(), len - len % replicas);
                } else {
                    // Every index, and repeats only to pad up to a multiple of `replicas`.
                    assert_eq!(distinct, (0..len).collect::<Vec<_>>());
                    assert_eq!(all.len(), len.div_ceil(replicas) * replicas);
                }
            }
        }
    }

    #[test]
    fn epochs_reshuffle_and_repeat() {
        let s = DistributedSampler::new(50, 2, 1).unwrap().with_seed(7);
        assert_eq!(s.indices(4), s.indices(4));
        assert_ne!(s.indices(4), s.indices(5));
        let plain = DistributedSampler::new(5, 2, 0).unwrap().with_shuffle(false);
        assert_eq!(plain.indices(9), [0, 2, 4]);
    }

    #[test]
    fn bad_ranks_are_named() {
        let err = DistributedSampler::new(10, 2, 2).unwrap_err().to_string();
        assert!(err.contains("rank") && err.contains("[0, 1]"), "{err}");
        let err = DistributedSampler::new(10, 0, 0).unwrap_err().to_string();
        assert!(err.contains("num_replicas"), "{err}");
    }
}
