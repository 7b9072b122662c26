//! timm's weights: Hugging Face Hub model folders (`config.json` beside `model.safetensors` or
//! `pytorch_model.bin`) and timm's `state_dict` key layouts mapped onto the torchvision-equivalent
//! modules where the math is the same (timm 1.0.31).
//!
//! - ResNet (`resnet18`..`resnet152`): timm's keys are torchvision's; nothing to map. The `d`
//!   variants (`resnet18d`..`resnet152d`) are built with timm's keys
//!   ([`ResNetVariant::D`](crate::ResNetVariant::D)); nothing to map either.
//! - ViT / DeiT (`vit_*_patch16_*`, `deit_*_patch16_*`, class token, no `fc_norm`): `cls_token`,
//!   `pos_embed`, `patch_embed.proj`, `blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1,
//!   mlp.fc2}`, `norm`, `head` onto [`VisionTransformer`](crate::VisionTransformer)'s keys (timm's
//!   packed `qkv` is PyTorch's `in_proj_weight`, same q, k, v order). A `pos_embed` for
//!   another image size (a `_384` folder into a 224-pixel model) is resampled to the model's
//!   grid as timm does ([`resample_abs_pos_embed`]).
//! - ConvNeXt (`convnext_*`): `stem.{0,1}`, `stages.S.downsample.{0,1}`,
//!   `stages.S.blocks.M.{gamma, conv_dw, norm, mlp.fc1, mlp.fc2}`, `head.{norm, fc}` onto
//!   [`ConvNeXt`](crate::ConvNeXt)'s `features.*` / `classifier.*`, `gamma` `[C]` reshaped to
//!   torchvision's `layer_scale` `[C, 1, 1]`.
//! - EfficientNet (`efficientnet_b0`..`efficientnet_b3`, which timm builds as torchvision does:
//!   the same padding, BatchNorm eps 1e-5): `conv_stem`/`bn1` onto `features.0`, block
//!   `blocks.S.M` onto `features.{S+1}.M.block` (depthwise-separable `conv_dw`, `bn1`, `se`,
//!   `conv_pw`, `bn2`; inverted residual `conv_pw`, `bn1`, `conv_dw`, `bn2`, `se`, `conv_pwl`,
//!   `bn3`; `se.conv_reduce`/`se.conv_expand` are `fc1`/`fc2`), `conv_head`/`bn2` onto the last
//!   `features`, `classifier` onto `classifier.1`.
//! - MobileNetV3 (`mobilenetv3_large_100`, `mobilenetv3_small_100`, built as torchvision's with
//!   timm's BatchNorm eps 1e-5): the same block keys, the blocks numbered `features.1`.. in
//!   order, `conv_head` (a 1x1 convolution on the pooled features) onto the Linear
//!   `classifier.0` (`[O, I, 1, 1]` reshaped to `[O, I]`), `classifier` onto `classifier.3`.
//!
//! Keys of neither layout's vocabulary are left as they are, so a strict load names them.

use crate::error::{NnError, Result};
use std::path::{Path, PathBuf};
use tch::Tensor;

/// The timm architectures (timm 1.0.31's names) whose timm `state_dict` loads strictly into the
/// registry's architecture of the same name: the only `architecture`s a Hub folder may hold.
/// Other names are refused in one line by [`check_timm_architecture`] before any weights are
/// read, including registry names that are not timm's (`mobilenet_v3_large`, torchvision's).
pub const TIMM_ARCHITECTURES: &[&str] = &[
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnet18d",
    "resnet34d",
    "resnet50d",
    "resnet101d",
    "resnet152d",
    "efficientnet_b0",
    "efficientnet_b1",
    "efficientnet_b2",
    "efficientnet_b3",
    "mobilenetv3_small_100",
    "mobilenetv3_large_100",
    "convnext_tiny",
    "convnext_small",
    "convnext_base",
    "vit_tiny_patch16_224",
    "vit_small_patch16_224",
    "vit_base_patch16_224",
    "vit_tiny_patch16_384",
    "vit_small_patch16_384",
    "vit_base_patch16_384",
    "deit_tiny_patch16_224",
    "deit_small_patch16_224",
    "deit_base_patch16_224",
    "deit_base_patch16_384",
];

