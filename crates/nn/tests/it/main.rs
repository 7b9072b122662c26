//! Integration tests of torchlight-nn, in one binary (each test binary links libtorch).
//! Reference values come from real PyTorch: small committed fixtures made by
//! `tests/fixtures/make_small.py`, and fixtures generated at test time by `make_resnet.py`
//! (ResNets), `make_backbones.py` (the other backbones and their layers),
//! `make_transformer.py` (the transformer encoder, masked attention, positional embedding) and
//! `make_text_classifiers.py` (the four baseline text classifiers).
//! Tests that draw from torch's generator hold [`torch_rng_lock`].

mod backbone_layers;
mod backbones;
mod construct;
mod derive;
mod layer_groups;
mod layers;
mod losses;
mod pth;
mod resnet_parity;
mod structure;
mod text_classifiers;
mod text_layers;
mod timm;
mod transformer;
mod var_store;
mod weight_files;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use tch::{Kind, Tensor};

/// Tests that draw from torch's global generator (random init, dropout) hold this lock, so
/// that two of them never interleave their draws. It does not cover draws outside it (random
/// init in a test that does not take it): a test that checks seeded draws exactly runs alone in a
/// child process instead ([`alone_in_a_process`]).
pub(crate) fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) use torchlight_testing::alone_in_a_process;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub(crate) fn load(path: impl AsRef<std::path::Path>) -> HashMap<String, Tensor> {
    let path = path.as_ref();
    Tensor::read_safetensors(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).into_iter().collect()
}

/// Asserts `|actual - expected| <= atol + rtol * |expected|` elementwise, reporting the worst
/// element; returns the largest absolute difference.
pub(crate) fn assert_close(what: &str, actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> f64 {
    assert_eq!(actual.size(), expected.size(), "{what}: shapes differ");
    let a = actual.detach().to_kind(Kind::Double).to_device(tch::Device::Cpu);
    let e = expected.detach().to_kind(Kind::Double);
    let diff = (&a - &e).abs();
    let excess = &diff - (e.abs() * rtol + atol);
    let worst = excess.max().double_value(&[]);
    let max_abs = if diff.numel() > 0 { diff.max().double_value(&[]) } else { 0.0 };
    assert!(
        worst <= 0.0,
        "{what}: max |diff| {max_abs:.3e} exceeds tolerance (rtol {rtol:e}, atol {atol:e})"
    );
    max_abs
}
