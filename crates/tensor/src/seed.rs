//! Seeding: one call for torch's generators and Torchlight's own.
//!
//! The generator type and the derived per-epoch / per-sample seeds live in `torchlight-base`
//! (no libtorch needed there) and are re-exported here, so `torchlight_tensor::seed::*` keeps
//! naming them; see `torchlight_base::seed` for the derivation and its pinned values.

use crate::cuda::cuda_status;
use crate::error::Result;
use crate::ffi;
pub use torchlight_base::seed::{
    batch_seed, derive_seed, epoch_seed, global_seed, rng_from_seed, sample_seed, set_global_seed,
    with_global_rng, Rng, STREAM_BATCH, STREAM_EPOCH, STREAM_GLOBAL, STREAM_SAMPLE, STREAM_SPLIT,
};

/// Seeds everything random in the process, like the `seed_everything` helpers PyTorch users
/// write: torch's CPU generator and every CUDA device's generator (`torch.manual_seed`),
/// and Torchlight's process-wide generator. The seed is kept as the base of the derived
/// seeds ([`global_seed`]).
pub fn seed_everything(seed: u64) {
    // torch.manual_seed seeds the CUDA generators only once the CUDA backend is registered.
    let _ = cuda_status();
    // libtorch takes the seed as u64 internally; tch's signature is i64, so pass the bits.
    tch::manual_seed(seed as i64);
    set_global_seed(seed);
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
