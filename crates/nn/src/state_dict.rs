//! Loading and saving weights: `load_state_dict` with PyTorch's key checks, safetensors files,
//! and torchvision's `.pth` files.

use crate::error::{NnError, Result};
use crate::module::{named_tensors, state_dict, Module};
use crate::pth::read_pth_checkpoint;
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;
use torchlight_tensor::no_grad;

/// A rewrite of weight-file keys before they are matched to the model's: a key starting with
/// `from` gets `to` in its place (`module.` -> `` strips DDP's prefix, `backbone.` ->
/// `features.` moves a trunk). Written `FROM=TO` in configs and on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRewrite {
    /// The prefix replaced.
    pub from: String,
    /// What replaces it (empty: stripped).
    pub to: String,
}

impl KeyRewrite {
    /// Replaces the prefix `from` with `to`.
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> Self {
        KeyRewrite { from: from.into(), to: to.into() }
    }

    /// Strips `prefix`.
    pub fn strip(prefix: impl Into<String>) -> Self {
        Self::new(prefix, "")
    }

    /// Reads `FROM=TO` (`module.=` strips `module.`); an error naming the text when there is no
    /// `=` or nothing before it.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: &str| NnError::KeyRewrite { spec: spec.to_string(), reason: reason.to_string() };
        let (from, to) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected FROM=TO, e.g. `module.=` to strip `module.`"))?;
        if from.is_empty() {
            return Err(bad("the prefix to replace (before `=`) is empty"));
        }
        Ok(KeyRewrite::new(from, to))
    }

    /// `key` rewritten, if it starts with `from`.
    pub fn apply(&self, key: &str) -> Option<String> {
        key.strip_prefix(self.from.as_str()).map(|rest| format!("{}{rest}", self.to))
    }
}

impl std::fmt::Display for KeyRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.from, self.to)
    }
}

/// Prefixes that wrappers put before every key of a model's state_dict, and who puts them:
/// what [`LoadOptions::strip_wrappers`] removes.
pub const WRAPPER_PREFIXES: &[(&str, &str)] = &[
    ("module.", "DistributedDataParallel / DataParallel"),
    ("model.", "a PyTorch Lightning module's `self.model`"),
    ("_orig_mod.", "torch.compile"),
];

/// How [`load_state_dict`] treats keys that do not line up.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Missing or unexpected keys are errors (PyTorch's `strict=True`).
    pub strict: bool,
    /// Keys starting with any of these are neither loaded nor checked: e.g. `"fc."` to load
    /// ImageNet weights into a model with a new head. Applied after the rewrites.
    pub skip_prefixes: Vec<String>,
    /// Rewrites of the weights' keys, tried in order (the first that applies to a key wins),
    /// before matching.
    pub rewrites: Vec<KeyRewrite>,
    /// After the rewrites, strip a [`WRAPPER_PREFIXES`] prefix that every weight key has and
    /// no model key has (DDP's `module.`, Lightning's `model.`, torch.compile's `_orig_mod.`),
    /// repeatedly. Off by default, as in PyTorch.
    pub strip_wrappers: bool,
}

impl LoadOptions {
    /// `strict=True`.
    pub fn strict() -> Self {
        LoadOptions { strict: true, ..Self::default() }
    }
    /// `strict=False`: missing and unexpected keys are reported, not errors.
    pub fn lenient() -> Self {
        LoadOptions { strict: false, ..Self::default() }
    }
    /// Also skip keys under `prefix` (on both sides).
    pub fn skip(mut self, prefix: impl Into<String>) -> Self {
        self.skip_prefixes.push(prefix.into());
        self
    }
    /// Also rewrite the weights' keys with `rewrite`.
    pub fn rewrite(mut self, rewrite: KeyRewrite) -> Self {
        self.rewrites.push(rewrite);
        self
    }
    /// Strip the prefixes wrappers add ([`LoadOptions::strip_wrappers`]).
    pub fn strip_wrappers(mut self) -> Self {
        self.strip_wrappers = true;
        self
    }
    fn skips(&self, key: &str) -> bool {
        self.skip_prefixes.iter().any(|p| key.starts_with(p.as_str()))
    }
}

/// The weights' keys after `options`' rewrites and wrapper stripping, with what was done
/// (`"module.=" ...` lines for the report).
fn rewrite_keys(
    weights: Vec<(String, Tensor)>,
    model_keys: &[String],
    options: &LoadOptions,
) -> (Vec<(String, Tensor)>, Vec<String>) {
    let mut counts = vec![0usize; options.rewrites.len()];
    let mut weights: Vec<(String, Tensor)> = weights
        .into_iter()
        .map(|(k, t)| match options.rewrites.iter().enumerate().find_map(|(i, r)| Some((i, r.apply(&k)?))) {
            Some((i, new)) => {
                counts[i] += 1;
                (new, t)
            }
            None => (k, t),
        })
        .collect();
    let mut done: Vec<String> =
        options.rewrites.iter().zip(counts).map(|(r, n)| format!("{r} (given, {n} keys)")).collect();
    while options.strip_wrappers && !weights.is_empty() {
        let wrapper = WRAPPER_PREFIXES.iter().find(|(prefix, _)| {
            weights.iter().all(|(k, _)| k.starts_with(prefix))
                && !model_keys.iter().any(|k| k.starts_with(prefix))
        });
        let Some((prefix, who)) = wrapper else { break };
        for (k, _) in weights.iter_mut() {
            k.drain(..prefix.len());
        }
        done.push(format!("{prefix}= ({who}, all {} keys)", weights.len()));
    }
    (weights, done)
}

