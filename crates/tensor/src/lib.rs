//! `torchlight-tensor`: the libtorch layer every other Torchlight crate builds on.
//!
//! - Devices from strings, with CUDA really linked ([`DeviceSpec`], [`device`], [`cuda_status`]).
//! - Seeding of torch and Torchlight generators, and derived per-epoch / per-sample seeds
//!   ([`seed_everything`], [`seed`]).
//! - Guards: [`no_grad`] and [`autocast`] (CUDA fp16/bf16, CPU bf16).
//! - Pinned host memory and non-blocking copies, with a no-op path on CPU-only machines.
//! - The CUDA caching allocator: [`cuda_empty_cache`] and its counters ([`cuda_memory`]).
//! - Layout helpers that always return contiguous memory, and tensor diagnostics
//!   ([`summary`], [`ensure_finite`]).
//! - PyTorch's fused optimizer kernels ([`fused_adam_`], [`fused_sgd_`]), [`add_scaled_`] and
//!   [`set_grad_none`], for torchlight-optim.
//!
//! libtorch comes from `cargo xtask setup`; the few libtorch entry points tch does not
//! generate are reached through a small C++ shim (`csrc/shim.cpp`) that turns C++ exceptions
//! into [`TensorError::Torch`].

mod amp;
mod cuda;
mod device;
mod error;
mod ffi;
mod fused;
mod grad;
pub mod jit;
pub mod layout;
mod memory;
mod rng_state;
pub mod seed;
mod summary;
mod transfer;

pub use amp::non_finite_check_and_unscale;
pub use cuda::{cuda_device_count, cuda_is_available, cuda_status, CudaStatus};
pub use device::{device, DeviceSpec};
pub use error::{Result, TensorError};
pub use fused::{
    add_scaled_, foreach_copy_, foreach_lerp_, fused_adam_, fused_sgd_, set_grad_none, FusedAdamArgs,
    FusedSgdArgs,
};
pub use grad::{autocast, autocast_if, autocast_state, no_grad, AutocastGuard, NoGradGuard};
pub use memory::{cuda_empty_cache, cuda_memory, cuda_reset_peak_memory_stats, CudaMemory};
pub use rng_state::{set_torch_rng_state, torch_rng_state, with_torch_seed, TorchRngState};
pub use seed::{global_seed, seed_everything, set_deterministic};
pub use summary::{ensure_finite, summary, TensorSummary};
pub use transfer::{empty_pinned, is_pinned, pin_memory, pinning_supported, to_device_non_blocking};