/// Whether timm's weights of the architecture `name` (a Hub folder's `architecture`, its `.tag`
/// removed) load into Torchlight: `name` is one of [`TIMM_ARCHITECTURES`].
///
/// # Errors
/// [`NnError::UnsupportedTimmArchitecture`], one line naming `name` and listing the supported
/// ones (and saying so when the registry has `name` with torchvision's layout).
pub fn check_timm_architecture(name: &str) -> Result<()> {
    let name = name.split('.').next().unwrap_or(name);
    if TIMM_ARCHITECTURES.contains(&name) {
        return Ok(());
    }
    let note = if crate::registry::architecture(name).is_some() {
        format!(" (Torchlight's `{name}` has torchvision's keys, which timm's `{name}` does not share)")
    } else {
        String::new()
    };
    Err(NnError::UnsupportedTimmArchitecture {
        name: name.to_string(),
        note,
        supported: TIMM_ARCHITECTURES.to_vec(),
    })
}

/// The `architecture` of the Hub folder `dir` when it has a `config.json` (`None` for a folder
/// with weights only), checked with [`check_timm_architecture`].
///
/// # Errors
/// As [`read_hub_folder`]'s for the `config.json`, and [`check_timm_architecture`]'s.
pub(crate) fn check_hub_architecture(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("config.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    crate::file_kind::regular_file(&path)?;
    let text = std::fs::read_to_string(&path).map_err(|error| NnError::Io { path: path.clone(), error })?;
    let config = parse_hub_config(&path, &text)?;
    check_timm_architecture(&config.architecture)?;
    Ok(Some(config.architecture))
}

/// The weight files of a Hub model folder, in the order they are preferred.
pub const HUB_WEIGHT_FILES: &[&str] = &["model.safetensors", "pytorch_model.bin"];

/// timm's preprocessing of a pretrained model (`pretrained_cfg`, or the older flat form of
/// `config.json` that holds these fields at the top level).
#[derive(Debug, Clone, PartialEq)]
pub struct PretrainedCfg {
    /// `input_size`: channels, height, width.
    pub input_size: Option<[i64; 3]>,
    /// `test_input_size`: the evaluation input size, when it differs (timm's `a1` ResNets:
    /// trained at 224, evaluated at 288).
    pub test_input_size: Option<[i64; 3]>,
    /// `interpolation`: `bilinear`, `bicubic`, ...
    pub interpolation: Option<String>,
    /// `crop_pct`: the centre crop's share of the resized side.
    pub crop_pct: Option<f64>,
    /// `test_crop_pct`: the `crop_pct` at `test_input_size`.
    pub test_crop_pct: Option<f64>,
    /// `crop_mode`: `center`, `squash`, `border`.
    pub crop_mode: Option<String>,
    /// `mean` per channel.
    pub mean: Option<Vec<f64>>,
    /// `std` per channel.
    pub std: Option<Vec<f64>>,
    /// `label_names`: the class names in index order (timm moves a top-level `label_names`,
    /// or the older `labels`, here).
    pub label_names: Option<Vec<String>>,
}

/// What a Hub model folder's `config.json` says.
#[derive(Debug, Clone, PartialEq)]
pub struct HubConfig {
    /// timm's architecture name (`resnet50`; a tag after a dot, `resnet50.a1_in1k`, removed).
    pub architecture: String,
    /// The head's classes, when given.
    pub num_classes: Option<i64>,
    /// Its preprocessing, when given.
    pub pretrained_cfg: Option<PretrainedCfg>,
}

/// A Hub-style model folder: its config and the weights file chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct HubFolder {
    /// The folder.
    pub dir: PathBuf,
    /// Its `config.json`.
    pub config: HubConfig,
    /// `model.safetensors` when present, else `pytorch_model.bin`.
    pub weights: PathBuf,
}

fn config_error(path: &Path, reason: String) -> NnError {
    NnError::HubConfig { path: path.to_path_buf(), reason }
}