/// A key rewrite that would turn most `unexpected` keys into `missing` ones, as a sentence for
/// the error, when one does: from the longest common dotted suffix of an unexpected and a
/// missing key (`backbone.layer1.0.conv1.weight` and `layer1.0.conv1.weight` give `backbone.=`).
fn rewrite_hint(missing: &[String], unexpected: &[String]) -> Option<String> {
    if missing.is_empty() || unexpected.is_empty() {
        return None;
    }
    let missing_set: std::collections::HashSet<&str> = missing.iter().map(String::as_str).collect();
    let mut best: Option<(KeyRewrite, usize)> = None;
    for u in unexpected.iter().take(16) {
        for m in missing.iter().take(256) {
            let (us, ms): (Vec<&str>, Vec<&str>) = (u.split('.').collect(), m.split('.').collect());
            let common = us.iter().rev().zip(ms.iter().rev()).take_while(|(a, b)| a == b).count();
            if common == 0 || (common == us.len() && common == ms.len()) {
                continue;
            }
            let prefix = |parts: &[&str]| parts.iter().map(|p| format!("{p}.")).collect::<String>();
            let candidate =
                KeyRewrite::new(prefix(&us[..us.len() - common]), prefix(&ms[..ms.len() - common]));
            if best.as_ref().is_some_and(|(b, _)| *b == candidate) {
                continue;
            }
            let hits = unexpected
                .iter()
                .filter(|k| candidate.apply(k).is_some_and(|new| missing_set.contains(new.as_str())))
                .count();
            if best.as_ref().is_none_or(|(_, n)| hits > *n) {
                best = Some((candidate, hits));
            }
        }
    }
    let (rewrite, hits) = best?;
    (hits * 2 >= unexpected.len().min(missing.len()) && hits > 0).then(|| {
        format!(
            "the key rewrite `{rewrite}` would match {hits} of the {} unexpected keys to missing ones",
            unexpected.len()
        )
    })
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
    /// The key rewrites applied, given (`FROM=TO (given, N keys)`) or wrapper prefixes stripped
    /// (`module.= (DistributedDataParallel / DataParallel, all 320 keys)`).
    pub rewrites: Vec<String>,
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
    let targets = named_tensors(model);
    let model_keys: Vec<String> = targets.iter().map(|(k, _, _)| k.clone()).collect();
    let (weights, rewrites) = rewrite_keys(weights, &model_keys, options);
    let mut source: HashMap<String, Tensor> = HashMap::new();
    let mut report = LoadReport { rewrites, ..LoadReport::default() };
    for (k, t) in weights {
        if options.skips(&k) {
            report.skipped.push(k);
        } else {
            source.insert(k, t);
        }
    }
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
        let hint = rewrite_hint(&report.missing, &report.unexpected);
        let (missing, unexpected) =
            if options.strict { (report.missing, report.unexpected) } else { (Vec::new(), Vec::new()) };
        return Err(NnError::StateDict { missing, unexpected, mismatched, hint });
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

/// Reads a weights file: a PyTorch `.pth`/`.pt`/`.ckpt` zip archive (detected by its `PK`
/// signature; a plain state_dict or a checkpoint holding one, see [`read_pth_checkpoint`]) or a
/// safetensors file; or a Hugging Face Hub model folder, whose `model.safetensors` (else
/// `pytorch_model.bin`) is read (see [`read_hub_folder`](crate::read_hub_folder) for its
/// `config.json`).
///
/// # Errors
/// [`NnError::Io`] when the file cannot be read; [`NnError::Pth`] for a malformed archive, a
/// TorchScript module or a file in `torch.save`'s legacy format (which says how to re-save
/// it); [`NnError::Safetensors`] for a malformed safetensors file.
pub fn read_weights(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    if path.is_dir() {
        return read_weights(crate::timm::hub_weights_file(path)?);
    }
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
        read_pth_checkpoint(path).map(|(tensors, _)| tensors)
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

/// Reads weights with [`read_weights`] and loads them with [`load_state_dict`]. Weights in one
/// of timm's key layouts (ViT, ConvNeXt; see [`timm_to_torchvision`](crate::timm_to_torchvision))
/// are first mapped onto torchvision's, unless the model itself has timm's keys; the report's
/// `rewrites` says so.
pub fn load_weights(model: &dyn Module, path: impl AsRef<Path>, options: &LoadOptions) -> Result<LoadReport> {
    let weights = read_weights(path)?;
    let model_keys = named_tensors(model);
    let own_layout =
        model_keys.iter().any(|(k, _, _)| k == "patch_embed.proj.weight" || k == "stem.0.weight");
    let (weights, mapped) =
        if own_layout { (weights, None) } else { crate::timm::timm_to_torchvision(weights) };
    let mut report = load_state_dict(model, weights, options)?;
    if let Some(line) = mapped {
        report.rewrites.insert(0, line);
    }
    Ok(report)
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
