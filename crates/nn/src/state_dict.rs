//! Loading and saving weights: `load_state_dict` with PyTorch's key checks, safetensors files,
//! and torchvision's `.pth` files.

use crate::error::{NnError, Result};
use crate::module::{named_tensors, state_dict, Module};
use crate::pth::read_pth;
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;
use torchlight_tensor::no_grad;

/// How [`load_state_dict`] treats keys that do not line up.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Missing or unexpected keys are errors (PyTorch's `strict=True`).
    pub strict: bool,
    /// Keys starting with any of these are neither loaded nor checked: e.g. `"fc."` to load
    /// ImageNet weights into a model with a new head.
    pub skip_prefixes: Vec<String>,
}

impl LoadOptions {
    /// `strict=True`.
    pub fn strict() -> Self {
        LoadOptions { strict: true, skip_prefixes: Vec::new() }
    }
    /// `strict=False`: missing and unexpected keys are reported, not errors.
    pub fn lenient() -> Self {
        LoadOptions { strict: false, skip_prefixes: Vec::new() }
    }
    /// Also skip keys under `prefix` (on both sides).
    pub fn skip(mut self, prefix: impl Into<String>) -> Self {
        self.skip_prefixes.push(prefix.into());
        self
    }
    fn skips(&self, key: &str) -> bool {
        self.skip_prefixes.iter().any(|p| key.starts_with(p.as_str()))
    }
}

/// What [`load_state_dict`] did, like PyTorch's `_IncompatibleKeys` plus the loaded keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// Keys copied into the model.
    pub loaded: Vec<String>,
    /// Model keys the weights lack (not loaded).
    pub missing: Vec<String>,
    /// Weight keys the model lacks (ignored).
    pub unexpected: Vec<String>,
    /// Keys skipped by prefix, on either side.
    pub skipped: Vec<String>,
}

/// `model.load_state_dict(weights, strict)`: copies every tensor whose key and shape match
/// into the model in place (converting dtype and device to the model's).
///
/// A shape mismatch is always an error, as in PyTorch (skip such keys by prefix); with
/// `strict`, missing and unexpected keys are errors too. On error nothing is copied, so a
/// model is never left half-loaded.
pub fn load_state_dict(
    model: &dyn Module,
    weights: Vec<(String, Tensor)>,
    options: &LoadOptions,
) -> Result<LoadReport> {
    let mut source: HashMap<String, Tensor> = HashMap::new();
    let mut report = LoadReport::default();
    for (k, t) in weights {
        if options.skips(&k) {
            report.skipped.push(k);
        } else {
            source.insert(k, t);
        }
    }
    let targets = named_tensors(model);
    let mut mismatched = Vec::new();
    let mut pairs = Vec::new();
    for (key, dst, _) in &targets {
        if options.skips(key) {
            if !report.skipped.contains(key) {
                report.skipped.push(key.clone());
            }
            continue;
        }
        match source.remove(key) {
            None => report.missing.push(key.clone()),
            Some(src) if src.size() != dst.size() => mismatched.push((key.clone(), src.size(), dst.size())),
            Some(src) => pairs.push((key.clone(), dst, src)),
        }
    }
    report.unexpected = source.into_keys().collect();
    report.unexpected.sort();
    if !mismatched.is_empty()
        || (options.strict && !(report.missing.is_empty() && report.unexpected.is_empty()))
    {
        let (missing, unexpected) =
            if options.strict { (report.missing, report.unexpected) } else { (Vec::new(), Vec::new()) };
        return Err(NnError::StateDict { missing, unexpected, mismatched });
    }
    let _guard = no_grad();
    for (key, dst, src) in pairs {
        dst.shallow_clone().copy_(&src);
        report.loaded.push(key);
    }
    Ok(report)
}

/// Reads a weights file: a PyTorch `.pth`/`.pt` zip archive (detected by its `PK` signature)
/// or a safetensors file.
pub fn read_weights(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let mut f =
            std::fs::File::open(path).map_err(|source| NnError::Io { path: path.to_path_buf(), source })?;
        let n = f.read(&mut magic).map_err(|source| NnError::Io { path: path.to_path_buf(), source })?;
        if n < 4 {
            return Err(NnError::Safetensors {
                path: path.to_path_buf(),
                reason: format!("file has only {n} bytes"),
            });
        }
    }
    if &magic == b"PK\x03\x04" {
        read_pth(path)
    } else {
        read_safetensors(path)
    }
}

/// Reads a safetensors file into `(key, tensor)` pairs (CPU tensors).
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    Tensor::read_safetensors(path)
        .map_err(|e| NnError::Safetensors { path: path.to_path_buf(), reason: e.to_string() })
}

/// Reads weights with [`read_weights`] and loads them with [`load_state_dict`].
pub fn load_weights(model: &dyn Module, path: impl AsRef<Path>, options: &LoadOptions) -> Result<LoadReport> {
    load_state_dict(model, read_weights(path)?, options)
}

/// Writes `model.state_dict()` as safetensors (CPU, contiguous), through a temporary file and a
/// rename so an existing file is never left half-written. Python reads it with
/// `safetensors.torch.load_file(path)`.
pub fn save_safetensors(model: &dyn Module, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let tensors: Vec<(String, Tensor)> =
        state_dict(model).into_iter().map(|(k, t)| (k, t.to_device(tch::Device::Cpu).contiguous())).collect();
    let tmp = path.with_extension("safetensors.tmp");
    Tensor::write_safetensors(&tensors, &tmp)
        .map_err(|e| NnError::Safetensors { path: tmp.clone(), reason: e.to_string() })?;
    std::fs::rename(&tmp, path).map_err(|source| NnError::Io { path: path.to_path_buf(), source })
}
