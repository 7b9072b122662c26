//! torchlight-vision's integration tests: parity with torchvision fixtures
//! (`tests/fixtures/make_fixtures.py`), sampling statistics, ImageFolder on real folders.
//! The SIMD resampling kernels against the scalar one and the resampling fixtures held to 0
//! (`simd.rs`). The `Transform` contract, with transforms of a user's own (`contract.rs`), and
//! the evaluation preprocessing (`preset.rs`). FiveCrop and TenCrop (`five_crop.rs`). Every interpolation mode against Pillow
//! (`interpolation.rs`).
//! No libtorch: the fixtures' safetensors files are read with the `safetensors` crate.

mod augmix;
mod auto_augment;
mod color;
mod contract;
mod decode;
mod erasing;
mod five_crop;
mod folder;
mod geometry;
mod interpolation;
mod jpeg;
mod parity;
mod point_ops;
mod policies;
mod preset;
mod random;
mod random_transforms;
mod simd;
mod variants;

use std::path::PathBuf;

/// `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A tensor from a fixture's safetensors file: its shape and its elements, widened to a type
/// the tests compare (`u8`, `f32`, or `i64` for every integer type).
pub struct FixtureTensor {
    /// The shape, e.g. `[30, 40, 3]`.
    pub shape: Vec<usize>,
    /// The elements of a `uint8` tensor (empty otherwise).
    pub u8s: Vec<u8>,
    /// The elements of a `float32` tensor (empty otherwise).
    pub f32s: Vec<f32>,
    /// The elements of an integer tensor, widened (empty otherwise).
    pub i64s: Vec<i64>,
}

/// Every tensor of `tests/fixtures/<name>`, by key.
pub fn read_safetensors(name: &str) -> std::collections::HashMap<String, FixtureTensor> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(fixture(name)).expect("read the fixture");
    let file = SafeTensors::deserialize(&bytes).expect("a safetensors file");
    file.tensors()
        .into_iter()
        .map(|(key, view)| {
            let data = view.data();
            let mut t =
                FixtureTensor { shape: view.shape().to_vec(), u8s: vec![], f32s: vec![], i64s: vec![] };
            match view.dtype() {
                Dtype::U8 => t.u8s = data.to_vec(),
                Dtype::F32 => {
                    t.f32s = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
                }
                Dtype::I16 => {
                    t.i64s = data
                        .chunks_exact(2)
                        .map(|b| i16::from_le_bytes(b.try_into().unwrap()) as i64)
                        .collect()
                }
                Dtype::I64 => {
                    t.i64s = data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
                }
                other => panic!("{name}: {key} has dtype {other:?}, which the tests do not read"),
            }
            (key, t)
        })
        .collect()
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
