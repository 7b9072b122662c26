//! `RASampler`: repeated augmentation for data-parallel training (torchvision's reference
//! recipe, after DeiT), with torchvision's exact indices.

use crate::error::{DataError, Result};
use crate::sampler::Sampler;
use crate::torch_randperm::torch_randperm;

/// torchvision's `RASampler(dataset, num_replicas, rank, shuffle=True, seed=0, repetitions=3)`
/// (`references/classification/sampler.py`): each sample of an epoch is repeated
/// `repetitions` times, the repeats dealt to consecutive ranks, so each rank augments its own
/// copy of a sample that other ranks see too, while an epoch stays about as long as one
/// without repeats.
///
/// Epoch `e` shuffles the dataset's indices (when `shuffle`) with
/// `torch.randperm(len, generator=torch.Generator().manual_seed(seed + e))`, reproduced bit
/// for bit; repeats each index `repetitions` times in place (`[a, a, a, b, b, b, ...]`); pads
/// the list with its start to `num_samples * num_replicas`, where
/// `num_samples = ceil(len * repetitions / num_replicas)`; rank `r` takes every
/// `num_replicas`-th index from `r`, and keeps the first [`len`](Sampler::len) of them:
/// torchvision's `floor(len // 256 * 256 / num_replicas)` by default, or, with
/// [`with_selected_round(0)`](Self::with_selected_round), `ceil(len / num_replicas)`, the
/// length of a [`DistributedSampler`](crate::DistributedSampler) epoch (timm's
/// `RepeatAugSampler(selected_round=0)`), which keeps datasets of fewer than 256 samples
/// usable.
///
/// A pure function of the epoch like every sampler here, so a run resumed mid-epoch sees the
/// indices the uninterrupted run saw. Pair it with a DataLoader without `shuffle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RASampler {
    dataset_len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    repetitions: usize,
    selected_round: usize,
}

impl RASampler {
    /// Rank `rank`'s indices of a dataset of `dataset_len` samples among `num_replicas` ranks,
    /// with torchvision's defaults (shuffled, seed 0, 3 repetitions, 256-rounded epoch).
    /// Fails naming `num_replicas` when it is 0 and `rank` when it is not below it.
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
        Ok(RASampler {
            dataset_len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            repetitions: 3,
            selected_round: 256,
        })
    }

    /// How many times each sample is repeated across the ranks (torchvision's
    /// `--ra-reps`, default 3). Fails naming `repetitions` when it is 0.
    pub fn with_repetitions(mut self, repetitions: usize) -> Result<Self> {
        if repetitions == 0 {
            return Err(DataError::Config { field: "repetitions", reason: "must be at least 1".into() });
        }
        self.repetitions = repetitions;
        Ok(self)
    }

    /// Whether each epoch is shuffled (default true).
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffle's seed, the same on every rank (default 0); epoch `e` uses `seed + e`
    /// (wrapping at 2^64 where PyTorch would raise).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The epoch's length per rank: `256` (the default) keeps torchvision's
    /// `floor(len // 256 * 256 / num_replicas)` indices, `0` keeps `ceil(len / num_replicas)`
    /// (timm's `selected_round=0`); any other value `r` keeps
    /// `floor(len // r * r / num_replicas)`, as timm's `selected_round=r`.
    pub fn with_selected_round(mut self, selected_round: usize) -> Self {
        self.selected_round = selected_round;
        self
    }

    /// Indices per rank before the cut (torchvision's `num_samples`).
    pub fn num_samples(&self) -> usize {
        (self.dataset_len * self.repetitions).div_ceil(self.num_replicas)
    }
}

impl Sampler for RASampler {
    fn len(&self) -> usize {
        let n = self.dataset_len;
        match n.checked_div(self.selected_round) {
            None => n.div_ceil(self.num_replicas),
            // floor(n // r * r / replicas) in Python's float arithmetic: exact below 2^53.
            Some(rounds) => rounds * self.selected_round / self.num_replicas,
        }
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        let order = if self.shuffle {
            torch_randperm(self.dataset_len, self.seed.wrapping_add(epoch))
        } else {
            (0..self.dataset_len).collect()
        };
        let total = self.num_samples() * self.num_replicas;
        let repeated: Vec<usize> =
            order.iter().flat_map(|&i| std::iter::repeat_n(i, self.repetitions)).collect();
        // `indices += indices[:total - len]`: the padding is shorter than the list.
        let pad = total - repeated.len();
        let padded = repeated.iter().chain(repeated.iter().take(pad));
        padded.skip(self.rank).step_by(self.num_replicas).take(self.len()).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_is_repeated_across_consecutive_ranks() {
        let ranks: Vec<Vec<usize>> = (0..3)
            .map(|r| RASampler::new(6, 3, r).unwrap().with_shuffle(false).with_selected_round(0).indices(0))
            .collect();
        // [0, 0, 0, 1, 1, 1, ...] dealt round-robin: every rank sees 0 and 1, each augmented apart.
        assert_eq!(ranks, [vec![0, 1], vec![0, 1], vec![0, 1]]);
        let two = |r| RASampler::new(5, 2, r).unwrap().with_shuffle(false).with_selected_round(0).indices(0);
        // [0,0,0,1,1,1,2,2,2,3,3,3,4,4,4] + pad [0]: rank 0 takes 0,0,1,2,2,3 cut to 3.
        assert_eq!((two(0), two(1)), (vec![0, 0, 1], vec![0, 1, 1]));
    }

    #[test]
    fn epochs_reshuffle_and_bad_settings_are_named() {
        let s = RASampler::new(600, 2, 1).unwrap().with_seed(3);
        assert_eq!(s.len(), 256);
        assert_eq!(s.indices(4), s.indices(4));
        assert_ne!(s.indices(4), s.indices(5));
        assert_eq!(RASampler::new(100, 2, 0).unwrap().len(), 0, "torchvision's 256 rounding");
        assert!(RASampler::new(10, 2, 2).unwrap_err().to_string().contains("[0, 1]"));
        assert!(RASampler::new(10, 0, 0).unwrap_err().to_string().contains("num_replicas"));
        let err = RASampler::new(10, 1, 0).unwrap().with_repetitions(0).unwrap_err().to_string();
        assert!(err.contains("repetitions"), "{err}");
    }
}