/// The weights file of the Hub folder `dir`: `model.safetensors`, else `pytorch_model.bin`.
///
/// # Errors
/// [`NnError::HubConfig`] naming the folder and the files looked for, or naming the preferred
/// file when it is there but cannot be read as one (a symlink to nothing, a FIFO): the other
/// file is not silently loaded in its place.
pub fn hub_weights_file(dir: &Path) -> Result<PathBuf> {
    for name in HUB_WEIGHT_FILES {
        let path = dir.join(name);
        // An entry that is there but unreadable (a dangling symlink, a FIFO) is an error, not a
        // reason to load the folder's other weights file in its place.
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(NnError::Io { path, error }),
            Ok(_) => {}
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => return Ok(path),
            Ok(m) => return Err(config_error(&path, crate::file_kind::not_a_file(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let target =
                    std::fs::read_link(&path).map_or_else(|_| "?".into(), |t| t.display().to_string());
                return Err(config_error(
                    &path,
                    format!(
                        "is a symlink to {target}, which does not exist (a Hub cache whose blob was removed?); \
                         restore it or delete the link (the folder's other weights file is not used in its place)"
                    ),
                ));
            }
            Err(error) => return Err(NnError::Io { path, error }),
        }
    }
    Err(config_error(
        dir,
        format!("a model folder needs one of {} and has neither", HUB_WEIGHT_FILES.join(" or ")),
    ))
}

/// Reads the Hub folder `dir`: `config.json` and the weights file [`hub_weights_file`] picks.
///
/// # Errors
/// [`NnError::Io`] for an unreadable `config.json` (or one that is not a regular file; a
/// leading UTF-8 byte-order mark is skipped), [`NnError::HubConfig`] naming the file and
/// the field that is missing or of the wrong type, or the weights file that is absent.
pub fn read_hub_folder(dir: impl AsRef<Path>) -> Result<HubFolder> {
    let dir = dir.as_ref();
    let path = dir.join("config.json");
    crate::file_kind::regular_file(&path)?;
    let text = std::fs::read_to_string(&path).map_err(|error| NnError::Io { path: path.clone(), error })?;
    let config = parse_hub_config(&path, &text)?;
    Ok(HubFolder { dir: dir.to_path_buf(), config, weights: hub_weights_file(dir)? })
}

/// Parses the text of a Hub `config.json` (`path` names it in errors).
///
/// # Errors
/// [`NnError::HubConfig`] naming the field.
pub fn parse_hub_config(path: &Path, text: &str) -> Result<HubConfig> {
    use serde_json::Value;
    // A UTF-8 byte-order mark (Windows editors write one) is not JSON, but Python's
    // `json.loads` of the file's bytes skips it; so does this.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root: Value =
        serde_json::from_str(text).map_err(|e| config_error(path, format!("not valid JSON: {e}")))?;
    let obj = root.as_object().ok_or_else(|| config_error(path, "not a JSON object".into()))?;
    let architecture = match obj.get("architecture") {
        Some(Value::String(s)) => s.split('.').next().unwrap_or(s).to_string(),
        Some(other) => return Err(config_error(path, format!("`architecture` is {other}, not a string"))),
        None if obj.contains_key("architectures") => {
            return Err(config_error(
                path,
                "has `architectures` (a Hugging Face transformers folder), not timm's `architecture`; \
                 only timm folders are read"
                    .into(),
            ))
        }
        None => return Err(config_error(path, "has no `architecture` field".into())),
    };
    let num_classes =
        match obj.get("num_classes") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().filter(|n| *n > 0).ok_or_else(|| {
                config_error(path, format!("`num_classes` is {v}, not a positive integer"))
            })?),
        };
    let pretrained_cfg = match obj.get("pretrained_cfg") {
        Some(Value::Object(cfg)) => Some(parse_pretrained_cfg(path, "pretrained_cfg.", cfg)?),
        Some(Value::Null) => None,
        Some(other) => return Err(config_error(path, format!("`pretrained_cfg` is {other}, not an object"))),
        // The older flat form: the preprocessing fields beside `architecture`.
        None if ["input_size", "interpolation", "crop_pct", "mean", "std"]
            .iter()
            .any(|k| obj.contains_key(*k)) =>
        {
            Some(parse_pretrained_cfg(path, "", obj)?)
        }
        None => None,
    };
    // timm's `_parse_model_cfg` moves a top-level `label_names` into `pretrained_cfg`.
    let pretrained_cfg = match (pretrained_cfg, obj.get("label_names")) {
        (Some(mut cfg), Some(_)) if cfg.label_names.is_none() && obj.contains_key("pretrained_cfg") => {
            let names = std::iter::once(("label_names".to_string(), obj["label_names"].clone())).collect();
            cfg.label_names = parse_pretrained_cfg(path, "", &names)?.label_names;
            Some(cfg)
        }
        (cfg, _) => cfg,
    };
    Ok(HubConfig { architecture, num_classes, pretrained_cfg })
}

