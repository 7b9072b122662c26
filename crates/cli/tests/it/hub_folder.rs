//! Hub model folders for the tests, made from the timm fixtures of torchlight-nn
//! (`crates/nn/tests/fixtures/timm`, written by `make_timm.py` with timm 1.0.31): each case's
//! `config.json` as timm's `save_for_hf` wrote it, and its weights under timm's keys rebuilt
//! from the formula the script used.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

pub(crate) fn timm_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/fixtures/timm")
}

/// The case `name` of `timm.json`: its `config`, its `keys` (`[key, shape, dtype]` in
/// `state_dict` order) and how its weights were made (`gain`, `layer_scale`).
pub(crate) fn case(name: &str) -> Value {
    let root: Value =
        serde_json::from_str(&std::fs::read_to_string(timm_fixtures().join("timm.json")).unwrap()).unwrap();
    root["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone()
}

/// make_timm.py's `formula_weights` for key number `index` (the nn crate's test computes the
/// same): `sin` over float64 `arange`, scaled by the key's role; the mobile networks' matrices
/// times the case's `gain`, ConvNeXt-B's layer scales times its `layer_scale`.
fn formula_tensor(index: usize, key: &str, shape: &[i64], gain: f64, layer_scale: f64) -> Tensor {
    if key.ends_with("num_batches_tracked") {
        return Tensor::zeros(shape, (Kind::Int64, Device::Cpu));
    }
    let n: i64 = shape.iter().product();
    let base = (Tensor::arange(n, (Kind::Double, Device::Cpu)) * 2.399963 + 0.7 * index as f64).sin();
    let v = if key.ends_with("running_var") {
        base * 0.5 + 1.0
    } else if key.ends_with("running_mean") {
        base * 0.1
    } else if shape.len() >= 2 {
        let v = base / ((n / shape[0]) as f64).sqrt();
        if gain == 1.0 {
            v
        } else {
            v * gain
        }
    } else if key.ends_with("gamma") && layer_scale != 1.0 {
        (base * 0.2 + 1.0) * layer_scale
    } else if key.ends_with("weight") || key.ends_with("gamma") {
        base * 0.2 + 1.0
    } else {
        base * 0.1
    };
    v.to_kind(Kind::Float).reshape(shape)
}

/// The case's Hub folder under `parent`: its config.json (edited by `edit`) and
/// `model.safetensors` of the formula weights under timm's keys.
pub(crate) fn hub_folder(parent: &Path, case: &Value, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let dir = parent.join(case["name"].as_str().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = case["config"].clone();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let gain = case["gain"].as_f64().unwrap_or(1.0);
    let layer_scale = case["layer_scale"].as_f64().unwrap_or(1.0);
    let weights: Vec<(String, Tensor)> = case["keys"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let key = k[0].as_str().unwrap();
            let shape: Vec<i64> = k[1].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
            (key.to_string(), formula_tensor(i, key, &shape, gain, layer_scale))
        })
        .collect();
    Tensor::write_safetensors(&weights, dir.join("model.safetensors")).unwrap();
    dir
}
