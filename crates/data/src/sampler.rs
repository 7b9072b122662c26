//! The `Sampler` trait and the two plain samplers: sequential and (seeded) random.

use crate::random::randperm;
use torchlight_base::seed::{epoch_seed, rng_from_seed};

/// The order in which an epoch visits dataset indices, like `torch.utils.data.Sampler`.
///
/// Unlike PyTorch's, a sampler is a pure function of the epoch: `indices(e)` is the same every
/// time it is asked, so a run resumed at epoch `e` sees the same order as the original run.
pub trait Sampler: Send {
    /// The number of indices per epoch.
    fn len(&self) -> usize;

    /// Whether an epoch is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices of epoch `epoch`, `len()` of them.
    fn indices(&self, epoch: u64) -> Vec<usize>;
}

impl<S: Sampler + ?Sized> Sampler for Box<S> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        (**self).indices(epoch)
    }
}

/// `0, 1, ..., n - 1` every epoch (`SequentialSampler`, the DataLoader's default without
/// `shuffle`).
#[derive(Debug, Clone)]
pub struct SequentialSampler {
    len: usize,
}

impl SequentialSampler {
    /// The indices of a dataset of `len` samples, in order.
    pub fn new(len: usize) -> Self {
        SequentialSampler { len }
    }
}

impl Sampler for SequentialSampler {
    fn len(&self) -> usize {
        self.len
    }

    fn indices(&self, _epoch: u64) -> Vec<usize> {
        (0..self.len).collect()
    }
}

/// A permutation of `0..n`, reshuffled each epoch (`RandomSampler` without replacement, the
/// DataLoader's sampler with `shuffle=True`).
///
/// Epoch `e`'s permutation is drawn from `epoch_seed(seed, e)` alone, where PyTorch draws each
/// epoch's from a generator that advances across epochs; so epoch `e` is the same whether or not
/// epochs `0..e` ran in this process.
#[derive(Debug, Clone)]
pub struct RandomSampler {
    len: usize,
    seed: u64,
}

impl RandomSampler {
    /// Random orders of a dataset of `len` samples, from `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        RandomSampler { len, seed }
    }
}

impl Sampler for RandomSampler {
    fn len(&self) -> usize {
        self.len
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        randperm(&mut rng_from_seed(epoch_seed(self.seed, epoch)), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_orders_differ_by_epoch_and_repeat_by_epoch() {
        let s = RandomSampler::new(20, 5);
        assert_eq!(s.indices(3), s.indices(3));
        assert_ne!(s.indices(0), s.indices(1));
        let mut sorted = s.indices(1);
        sorted.sort_unstable();
        assert_eq!(sorted, SequentialSampler::new(20).indices(0));
    }
}
