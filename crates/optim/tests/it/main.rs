//! Integration tests of torchlight-optim, in one binary because every test binary links
//! libtorch. Parity fixtures come from `tests/fixtures/make_*.py` (PyTorch 2.11). GPU tests
//! live in `cuda.rs` behind the `cuda-tests` feature.

mod common;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod grad_scaler;
mod gradients;
mod optimizers;
mod outside;
mod param_groups;
mod schedulers;

use std::sync::{Mutex, MutexGuard};

/// Tests that seed or draw from torch's process-wide generator hold this lock, so that the
/// test harness's threads do not interleave their draws.
pub fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
