//! Integration tests of torchlight-tensor, in one binary because every test binary links
//! libtorch. GPU tests live in `cuda.rs` behind the `cuda-tests` feature.

mod amp;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod device;
mod fused;
mod grad;
mod layout;
mod seed;
mod summary;
mod transfer;

use std::sync::{Mutex, MutexGuard};

/// Tests that seed or draw from torch's process-wide generator hold this lock, so that the
/// test harness's threads do not interleave their draws.
pub fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
