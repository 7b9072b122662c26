//! Draws with a fixed algorithm (bounded integers, permutations, unit floats), so splits and
//! shuffles depend only on the seed and not on the `rand` crate's version.

use rand::RngCore;
use torchlight_base::seed::Rng;

/// A uniform integer in `0..bound` (`bound > 0`), by Lemire's unbiased multiply-and-reject.
pub(crate) fn below(rng: &mut Rng, bound: u64) -> u64 {
    debug_assert!(bound > 0);
    let mut m = u128::from(rng.next_u64()) * u128::from(bound);
    if (m as u64) < bound {
        let threshold = bound.wrapping_neg() % bound;
        while (m as u64) < threshold {
            m = u128::from(rng.next_u64()) * u128::from(bound);
        }
    }
    (m >> 64) as u64
}

/// Shuffles `values` in place (Fisher-Yates from the back).
pub(crate) fn shuffle<T>(rng: &mut Rng, values: &mut [T]) {
    for i in (1..values.len()).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        values.swap(i, j);
    }
}

/// A random permutation of `0..n` (`torch.randperm(n)`, with Torchlight's generator).
pub(crate) fn randperm(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    shuffle(rng, &mut perm);
    perm
}

/// A uniform float in `[0, 1)` with 53 random bits.
pub(crate) fn unit_f64(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_base::seed::rng_from_seed;

    #[test]
    fn randperm_is_a_permutation_fixed_by_the_seed() {
        let a = randperm(&mut rng_from_seed(3), 50);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(a, randperm(&mut rng_from_seed(3), 50));
        assert_ne!(a, randperm(&mut rng_from_seed(4), 50));
    }

    #[test]
    fn below_is_roughly_uniform() {
        let mut rng = rng_from_seed(1);
        let mut counts = [0usize; 6];
        for _ in 0..60_000 {
            counts[below(&mut rng, 6) as usize] += 1;
        }
        // Each bucket expects 10_000 with a standard deviation of about 91.
        assert!(counts.iter().all(|&c| (9_500..10_500).contains(&c)), "{counts:?}");
        assert!((0..1000).all(|_| unit_f64(&mut rng) < 1.0));
    }
}
