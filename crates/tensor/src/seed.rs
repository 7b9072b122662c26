//! Seeding: one call for torch's generators and Torchlight's own, and the derivation of
//! per-epoch and per-sample seeds that the data crate uses.
//!
//! # Seed derivation
//! Every seed Torchlight derives is a pure function of the base seed and a path of integers,
//! so it is the same on every run, machine and worker count:
//!
//! ```text
//! mix(z)            = SplitMix64's finaliser of z
//! derive(base, [])  = mix(base ^ 0x9E3779B97F4A7C15)
//! derive(base, p+k) = mix(derive(base, p) ^ mix(k + 0x9E3779B97F4A7C15))
//! epoch_seed(base, epoch)          = derive(base, [STREAM_EPOCH, epoch])
//! sample_seed(base, epoch, index)  = derive(base, [STREAM_SAMPLE, epoch, index])
//! ```
//!
//! A shuffling sampler draws its epoch's permutation from `epoch_seed`, and a random
//! transform draws from `sample_seed`, so a resumed run sees the same order and the same
//! augmentations, and `num_workers = 0` and `= 4` produce identical batches.

use crate::cuda::cuda_status;
use crate::error::Result;
use crate::ffi;
use rand::SeedableRng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Torchlight's random generator: ChaCha8, whose output for a seed is fixed by its
/// specification (it does not change between `rand` releases or platforms).
pub type Rng = rand_chacha::ChaCha8Rng;

/// Stream tag for per-epoch seeds (sampler shuffles).
pub const STREAM_EPOCH: u64 = 1;
/// Stream tag for per-sample seeds (random augmentation).
pub const STREAM_SAMPLE: u64 = 2;
/// Stream tag for the process-wide generator behind [`with_global_rng`].
pub const STREAM_GLOBAL: u64 = 3;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

static SEEDED: AtomicBool = AtomicBool::new(false);
static BASE_SEED: AtomicU64 = AtomicU64::new(0);
static GLOBAL_RNG: Mutex<Option<Rng>> = Mutex::new(None);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed derived from `base` and a path of integers (see the module docs for the formula).
pub fn derive_seed(base: u64, path: &[u64]) -> u64 {
    path.iter().fold(mix(base ^ GOLDEN), |h, &k| mix(h ^ mix(k.wrapping_add(GOLDEN))))
}

/// The seed of epoch `epoch`'s shuffle.
pub fn epoch_seed(base: u64, epoch: u64) -> u64 {
    derive_seed(base, &[STREAM_EPOCH, epoch])
}

/// The seed of sample `index`'s random transforms in epoch `epoch`.
pub fn sample_seed(base: u64, epoch: u64, index: u64) -> u64 {
    derive_seed(base, &[STREAM_SAMPLE, epoch, index])
}

/// A generator seeded with `seed`.
pub fn rng_from_seed(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
}

/// Seeds everything random in the process, like the `seed_everything` helpers PyTorch users
/// write: torch's CPU generator and every CUDA device's generator (`torch.manual_seed`),
/// and Torchlight's process-wide generator. The seed is kept as the base of the derived
/// seeds ([`global_seed`]).
pub fn seed_everything(seed: u64) {
    // torch.manual_seed seeds the CUDA generators only once the CUDA backend is registered.
    let _ = cuda_status();
    // libtorch takes the seed as u64 internally; tch's signature is i64, so pass the bits.
    tch::manual_seed(seed as i64);
    BASE_SEED.store(seed, Ordering::SeqCst);
    SEEDED.store(true, Ordering::SeqCst);
    *GLOBAL_RNG.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(rng_from_seed(derive_seed(seed, &[STREAM_GLOBAL])));
}

/// The seed given to the last [`seed_everything`], if any.
pub fn global_seed() -> Option<u64> {
    SEEDED.load(Ordering::SeqCst).then(|| BASE_SEED.load(Ordering::SeqCst))
}

/// Runs `f` with the process-wide generator. Before any [`seed_everything`] it is seeded
/// from the clock and process id, as Python's `random` is.
pub fn with_global_rng<R>(f: impl FnOnce(&mut Rng) -> R) -> R {
    let mut guard = GLOBAL_RNG.lock().unwrap_or_else(|p| p.into_inner());
    let rng = guard.get_or_insert_with(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        rng_from_seed(derive_seed(nanos, &[u64::from(std::process::id())]))
    });
    f(rng)
}

/// `torch.use_deterministic_algorithms(on, warn_only=warn_only)` together with
/// `torch.backends.cudnn.deterministic = on` and `benchmark = !on`.
///
/// With `on`, an operation that has no deterministic implementation raises an error (or a
/// warning with `warn_only`) instead of giving run-to-run differences.
pub fn set_deterministic(on: bool, warn_only: bool) -> Result<()> {
    // SAFETY: plain flag setters on libtorch's global context.
    ffi::check("set_deterministic", unsafe { ffi::tl_set_deterministic(on, warn_only) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    #[test]
    fn derived_seeds_are_pinned() {
        // These values are part of the contract: changing them changes every user's splits,
        // shuffles and augmentations.
        assert_eq!(derive_seed(0, &[]), 0xE220_A839_7B1D_CDAF);
        assert_eq!(epoch_seed(42, 0), derive_seed(42, &[STREAM_EPOCH, 0]));
        let pinned = [epoch_seed(42, 3), sample_seed(42, 3, 17)];
        assert_eq!(pinned, [EPOCH_42_3, SAMPLE_42_3_17]);
    }

    const EPOCH_42_3: u64 = 0x1558D9D87CFF1D69;
    const SAMPLE_42_3_17: u64 = 0xA8F20D249B5CE740;

    #[test]
    fn streams_and_positions_do_not_collide() {
        let mut seen = std::collections::HashSet::new();
        for epoch in 0..20 {
            assert!(seen.insert(epoch_seed(7, epoch)));
            for index in 0..200 {
                assert!(seen.insert(sample_seed(7, epoch, index)));
            }
        }
    }

    #[test]
    fn rng_output_is_fixed_for_a_seed() {
        let a: Vec<u32> = (0..4).map(|_| rng_from_seed(5).random()).collect();
        let mut r = rng_from_seed(5);
        let b: Vec<u32> = (0..4).map(|_| r.random()).collect();
        assert_eq!(a[0], b[0]);
        assert_ne!(b[0], b[1]);
    }
}
