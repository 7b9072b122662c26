//! Helpers shared by the tests: fixture loading and tensor comparison.

use std::collections::HashMap;
use std::path::PathBuf;
use tch::{Kind, Tensor};

/// A fixture file's path.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// The tensors of a safetensors fixture, by name.
pub fn tensors(name: &str) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixture(name)).expect("fixture readable").into_iter().collect()
}

/// A JSON fixture.
pub fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).expect("fixture readable"))
        .expect("valid JSON")
}

/// The largest relative error `|a - b| / max(|b|, floor)` between two tensors.
pub fn max_rel_err(a: &Tensor, b: &Tensor, floor: f64) -> f64 {
    let a = a.to_kind(Kind::Double);
    let b = b.to_kind(Kind::Double);
    let err = (&a - &b).abs() / b.abs().clamp_min(floor);
    err.max().double_value(&[])
}
