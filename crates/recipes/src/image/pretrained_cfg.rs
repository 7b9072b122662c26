//! A Hub model folder's `pretrained_cfg` as the run's preprocessing: the keys of `[data]` the
//! user's config leaves unset take the folder's values, as timm's `resolve_data_config` does.

use crate::config::{CropMode, Interpolation, TrainConfig};
use crate::error::{RecipeError, Result};

/// Fills the unset preprocessing keys of `config` (`data.image_size`, `data.eval_image_size`,
/// `data.interpolation`, `data.crop_pct`, `data.eval_crop_pct`, `data.crop_mode`, `data.mean`,
/// `data.std`) from the `pretrained_cfg` of the Hub model folder that
/// `model.pretrained` names; a key the config sets wins. Returns the line saying which values
/// came from `pretrained_cfg` (and which the config kept), or `None` when `model.pretrained`
/// is not a folder or its `config.json` has no `pretrained_cfg`. `pretrained_cfg.input_size`
/// sets `data.image_size` when the config leaves it unset, as timm's `resolve_data_config`
/// does when no `img_size` is given, and `test_input_size` / `test_crop_pct` the evaluation
/// side and crop (`use_test_size=True`: `test_input_size` only when the config names no size,
/// `test_crop_pct` only when it sets no `crop_pct`).
///
/// # Errors
/// The folder's errors ([`torchlight_nn::read_hub_folder`]); `pretrained_cfg.crop_mode`
/// `border` (not built) when `data.crop_mode` is unset, an `interpolation` other than
/// `bilinear`, `bicubic` or `nearest` when `data.interpolation` is unset, or a `std` that is
/// not positive, an `input_size` that is not square when `data.image_size` is unset: each
/// [`RecipeError::InvalidConfig`] naming the field and the file.
pub fn apply_pretrained_cfg(config: &mut TrainConfig) -> Result<Option<String>> {
    let Some(dir) = config.model.pretrained.clone() else { return Ok(None) };
    if !dir.is_dir() {
        return Ok(None);
    }
    let folder = torchlight_nn::read_hub_folder(&dir)?;
    let Some(cfg) = folder.config.pretrained_cfg else { return Ok(None) };
    let file = dir.join("config.json");
    let bad = |field: &str, value: String, reason: &str| RecipeError::InvalidConfig {
        field: format!("pretrained_cfg.{field}"),
        value,
        reason: format!("{reason} (in {})", file.display()),
    };
    let own_crop_mode = config.data.crop_mode.is_some();
    let crop_mode =
        match cfg.crop_mode.as_deref() {
            None => None,
            // The config's own wins (said below), whatever the folder names.
            Some(_) if own_crop_mode => Some(CropMode::Center),
            Some("center") => Some(CropMode::Center),
            Some("squash") => Some(CropMode::Squash),
            Some(mode) => return Err(bad(
                "crop_mode",
                format!("{mode:?}"),
                "is not built: Torchlight has timm's `center` and `squash` evaluation crops, not `border` \
                 (set data.crop_mode to choose one)",
            )),
        };
    let d = &mut config.data;
    let (mut taken, mut kept) = (Vec::new(), Vec::new());
    let image_size_given = d.image_size.is_some();
    if let Some([_, h, w]) = cfg.input_size {
        if let Some(size) = d.image_size {
            if (h, w) != (i64::from(size), i64::from(size)) {
                kept.push("data.image_size");
            }
        } else if h != w || u32::try_from(h).is_err() {
            return Err(bad(
                "input_size",
                format!("[3, {h}, {w}]"),
                "is not square, and Torchlight's images are (data.image_size); set data.image_size",
            ));
        } else {
            d.image_size = Some(h as u32);
            taken.push(format!("data.image_size = {h}"));
        }
    }
    // timm's evaluation size: `test_input_size` when the config names no size at all.
    if let Some([_, h, w]) = cfg.test_input_size {
        if d.eval_image_size.is_some() {
            kept.push("data.eval_image_size");
        } else if image_size_given {
            kept.push("data.image_size (also for evaluation)");
        } else if h != w || u32::try_from(h).is_err() {
            return Err(bad(
                "test_input_size",
                format!("[3, {h}, {w}]"),
                "is not square, and Torchlight's images are (data.eval_image_size); set data.eval_image_size",
            ));
        } else {
            d.eval_image_size = Some(h as u32);
            taken.push(format!("data.eval_image_size = {h}"));
        }
    }
    if let Some(p) = cfg.test_crop_pct {
        if d.eval_crop_pct.is_some() || d.crop_pct.is_some() {
            kept.push(if d.eval_crop_pct.is_some() {
                "data.eval_crop_pct"
            } else {
                "data.crop_pct (also for evaluation)"
            });
        } else {
            d.eval_crop_pct = Some(p);
            taken.push(format!("data.eval_crop_pct = {p}"));
        }
    }
    if let Some(mode) = crop_mode {
        if d.crop_mode.is_some() {
            kept.push("data.crop_mode");
        } else {
            d.crop_mode = Some(mode);
            taken.push(format!("data.crop_mode = {:?}", cfg.crop_mode.as_deref().unwrap_or_default()));
        }
    }
    if let Some(name) = &cfg.interpolation {
        if d.interpolation.is_some() {
            kept.push("data.interpolation");
        } else {
            let mode = match name.as_str() {
                "bilinear" => Interpolation::Bilinear,
                "bicubic" => Interpolation::Bicubic,
                "nearest" => Interpolation::Nearest,
                _ => {
                    return Err(bad(
                        "interpolation",
                        format!("{name:?}"),
                        "is not one Torchlight resizes with (`bilinear`, `bicubic`, `nearest`); \
                         set data.interpolation to choose one",
                    ))
                }
            };
            d.interpolation = Some(mode);
            taken.push(format!("data.interpolation = {name:?}"));
        }
    }
    if let Some(p) = cfg.crop_pct {
        if d.crop_pct.is_some() {
            kept.push("data.crop_pct");
        } else {
            d.crop_pct = Some(p);
            taken.push(format!("data.crop_pct = {p}"));
        }
    }
    let three = |v: &[f64]| [v[0], v[1], v[2]];
    if let Some(mean) = &cfg.mean {
        if d.mean.is_some() {
            kept.push("data.mean");
        } else if !mean.iter().all(|x| x.is_finite()) {
            return Err(bad("mean", format!("{mean:?}"), "must be 3 finite numbers"));
        } else {
            d.mean = Some(three(mean));
            taken.push(format!("data.mean = {:?}", three(mean)));
        }
    }
    if let Some(std) = &cfg.std {
        if d.std.is_some() {
            kept.push("data.std");
        } else if !std.iter().all(|x| x.is_finite() && *x > 0.0) {
            return Err(bad("std", format!("{std:?}"), "must be 3 finite numbers greater than 0"));
        } else {
            d.std = Some(three(std));
            taken.push(format!("data.std = {:?}", three(std)));
        }
    }
    let mut line = format!("preprocessing from {}'s pretrained_cfg: ", file.display());
    line.push_str(&if taken.is_empty() { "nothing".to_string() } else { taken.join(", ") });
    if !kept.is_empty() {
        line.push_str(&format!("; the config's own {} kept", kept.join(", ")));
    }
    Ok(Some(line))
}

/// `config` with [`apply_pretrained_cfg`] applied, for a tool that shows what a run would use
/// (`augment`) without starting one.
pub(crate) fn with_pretrained_cfg(config: &TrainConfig) -> Result<TrainConfig> {
    let mut resolved = config.clone();
    apply_pretrained_cfg(&mut resolved)?;
    Ok(resolved)
}
