//! torchlight-vision's integration tests: parity with torchvision fixtures
//! (`tests/fixtures/make_fixtures.py`), sampling statistics, ImageFolder on real folders.

mod color;
mod decode;
mod folder;
mod parity;
mod random;

use std::path::PathBuf;

/// `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A fresh empty folder under the system temp dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new folder named after `tag`.
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("torchlight-vision-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (max, mean) absolute difference in units of 1/255 between two u8 images of equal shape.
pub fn diff(a: &torchlight_vision::Image, b: &torchlight_vision::Image) -> (f64, f64) {
    assert_eq!((a.width(), a.height(), a.channels()), (b.width(), b.height(), b.channels()), "shapes differ");
    let mut max = 0u8;
    let mut sum = 0u64;
    for (&x, &y) in a.pixels().iter().zip(b.pixels()) {
        let d = x.abs_diff(y);
        max = max.max(d);
        sum += d as u64;
    }
    (max as f64, sum as f64 / a.pixels().len() as f64)
}
