//! Sampler statistics: the weighted sampler's draws match its weights.

use torchlight_data::{DataError, Sampler, WeightedRandomSampler};

fn frequencies(indices: &[usize], n: usize) -> Vec<f64> {
    let mut counts = vec![0usize; n];
    indices.iter().for_each(|&i| counts[i] += 1);
    counts.iter().map(|&c| c as f64 / indices.len() as f64).collect()
}

#[test]
fn weighted_draws_follow_the_weights() {
    let sampler = WeightedRandomSampler::new(&[1.0, 3.0, 0.0, 4.0], 80_000, 11).unwrap();
    assert_eq!(sampler.len(), 80_000);
    let freq = frequencies(&sampler.indices(0), 4);
    // Expected [0.125, 0.375, 0, 0.5]; the standard deviations are below 0.002, so 0.01 is
    // five of them (and the draw is seeded, so the test cannot flake).
    for (f, expected) in freq.iter().zip([0.125, 0.375, 0.0, 0.5]) {
        assert!((f - expected).abs() < 0.01, "{freq:?}");
    }
    assert_eq!(freq[2], 0.0, "a zero weight is never drawn");
    assert_eq!(sampler.indices(3), sampler.indices(3));
    assert_ne!(sampler.indices(0), sampler.indices(1));
}

#[test]
fn balancing_weights_equalise_classes() {
    // 90 samples of class 0, 10 of class 1.
    let labels: Vec<i64> = (0..100).map(|i| i64::from(i >= 90)).collect();
    let weights = WeightedRandomSampler::balancing_weights(&labels);
    let sampler = WeightedRandomSampler::new(&weights, 20_000, 5).unwrap();
    let minority = sampler.indices(0).iter().filter(|&&i| labels[i] == 1).count();
    let share = minority as f64 / 20_000.0;
    assert!((share - 0.5).abs() < 0.02, "minority share {share}");
}

#[test]
fn bad_weights_are_rejected() {
    for (weights, n, field) in [
        (vec![1.0, -1.0], 4, "weights"),
        (vec![f64::NAN], 4, "weights"),
        (vec![0.0, 0.0], 4, "weights"),
        (vec![], 4, "weights"),
        (vec![1.0], 0, "num_samples"),
    ] {
        match WeightedRandomSampler::new(&weights, n, 0) {
            Err(DataError::Config { field: f, .. }) => assert_eq!(f, field, "{weights:?}"),
            other => panic!("{weights:?}: expected a config error, got {:?}", other.err()),
        }
    }
}
