//! Loading and saving weights: `load_state_dict` with PyTorch's key checks, safetensors files,
//! and torchvision's `.pth` files.

use crate::error::{NnError, Result};
use crate::file_kind::{describe_pickle, regular_file};
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
    /// before matching. Two keys rewritten onto one are an error naming both.
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

/// Tensors under their keys, in file order.
type Named = Vec<(String, Tensor)>;

/// The weights' keys after `options`' rewrites and wrapper stripping, with what was done
/// (`"module.=" ...` lines for the report). Two weights rewritten onto one key (`backbone.=`
/// on a file holding both `backbone.conv1.weight` and `conv1.weight`) are an error naming
/// both, not one of them silently kept.
fn rewrite_keys(
    weights: Named,
    model_keys: &[String],
    options: &LoadOptions,
) -> Result<(Named, Vec<String>)> {
    let mut counts = vec![0usize; options.rewrites.len()];
    // Each new key's original key and the rewrite that made it, if one did.
    let mut origin: HashMap<String, (String, Option<usize>)> = HashMap::new();
    let mut rewritten = Vec::with_capacity(weights.len());
    for (k, t) in weights {
        let found = options.rewrites.iter().enumerate().find_map(|(i, r)| Some((i, r.apply(&k)?)));
        let (new, by) = match found {
            Some((i, new)) => {
                counts[i] += 1;
                (new, Some(i))
            }
            None => (k.clone(), None),
        };
        if let Some((other, other_by)) = origin.get(&new) {
            let by = by.or(*other_by).expect("distinct keys collide only through a rewrite");
            return Err(NnError::KeyRewrite {
                spec: options.rewrites[by].to_string(),
                reason: format!(
                    "maps both `{other}` and `{k}` onto `{new}`: one key cannot load two weights; rewrite a longer prefix, or skip one"
                ),
            });
        }
        origin.insert(new.clone(), (k, by));
        rewritten.push((new, t));
    }
    let mut weights = rewritten;
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
    Ok((weights, done))
}