fn parse_pretrained_cfg(
    path: &Path,
    prefix: &str,
    cfg: &serde_json::Map<String, serde_json::Value>,
) -> Result<PretrainedCfg> {
    use serde_json::Value;
    let bad = |field: &str, want: &str, v: &Value| {
        config_error(path, format!("`{prefix}{field}` is {v}, not {want}"))
    };
    let get = |k: &str| cfg.get(k).filter(|v| !v.is_null());
    let string = |k: &str| -> Result<Option<String>> {
        get(k).map(|v| v.as_str().map(str::to_string).ok_or_else(|| bad(k, "a string", v))).transpose()
    };
    let floats = |k: &str, n: usize| -> Result<Option<Vec<f64>>> {
        get(k)
            .map(|v| {
                let list = v
                    .as_array()
                    .filter(|a| a.len() == n)
                    .ok_or_else(|| bad(k, &format!("a list of {n} numbers"), v))?;
                list.iter()
                    .map(|x| x.as_f64().ok_or_else(|| bad(k, &format!("a list of {n} numbers"), v)))
                    .collect()
            })
            .transpose()
    };
    let size = |key: &str| {
        get(key)
            .map(|v| -> Result<[i64; 3]> {
                let want = "a list of 3 positive integers";
                let list = v.as_array().filter(|a| a.len() == 3).ok_or_else(|| bad(key, want, v))?;
                let mut out = [0i64; 3];
                for (o, x) in out.iter_mut().zip(list) {
                    *o = x.as_i64().filter(|n| *n > 0).ok_or_else(|| bad(key, want, v))?;
                }
                Ok(out)
            })
            .transpose()
    };
    // timm allows a crop_pct above 1 (the resize is then smaller than the crop, which pads),
    // as the recipe's `data.crop_pct` does: any positive number.
    let pct = |key: &str| {
        get(key)
            .map(|v| {
                v.as_f64()
                    .filter(|p| *p > 0.0 && p.is_finite())
                    .ok_or_else(|| bad(key, "a positive number (timm's are 0.875 to 1; above 1 pads)", v))
            })
            .transpose()
    };
    let label_names = get("label_names")
        .or_else(|| get("labels"))
        .map(|v| {
            let want = "a list of class names";
            v.as_array()
                .ok_or_else(|| bad("label_names", want, v))?
                .iter()
                .map(|x| x.as_str().map(str::to_string).ok_or_else(|| bad("label_names", want, v)))
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?;
    Ok(PretrainedCfg {
        input_size: size("input_size")?,
        test_input_size: size("test_input_size")?,
        interpolation: string("interpolation")?,
        crop_pct: pct("crop_pct")?,
        test_crop_pct: pct("test_crop_pct")?,
        crop_mode: string("crop_mode")?,
        mean: floats("mean", 3)?,
        std: floats("std", 3)?,
        label_names,
    })
}

/// Which timm layout `weights` are in, by their keys: `Some("ViT")`, `Some("ConvNeXt")`,
/// `Some("EfficientNet")`, `Some("MobileNetV3")`, or `None` (torchvision's layout, which timm's ResNets share).
pub fn timm_layout(weights: &[(String, Tensor)]) -> Option<&'static str> {
    let has = |k: &str| weights.iter().any(|(key, _)| key == k);
    if has("patch_embed.proj.weight") && has("cls_token") {
        Some("ViT")
    } else if has("stem.0.weight") && weights.iter().any(|(k, _)| k.starts_with("stages.")) {
        Some("ConvNeXt")
    } else if has("conv_stem.weight") && has("conv_head.weight") && has("bn2.weight") {
        Some("EfficientNet")
    } else if has("conv_stem.weight") && has("conv_head.weight") && has("conv_head.bias") {
        Some("MobileNetV3")
    } else {
        None
    }
}

/// `weights` in torchvision's layout when they are in a timm layout ([`timm_layout`]), with a
/// line for the load report saying so (`timm ViT layout -> torchvision (152 keys)`); unchanged
/// and `None` otherwise.
pub fn timm_to_torchvision(weights: Vec<(String, Tensor)>) -> (Vec<(String, Tensor)>, Option<String>) {
    let Some(layout) = timm_layout(&weights) else { return (weights, None) };
    let n = weights.len();
    let mapped = match layout {
        "ViT" => weights.into_iter().map(|(k, t)| (vit_key(&k).unwrap_or(k), t)).collect(),
        "ConvNeXt" => weights.into_iter().map(|(k, t)| convnext_entry(k, t)).collect(),
        "EfficientNet" => {
            let blocks = MobileBlocks::of(&weights);
            weights.into_iter().map(|(k, t)| (blocks.efficientnet_key(&k).unwrap_or(k), t)).collect()
        }
        _ => {
            let blocks = MobileBlocks::of(&weights);
            weights.into_iter().map(|(k, t)| blocks.mobilenet_v3_entry(k, t)).collect()
        }
    };
    (mapped, Some(format!("timm {layout} layout -> torchvision ({n} keys)")))
}

/// timm's `resample_abs_pos_embed` (timm 1.0.31, `layers/pos_embed.py`) for a square grid:
/// the position embedding `posemb` `[1, prefix + H*W, D]` (the first `num_prefix_tokens`, the
/// class token's, kept as they are) with its `H x W` grid resized to `new_grid` by
/// `F.interpolate(mode="bicubic", antialias=True, align_corners=False)` in float32 (PyTorch's
/// `_upsample_bicubic2d_aa`, whose cubic is Pillow's, a = -0.5, up- or downsampling), then back
/// to `posemb`'s dtype. A grid of the same size is returned unchanged.
///
/// # Panics
/// When `posemb` is not `[1, prefix + N, D]` with `N` a square.
pub fn resample_abs_pos_embed(posemb: &Tensor, new_grid: [i64; 2], num_prefix_tokens: i64) -> Tensor {
    let size = posemb.size();
    assert!(size.len() == 3 && size[0] == 1, "a position embedding is [1, tokens, dim], not {size:?}");
    let (tokens, dim) = (size[1] - num_prefix_tokens, size[2]);
    let side = (tokens as f64).sqrt().round() as i64;
    assert_eq!(side * side, tokens, "{tokens} position tokens are not a square grid");
    if [side, side] == new_grid {
        return posemb.shallow_clone();
    }
    let prefix = posemb.narrow(1, 0, num_prefix_tokens);
    let grid = posemb
        .narrow(1, num_prefix_tokens, tokens)
        .to_kind(tch::Kind::Float)
        .reshape([1, side, side, dim])
        .permute([0, 3, 1, 2]);
    let resized = grid
        .internal_upsample_bicubic2d_aa(new_grid, false, None, None)
        .permute([0, 2, 3, 1])
        .reshape([1, new_grid[0] * new_grid[1], dim])
        .to_kind(posemb.kind());
    Tensor::cat(&[prefix, resized], 1)
}

/// The ViT position embedding among `weights` (torchvision's `encoder.pos_embedding`, after
/// [`timm_to_torchvision`]) resampled to the model's `target` shape `[1, 1 + H*W, D]` when its
/// grid differs ([`resample_abs_pos_embed`], one class token), with a line for the load report
/// (`timm ViT position embedding resampled 4x4 -> 3x3 (bicubic, timm's resample_abs_pos_embed)`);
/// `None`, and `weights` unchanged, when the grids are equal or the shapes are not those of a
/// square grid with the same width (the strict load then names the shapes).
pub(crate) fn resample_vit_pos_embedding(weights: &mut [(String, Tensor)], target: &[i64]) -> Option<String> {
    let (_, t) = weights.iter_mut().find(|(k, _)| k == "encoder.pos_embedding")?;
    let size = t.size();
    let grid = |n: i64| {
        let side = ((n - 1).max(0) as f64).sqrt().round() as i64;
        (n > 1 && side * side == n - 1).then_some(side)
    };
    if size.len() != 3 || target.len() != 3 || size[0] != 1 || target[0] != 1 || size[2] != target[2] {
        return None;
    }
    let (from, to) = (grid(size[1])?, grid(target[1])?);
    if from == to {
        return None;
    }
    *t = resample_abs_pos_embed(t, [to, to], 1);
    Some(format!(
        "timm ViT position embedding resampled {from}x{from} -> {to}x{to} (bicubic, timm's resample_abs_pos_embed)"
    ))
}

fn vit_key(k: &str) -> Option<String> {
    let fixed = match k {
        "cls_token" => Some("class_token"),
        "pos_embed" => Some("encoder.pos_embedding"),
        "patch_embed.proj.weight" => Some("conv_proj.weight"),
        "patch_embed.proj.bias" => Some("conv_proj.bias"),
        "norm.weight" => Some("encoder.ln.weight"),
        "norm.bias" => Some("encoder.ln.bias"),
        "head.weight" => Some("heads.head.weight"),
        "head.bias" => Some("heads.head.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = k.strip_prefix("blocks.")?;
    let (n, inner) = rest.split_once('.')?;
    n.parse::<usize>().ok()?;
    let inner = match inner {
        "attn.qkv.weight" => "self_attention.in_proj_weight".to_string(),
        "attn.qkv.bias" => "self_attention.in_proj_bias".to_string(),
        _ => {
            let (module, leaf) = inner.rsplit_once('.')?;
            let module = match module {
                "norm1" => "ln_1",
                "norm2" => "ln_2",
                "attn.proj" => "self_attention.out_proj",
                "mlp.fc1" => "mlp.0",
                "mlp.fc2" => "mlp.3",
                _ => return None,
            };
            format!("{module}.{leaf}")
        }
    };
    Some(format!("encoder.layers.encoder_layer_{n}.{inner}"))
}

fn convnext_entry(k: String, t: Tensor) -> (String, Tensor) {
    match convnext_key(&k) {
        Some(new) if k.ends_with(".gamma") && t.dim() == 1 => {
            let c = t.size()[0];
            (new, t.reshape([c, 1, 1]))
        }
        Some(new) => (new, t),
        None => (k, t),
    }
}

fn convnext_key(k: &str) -> Option<String> {
    if let Some(rest) = k.strip_prefix("stem.") {
        let (i, leaf) = rest.split_once('.')?;
        return matches!(i, "0" | "1").then(|| format!("features.0.{i}.{leaf}"));
    }
    if let Some(rest) = k.strip_prefix("head.") {
        let (module, leaf) = rest.split_once('.')?;
        let i = match module {
            "norm" => 0,
            "fc" => 2,
            _ => return None,
        };
        return Some(format!("classifier.{i}.{leaf}"));
    }
    let rest = k.strip_prefix("stages.")?;
    let (s, rest) = rest.split_once('.')?;
    let s: usize = s.parse().ok()?;
    if let Some(rest) = rest.strip_prefix("downsample.") {
        let (i, leaf) = rest.split_once('.')?;
        return (s > 0 && matches!(i, "0" | "1")).then(|| format!("features.{}.{i}.{leaf}", 2 * s));
    }
    let rest = rest.strip_prefix("blocks.")?;
    let (m, inner) = rest.split_once('.')?;
    m.parse::<usize>().ok()?;
    let inner = if inner == "gamma" {
        "layer_scale".to_string()
    } else {
        let (module, leaf) = inner.rsplit_once('.')?;
        let i = match module {
            "conv_dw" => 0,
            "norm" => 2,
            "mlp.fc1" => 3,
            "mlp.fc2" => 5,
            _ => return None,
        };
        format!("block.{i}.{leaf}")
    };
    Some(format!("features.{}.{m}.{inner}", 2 * s + 1))
}

/// The blocks of a timm EfficientNet/MobileNetV3 `state_dict` (`blocks.S.M.*`): what kind each
/// is, which decides where its keys go in torchvision's `block` Sequential.
struct MobileBlocks {
    /// `(stage, index)` of each block, in order, with its kind.
    blocks: Vec<((usize, usize), MobileBlock)>,
}

#[derive(Debug, Clone, Copy)]
struct MobileBlock {
    /// An inverted residual (`conv_pw`, `conv_dw`, `conv_pwl`), not a depthwise-separable block
    /// (`conv_dw`, `conv_pw`) or a conv-bn-act (`conv`).
    inverted: bool,
    /// A conv-bn-act block (`conv`, `bn1`).
    conv_bn_act: bool,
    /// With squeeze-excitation (`se.conv_reduce`, `se.conv_expand`).
    se: bool,
}

impl MobileBlocks {
    fn of(weights: &[(String, Tensor)]) -> Self {
        let mut found = std::collections::BTreeMap::new();
        for (k, _) in weights {
            if let Some((s, m, inner)) = block_key(k) {
                let block = found.entry((s, m)).or_insert(MobileBlock {
                    inverted: false,
                    conv_bn_act: false,
                    se: false,
                });
                let module = inner.split('.').next().unwrap_or(inner);
                block.inverted |= module == "conv_pwl";
                block.conv_bn_act |= module == "conv";
                block.se |= module == "se";
            }
        }
        MobileBlocks { blocks: found.into_iter().collect() }
    }

    fn get(&self, s: usize, m: usize) -> Option<MobileBlock> {
        self.blocks.iter().find(|(at, _)| *at == (s, m)).map(|(_, b)| *b)
    }

    /// timm EfficientNet's key `k` in torchvision's EfficientNet: `conv_stem`/`bn1` are
    /// `features.0`, block `blocks.S.M` is `features.{S+1}.M.block`, `conv_head`/`bn2` the
    /// last `features`, `classifier` is `classifier.1`.
    fn efficientnet_key(&self, k: &str) -> Option<String> {
        let head = self.blocks.iter().map(|((s, _), _)| s + 2).max()?;
        if let Some((s, m, inner)) = block_key(k) {
            let inner = self.get(s, m)?.inner_key(inner)?;
            return Some(format!("features.{}.{m}.{inner}", s + 1));
        }
        stem_head_key(k, head, "features.{H}.0", Some("features.{H}.1"), "classifier.1")
    }

    /// timm MobileNetV3's key `k` in torchvision's MobileNetV3: `conv_stem`/`bn1` are
    /// `features.0`, the blocks `features.1`.. in order (torchvision's are not grouped into
    /// stages), the last a conv-bn-act; `conv_head` (a 1x1 convolution with bias after the
    /// pooling, `[O, I, 1, 1]`) is `classifier.0` (a Linear, `[O, I]`), `classifier` is
    /// `classifier.3`.
    fn mobilenet_v3_entry(&self, k: String, t: Tensor) -> (String, Tensor) {
        let mapped = match block_key(&k) {
            Some((s, m, inner)) => self.blocks.iter().position(|(at, _)| *at == (s, m)).and_then(|i| {
                let inner = self.blocks[i].1.inner_key(inner)?;
                Some(format!("features.{}.{inner}", i + 1))
            }),
            None => stem_head_key(&k, 0, "classifier.0", None, "classifier.3"),
        };
        match mapped {
            Some(new) if k == "conv_head.weight" && t.dim() == 4 => {
                let size = t.size();
                (new, t.reshape([size[0], size[1]]))
            }
            Some(new) => (new, t),
            None => (k, t),
        }
    }
}

impl MobileBlock {
    /// A key inside the block (`conv_dw.weight`) in torchvision's block (`block.1.0.weight`).
    fn inner_key(&self, inner: &str) -> Option<String> {
        let (module, leaf) = inner.split_once('.')?;
        if self.conv_bn_act {
            let i = match module {
                "conv" => 0,
                "bn1" => 1,
                _ => return None,
            };
            return Some(format!("{i}.{leaf}"));
        }
        let se = usize::from(self.se);
        // torchvision: [expand], depthwise, [squeeze-excitation], project; each conv-bn a
        // Sequential whose 0 is the convolution and 1 the BatchNorm.
        let (i, j) = match (self.inverted, module) {
            (true, "conv_pw") => (0, 0),
            (true, "bn1") => (0, 1),
            (true, "conv_dw") => (1, 0),
            (true, "bn2") => (1, 1),
            (true, "conv_pwl") => (2 + se, 0),
            (true, "bn3") => (2 + se, 1),
            (false, "conv_dw") => (0, 0),
            (false, "bn1") => (0, 1),
            (false, "conv_pw") => (1 + se, 0),
            (false, "bn2") => (1 + se, 1),
            (_, "se") if self.se => {
                let (conv, leaf) = leaf.split_once('.')?;
                let fc = match conv {
                    "conv_reduce" => "fc1",
                    "conv_expand" => "fc2",
                    _ => return None,
                };
                return Some(format!("block.{}.{fc}.{leaf}", 1 + usize::from(self.inverted)));
            }
            _ => return None,
        };
        Some(format!("block.{i}.{j}.{leaf}"))
    }
}

/// `blocks.S.M.rest` as `(S, M, rest)`.
fn block_key(k: &str) -> Option<(usize, usize, &str)> {
    let rest = k.strip_prefix("blocks.")?;
    let (s, rest) = rest.split_once('.')?;
    let (m, inner) = rest.split_once('.')?;
    Some((s.parse().ok()?, m.parse().ok()?, inner))
}

/// The stem (`conv_stem`, `bn1`), head convolution (`conv_head`, `bn2`) and `classifier` of a
/// timm EfficientNet/MobileNetV3 under the torchvision prefixes given (`{H}` is `head`; no
/// `bn2` for MobileNetV3, whose `conv_head` has none).
fn stem_head_key(
    k: &str,
    head: usize,
    conv_head: &str,
    bn2: Option<&str>,
    classifier: &str,
) -> Option<String> {
    let (module, leaf) = k.split_once('.')?;
    let prefix = match module {
        "conv_stem" => "features.0.0".to_string(),
        "bn1" => "features.0.1".to_string(),
        "conv_head" => conv_head.replace("{H}", &head.to_string()),
        "bn2" => bn2?.replace("{H}", &head.to_string()),
        "classifier" => classifier.to_string(),
        _ => return None,
    };
    Some(format!("{prefix}.{leaf}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_onto_torchvision() {
        assert_eq!(
            vit_key("blocks.11.attn.qkv.bias").unwrap(),
            "encoder.layers.encoder_layer_11.self_attention.in_proj_bias"
        );
        assert_eq!(
            vit_key("blocks.0.mlp.fc2.weight").unwrap(),
            "encoder.layers.encoder_layer_0.mlp.3.weight"
        );
        assert_eq!(vit_key("fc_norm.weight"), None);
        assert_eq!(convnext_key("stages.2.downsample.1.weight").unwrap(), "features.4.1.weight");
        assert_eq!(convnext_key("stages.3.blocks.2.gamma").unwrap(), "features.7.2.layer_scale");
        assert_eq!(convnext_key("stages.0.downsample.0.weight"), None);
        assert_eq!(convnext_key("head.fc.bias").unwrap(), "classifier.2.bias");
        let t = || Tensor::zeros([1], (tch::Kind::Float, tch::Device::Cpu));
        let efficientnet: Vec<(String, Tensor)> = [
            "conv_stem.weight",
            "blocks.0.0.conv_dw.weight",
            "blocks.0.0.se.conv_reduce.weight",
            "blocks.0.0.conv_pw.weight",
            "blocks.0.0.bn2.running_var",
            "blocks.6.0.conv_pw.weight",
            "blocks.6.0.se.conv_expand.bias",
            "blocks.6.0.conv_pwl.weight",
            "blocks.6.0.bn3.bias",
            "conv_head.weight",
            "bn2.weight",
            "classifier.bias",
        ]
        .iter()
        .map(|k| (k.to_string(), t()))
        .collect();
        assert_eq!(timm_layout(&efficientnet), Some("EfficientNet"));
        let (mapped, line) = timm_to_torchvision(efficientnet);
        let keys: Vec<&str> = mapped.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "features.0.0.weight",
                "features.1.0.block.0.0.weight",
                "features.1.0.block.1.fc1.weight",
                "features.1.0.block.2.0.weight",
                "features.1.0.block.2.1.running_var",
                "features.7.0.block.0.0.weight",
                "features.7.0.block.2.fc2.bias",
                "features.7.0.block.3.0.weight",
                "features.7.0.block.3.1.bias",
                "features.8.0.weight",
                "features.8.1.weight",
                "classifier.1.bias",
            ]
        );
        assert_eq!(line.unwrap(), "timm EfficientNet layout -> torchvision (12 keys)");
    }

    #[test]
    fn config_errors_name_the_field() {
        let p = Path::new("m/config.json");
        let e = parse_hub_config(p, r#"{"num_classes": 3}"#).unwrap_err().to_string();
        assert!(e.contains("m/config.json") && e.contains("`architecture`"), "{e}");
        let e = parse_hub_config(p, r#"{"architecture": "resnet18", "pretrained_cfg": {"crop_pct": 0}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`pretrained_cfg.crop_pct` is 0, not a positive number"), "{e}");
        // Above 1, as timm allows and `data.crop_pct` does.
        let wide =
            parse_hub_config(p, r#"{"architecture": "resnet18", "pretrained_cfg": {"crop_pct": 1.15}}"#);
        assert_eq!(wide.unwrap().pretrained_cfg.unwrap().crop_pct, Some(1.15));
        let flat = parse_hub_config(
            p,
            r#"{"architecture": "resnet18.a1_in1k", "crop_pct": 0.95, "mean": [0.5, 0.5, 0.5]}"#,
        )
        .unwrap();
        assert_eq!(flat.architecture, "resnet18");
        assert_eq!(flat.pretrained_cfg.unwrap().crop_pct, Some(0.95));
        // A top-level `label_names` belongs to `pretrained_cfg`, as timm's `_parse_model_cfg` puts it.
        let named = parse_hub_config(
            p,
            r#"{"architecture": "resnet18", "label_names": ["cat", "dog"], "pretrained_cfg": {"test_input_size": [3, 288, 288], "test_crop_pct": 1.0}}"#,
        )
        .unwrap()
        .pretrained_cfg
        .unwrap();
        assert_eq!(named.label_names, Some(vec!["cat".to_string(), "dog".to_string()]));
        assert_eq!((named.test_input_size, named.test_crop_pct), (Some([3, 288, 288]), Some(1.0)));
        let e =
            parse_hub_config(p, r#"{"architecture": "resnet18", "pretrained_cfg": {"label_names": [1]}}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("`pretrained_cfg.label_names` is [1]"), "{e}");
    }
}
