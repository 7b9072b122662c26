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

/// The first bytes of a file written by `torch.save` in its legacy (pre-1.6, or
/// `_use_new_zipfile_serialization=False`) format: pickle protocol 2 and the 10-byte magic number.
const LEGACY_TORCH_MAGIC: [u8; 4] = [0x80, 0x02, 0x8a, 0x0a];

/// Reads a weights file: a PyTorch `.pth`/`.pt` zip archive (detected by its `PK` signature)
/// or a safetensors file.
///
/// # Errors
/// [`NnError::Io`] when the file cannot be read; [`NnError::Pth`] for a malformed archive, a
/// TorchScript module or a file in `torch.save`'s legacy format (which says how to re-save
/// it); [`NnError::Safetensors`] for a malformed safetensors file.
pub fn read_weights(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let io = |error| NnError::Io { path: path.to_path_buf(), error };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let n = f.read(&mut magic).map_err(io)?;
        if n < 4 {
            return Err(NnError::Safetensors {
                path: path.to_path_buf(),
                reason: format!("the file has only {n} bytes"),
            });
        }
    }
    if &magic == b"PK\x03\x04" {
        read_pth(path)
    } else if magic == LEGACY_TORCH_MAGIC {
        Err(NnError::Pth {
            path: path.to_path_buf(),
            reason: "written in torch.save's legacy format (PyTorch before 1.6, or \
                     `_use_new_zipfile_serialization=False`), which is not supported; re-save it in \
                     Python with `torch.save(torch.load(path), new_path)`"
                .to_string(),
        })
    } else {
        read_safetensors(path)
    }
}

/// Reads a safetensors file into `(key, tensor)` pairs (CPU tensors), in the file's order of
/// data offsets.
///
/// # Errors
/// [`NnError::Io`] when the file cannot be read, [`NnError::Safetensors`] naming what is
/// malformed (header length, JSON, offsets, dtypes).
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| NnError::Io { path: path.to_path_buf(), error })?;
    let bad = |reason: String| NnError::Safetensors { path: path.to_path_buf(), reason };
    if bytes.len() >= 4 && bytes[..4] == LEGACY_TORCH_MAGIC {
        return Err(bad("this is a PyTorch file in torch.save's legacy format, not safetensors".into()));
    }
    let file =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(describe_safetensors(&e, &bytes)))?;
    let mut views = file.tensors();
    views.sort_by_key(|(_, view)| view.data().as_ptr() as usize);
    views
        .into_iter()
        .map(|(name, view)| {
            let tensor = Tensor::try_from(view).map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
            Ok((name, tensor))
        })
        .collect()
}

/// A sentence for each way a safetensors file can be malformed (the crate's own Display is
/// its Debug form, e.g. `HeaderTooLarge`).
fn describe_safetensors(e: &safetensors::SafeTensorError, bytes: &[u8]) -> String {
    use safetensors::SafeTensorError as E;
    let declared = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let header =
        || declared.map_or(String::new(), |n| format!(" (its first 8 bytes declare a header of {n} bytes)"));
    match e {
        E::HeaderTooSmall => {
            format!("the file has {} bytes, fewer than the 8-byte header length", bytes.len())
        }
        E::HeaderTooLarge | E::InvalidHeaderLength => format!(
            "not a safetensors file, or a truncated one: the header does not fit in the file's {} bytes{}",
            bytes.len(),
            header()
        ),
        E::InvalidHeader => "the header is not valid UTF-8".to_string(),
        E::InvalidHeaderStart => "the header does not start with `{` (not a safetensors file)".to_string(),
        E::InvalidHeaderDeserialization => {
            "the header is not valid JSON, or not the JSON object safetensors expects".to_string()
        }
        E::JsonError(e) => format!("the header is not valid JSON: {e}"),
        E::TensorInvalidInfo => "a tensor's dtype, shape and byte offsets disagree".to_string(),
        E::InvalidOffset(name) => format!("the byte offsets of tensor `{name}` are invalid"),
        E::MetadataIncompleteBuffer => {
            "the tensors do not cover the data section exactly (truncated, or extra bytes)".to_string()
        }
        E::ValidationOverflow => "a tensor's shape or byte size overflows".to_string(),
        E::TensorNotFound(name) => format!("no tensor `{name}`"),
        E::InvalidTensorView(dtype, shape, len) => {
            format!("{len} bytes cannot hold a {dtype:?} tensor of shape {shape:?}")
        }
        E::IoError(e) => e.to_string(),
    }
}

/// Writes `(key, tensor)` pairs as a safetensors file at `path` (tensors must be contiguous
/// CPU tensors of a dtype safetensors knows).
///
/// # Errors
/// [`NnError::Io`] for a file that cannot be written (a missing folder, a full disk), naming
/// `path`; [`NnError::Safetensors`] for a tensor that cannot be stored.
pub fn write_safetensors(tensors: &[(String, Tensor)], path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    Tensor::write_safetensors(tensors, path).map_err(|e| match e {
        tch::TchError::SafeTensorError { err: safetensors::SafeTensorError::IoError(error), .. } => {
            NnError::Io { path: path.to_path_buf(), error }
        }
        tch::TchError::SafeTensorError { err, .. } => {
            NnError::Safetensors { path: path.to_path_buf(), reason: describe_safetensors(&err, &[]) }
        }
        other => NnError::Safetensors { path: path.to_path_buf(), reason: other.to_string() },
    })
}

/// Reads weights with [`read_weights`] and loads them with [`load_state_dict`].
pub fn load_weights(model: &dyn Module, path: impl AsRef<Path>, options: &LoadOptions) -> Result<LoadReport> {
    load_state_dict(model, read_weights(path)?, options)
}

/// Writes `model.state_dict()` as safetensors (CPU, contiguous), through a temporary file and a
/// rename so an existing file is never left half-written. Python reads it with
/// `safetensors.torch.load_file(path)`.
///
/// # Errors
/// As [`write_safetensors`], naming `path` (not the temporary file).
pub fn save_safetensors(model: &dyn Module, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let tensors: Vec<(String, Tensor)> =
        state_dict(model).into_iter().map(|(k, t)| (k, t.to_device(tch::Device::Cpu).contiguous())).collect();
    let tmp = path.with_extension("safetensors.tmp");
    let renamed = |e: NnError| match e {
        NnError::Io { error, .. } => NnError::Io { path: path.to_path_buf(), error },
        NnError::Safetensors { reason, .. } => NnError::Safetensors { path: path.to_path_buf(), reason },
        other => other,
    };
    if let Err(e) = write_safetensors(&tensors, &tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(renamed(e));
    }
    std::fs::rename(&tmp, path).map_err(|error| NnError::Io { path: path.to_path_buf(), error })
}
