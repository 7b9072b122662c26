//! Integration tests of torchlight-train, in one binary (each test binary links libtorch).
//! The metrics reference comes from real PyTorch and NumPy (`tests/fixtures/make_metrics.py`);
//! event files are read back with the tensorboard package's own reader
//! (`tests/scripts/read_tfevents.py`). GPU tests live in `cuda.rs` behind the `cuda-tests`
//! feature.

mod batch_size_find;
mod calibration;
mod csv_log;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod ema;
mod finetuning;
mod lr_find;
mod metrics;
mod mixup;
mod plot;
mod skipped_steps;
mod tfevents;
mod trainer;

use std::path::PathBuf;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A fresh temporary folder, removed when the guard drops.
pub(crate) fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("torchlight-train-").tempdir().expect("a temp dir can be created")
}

/// Tests that build models or train draw from torch's global generator; they hold this lock so
/// the harness's threads do not interleave their draws.
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