/// A key rewrite that would turn most `unexpected` keys into `missing` ones of the same shape,
/// as a sentence for the error, when one does: from the longest common dotted suffix of an
/// unexpected and a missing key of one shape (`backbone.layer1.0.conv1.weight` and
/// `layer1.0.conv1.weight` give `backbone.=`). A rewrite that would put a tensor into a slot of
/// another shape is never suggested: the load would fail on it.
fn rewrite_hint(missing: &[(String, Vec<i64>)], unexpected: &[(String, Vec<i64>)]) -> Option<String> {
    if missing.is_empty() || unexpected.is_empty() {
        return None;
    }
    let missing_shapes: HashMap<&str, &Vec<i64>> = missing.iter().map(|(k, s)| (k.as_str(), s)).collect();
    let fits = |new: &str, shape: &Vec<i64>| missing_shapes.get(new).is_some_and(|s| *s == shape);
    let mut best: Option<(KeyRewrite, usize)> = None;
    for (u, u_shape) in unexpected.iter().take(16) {
        for (m, m_shape) in missing.iter().take(256) {
            if m_shape != u_shape {
                continue;
            }
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
                .filter(|(k, shape)| candidate.apply(k).is_some_and(|new| fits(&new, shape)))
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
    let (weights, rewrites) = rewrite_keys(weights, &model_keys, options)?;
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
    let mut unexpected: Vec<(String, Vec<i64>)> = source.into_iter().map(|(k, t)| (k, t.size())).collect();
    unexpected.sort();
    report.unexpected = unexpected.iter().map(|(k, _)| k.clone()).collect();
    if !mismatched.is_empty()
        || (options.strict && !(report.missing.is_empty() && report.unexpected.is_empty()))
    {
        let missing: std::collections::HashSet<&String> = report.missing.iter().collect();
        let missing: Vec<(String, Vec<i64>)> = targets
            .iter()
            .filter(|(k, _, _)| missing.contains(k))
            .map(|(k, t, _)| (k.clone(), t.size()))
            .collect();
        let hint = rewrite_hint(&missing, &unexpected);
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

/// Reads a weights file: a PyTorch `.pth`/`.pt`/`.ckpt` zip archive (detected by its `PK`
/// signature; a plain state_dict or a checkpoint holding one, see [`read_pth_checkpoint`]) or a
/// safetensors file; or a Hugging Face Hub model folder, whose `model.safetensors` (else
/// `pytorch_model.bin`) is read (see [`read_hub_folder`](crate::read_hub_folder) for its
/// `config.json`).
///
/// # Errors
/// [`NnError::Io`] when the file cannot be read or is not a regular file (a FIFO or a device
/// is refused before it is opened); [`NnError::Pth`] for a malformed or truncated archive, a
/// TorchScript module, or a pickle (`torch.save`'s legacy format, `pickle.dump`), which says how
/// to re-save it; [`NnError::Safetensors`] for a malformed safetensors file.
pub fn read_weights(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    if path.is_dir() {
        return read_weights(crate::timm::hub_weights_file(path)?);
    }
    regular_file(path)?;
    // Enough of the start for a pickle's header and torch's legacy magic number.
    let mut head = Vec::with_capacity(32);
    {
        use std::io::Read;
        let io = |error| NnError::Io { path: path.to_path_buf(), error };
        let f = std::fs::File::open(path).map_err(io)?;
        f.take(32).read_to_end(&mut head).map_err(io)?;
        let n = head.len();
        if n == 0 {
            return Err(NnError::Io {
                path: path.to_path_buf(),
                error: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is empty (0 bytes), not weights: an interrupted download or save?",
                ),
            });
        }
        if n < 4 {
            return Err(NnError::Safetensors {
                path: path.to_path_buf(),
                reason: format!("the file has only {n} bytes"),
            });
        }
    }
    if head.starts_with(b"PK\x03\x04") {
        read_pth_checkpoint(path).map(|(tensors, _)| tensors)
    } else if let Some(reason) = describe_pickle(&head) {
        Err(NnError::Pth { path: path.to_path_buf(), reason })
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
    regular_file(path)?;
    let bytes = std::fs::read(path).map_err(|error| NnError::Io { path: path.to_path_buf(), error })?;
    let bad = |reason: String| NnError::Safetensors { path: path.to_path_buf(), reason };
    if let Some(what) = describe_pickle(&bytes[..bytes.len().min(32)]) {
        return Err(bad(format!("this is a PyTorch or Python pickle file, not safetensors: {what}")));
    }
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(diagnose_header(&bytes).unwrap_or_else(|| describe_safetensors(&e, &bytes))))?;
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

/// The dtypes the safetensors reader takes (safetensors 0.3's `Dtype`).
const SAFETENSORS_DTYPES: &[(&str, usize)] = &[
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("I16", 2),
    ("U16", 2),
    ("F16", 2),
    ("BF16", 2),
    ("I32", 4),
    ("U32", 4),
    ("F32", 4),
    ("F64", 8),
    ("I64", 8),
    ("U64", 8),
];

/// What is wrong with a safetensors header, tensor by tensor, where the safetensors crate
/// says it less precisely (an unknown dtype such as FP8's `F8_E4M3` is "not valid JSON" to it,
/// and a bad offset is blamed on the tensor after it): the first tensor whose dtype, shape or
/// offsets are wrong, by name. `None` when the header is not a JSON object of tensors at all,
/// or nothing is found (the crate's own reason is then given).
fn diagnose_header(bytes: &[u8]) -> Option<String> {
    let len = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let json = bytes.get(8..8usize.checked_add(len)?)?;
    let data = (bytes.len() - 8 - len) as u64;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(json).ok()?;
    let mut ranges = Vec::new();
    for (key, value) in &header {
        if key == "__metadata__" {
            continue;
        }
        let dtype = value.get("dtype")?.as_str()?;
        let Some(&(_, size)) = SAFETENSORS_DTYPES.iter().find(|(name, _)| *name == dtype) else {
            let known: Vec<&str> = SAFETENSORS_DTYPES.iter().map(|(name, _)| *name).collect();
            return Some(format!(
                "tensor `{key}` has dtype `{dtype}`, which cannot be read (known: {}){}",
                known.join(", "),
                if dtype.starts_with("F8") { "; convert FP8 weights to F16, BF16 or F32 first" } else { "" }
            ));
        };
        let shape: Vec<u64> = serde_json::from_value(value.get("shape")?.clone()).ok()?;
        let [begin, end]: [u64; 2] = serde_json::from_value(value.get("data_offsets")?.clone()).ok()?;
        let bytes = shape.iter().try_fold(size as u64, |n, &d| n.checked_mul(d));
        if end < begin || bytes != Some(end - begin) {
            return Some(format!(
                "tensor `{key}`: data_offsets [{begin}, {end}] do not hold the {} bytes of a {dtype} tensor of shape {shape:?}",
                bytes.map_or("overflowing".to_string(), |b| b.to_string())
            ));
        }
        ranges.push((begin, end, key));
    }
    ranges.sort();
    // Tensors laid end to end past the data are a truncated file (the crate says so); one
    // tensor out of that line is the one at fault.
    let total = ranges.iter().fold(0u64, |n, (b, e, _)| n.saturating_add(e - b));
    let contiguous = ranges.last().is_some_and(|(_, e, _)| *e == total);
    if let Some((begin, end, key)) = ranges.iter().find(|(_, e, _)| *e > data).filter(|_| !contiguous) {
        return Some(format!(
            "tensor `{key}`: data_offsets [{begin}, {end}] run past the data section's {data} bytes"
        ));
    }
    for pair in ranges.windows(2) {
        let ((b0, e0, k0), (b1, e1, k1)) = (&pair[0], &pair[1]);
        if b1 < e0 {
            return Some(format!("the bytes of tensors `{k0}` [{b0}, {e0}] and `{k1}` [{b1}, {e1}] overlap"));
        }
    }
    None
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
/// of timm's key layouts (ViT, ConvNeXt, EfficientNet; see [`timm_to_torchvision`](crate::timm_to_torchvision))
/// are first mapped onto torchvision's, unless the model itself has timm's keys; the report's
/// `rewrites` says so. timm ViT weights whose position embedding is for another image size than
/// the model's have it resampled to the model's grid as timm does
/// ([`resample_abs_pos_embed`](crate::resample_abs_pos_embed)). A Hub folder whose `config.json` names an architecture timm's weights of
/// which do not load is refused before its weights are read
/// ([`check_timm_architecture`](crate::check_timm_architecture)).
pub fn load_weights(model: &dyn Module, path: impl AsRef<Path>, options: &LoadOptions) -> Result<LoadReport> {
    let path = path.as_ref();
    if path.is_dir() {
        crate::timm::check_hub_architecture(path)?;
    }
    let weights = read_weights(path)?;
    let model_keys = named_tensors(model);
    let own_layout = model_keys.iter().any(|(k, _, _)| {
        ["patch_embed.proj.weight", "stem.0.weight", "conv_stem.weight"].contains(&k.as_str())
    });
    let (mut weights, mapped) =
        if own_layout { (weights, None) } else { crate::timm::timm_to_torchvision(weights) };
    // timm's ViT weights for another image size: the position embedding resampled to the
    // model's grid, as timm's `checkpoint_filter_fn` does when it loads them.
    let resampled = match mapped.as_deref() {
        Some(line) if line.starts_with("timm ViT ") => {
            let target =
                model_keys.iter().find(|(k, _, _)| k == "encoder.pos_embedding").map(|(_, t, _)| t.size());
            target.and_then(|size| crate::timm::resample_vit_pos_embedding(&mut weights, &size))
        }
        _ => None,
    };
    let mut report = load_state_dict(model, weights, options)?;
    report.rewrites.splice(0..0, mapped.into_iter().chain(resampled));
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
