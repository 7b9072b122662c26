//! `WeightedRandomSampler`: indices drawn with replacement in proportion to per-sample weights,
//! the usual remedy for class imbalance.

use crate::error::{DataError, Result};
use crate::random::unit_f64;
use crate::sampler::Sampler;
use torchlight_base::seed::{epoch_seed, rng_from_seed};

/// `WeightedRandomSampler(weights, num_samples, replacement=True)`: each epoch draws
/// `num_samples` indices independently, index `i` with probability `weights[i] / sum(weights)`.
/// Weights need not sum to 1. For class balancing, give each sample `1 / count(its class)`.
///
/// Epoch `e`'s draws come from `epoch_seed(seed, e)`, as for [`RandomSampler`](crate::RandomSampler).
#[derive(Debug, Clone)]
pub struct WeightedRandomSampler {
    /// `cumulative[i] = weights[0] + ... + weights[i]`.
    cumulative: Vec<f64>,
    num_samples: usize,
    seed: u64,
}

impl WeightedRandomSampler {
    /// A sampler over `weights.len()` samples. Fails naming `weights` if one is negative or not
    /// finite or all are zero (PyTorch's `multinomial` rejects these too), and naming
    /// `num_samples` if it is 0 (as PyTorch does).
    pub fn new(weights: &[f64], num_samples: usize, seed: u64) -> Result<Self> {
        if let Some((i, w)) = weights.iter().enumerate().find(|(_, w)| !w.is_finite() || **w < 0.0) {
            return Err(DataError::Config {
                field: "weights",
                reason: format!("weight {i} is {w}; weights must be finite and non-negative"),
            });
        }
        if num_samples == 0 {
            return Err(DataError::Config { field: "num_samples", reason: "must be positive".to_string() });
        }
        let cumulative: Vec<f64> = weights
            .iter()
            .scan(0.0, |sum, w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        if cumulative.last().is_none_or(|&total| total <= 0.0) {
            return Err(DataError::Config { field: "weights", reason: "no positive weight".to_string() });
        }
        Ok(WeightedRandomSampler { cumulative, num_samples, seed })
    }

    /// Weights `1 / count(label)` for every sample, so that each class is drawn equally often
    /// (`labels[i]` is sample `i`'s label).
    pub fn balancing_weights(labels: &[i64]) -> Vec<f64> {
        let mut counts = std::collections::HashMap::new();
        for &label in labels {
            *counts.entry(label).or_insert(0usize) += 1;
        }
        labels.iter().map(|label| 1.0 / counts[label] as f64).collect()
    }
}

impl Sampler for WeightedRandomSampler {
    fn len(&self) -> usize {
        self.num_samples
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut rng = rng_from_seed(epoch_seed(self.seed, epoch));
        let total = *self.cumulative.last().expect("checked non-empty in new");
        let last = self.cumulative.len() - 1;
        (0..self.num_samples)
            .map(|_| {
                let x = unit_f64(&mut rng) * total;
                // The first index whose cumulative weight exceeds x; zero weights are never hit.
                self.cumulative.partition_point(|&c| c <= x).min(last)
            })
            .collect()
    }
}
