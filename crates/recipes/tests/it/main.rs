//! Integration tests of torchlight-recipes, in one binary (each test binary links libtorch):
//! the config, the image-classification recipe end to end (fit, resume, the test split), the
//! loop's guards as the recipe runs them, run folders, the doctor and the text recipe.

mod augment;
mod config;
mod doctor;
mod doctor_augment;
mod doctor_text;
mod fit;
mod guard;
mod hub_cfg;
mod param_groups;
mod run_dir;
mod text;

/// A fresh temporary folder, removed when the guard drops.
pub(crate) fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("torchlight-recipes-").tempdir().expect("a temp dir can be created")
}

/// Tests that build models or train draw from torch's global generator; they hold this lock so
/// the harness's threads do not interleave their draws.
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
