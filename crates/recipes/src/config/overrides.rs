//! Command-line overrides of a [`TrainConfig`]: `set(key, value)` by dotted key or unique leaf
//! name, and the list of keys it accepts.

use super::{one_line, TrainConfig, CONFIG_KEYS};
use crate::error::{RecipeError, Result};

impl TrainConfig {
    /// Sets one field from a command-line style `key` and `value`, e.g. `set("epochs", "5")`,
    /// `set("optim.lr", "3e-4")`, `set("model.pretrained", "w.pth")`, `set("grad_clip", "none")`.
    ///
    /// `key` is a dotted `section.field` from [`CONFIG_KEYS`] or a field name that is unique
    /// across sections; `-` may stand for `_` (`image-size`). `value` is read as a TOML value
    /// (`5`, `3e-4`, `true`, `[10, 20]`) and otherwise as a string; `none` clears an optional
    /// field. Setting `scheduler.kind` resets the scheduler's parameters to that kind's
    /// defaults. Does not [`validate`](Self::validate).
    ///
    /// ```
    /// use torchlight_recipes::{RecipeError, TrainConfig};
    /// let mut config = TrainConfig::from_toml_str("[train]\nepochs = 30\n")?;
    /// config.set("epochs", "5")?; // like `--epochs 5`
    /// config.set("optim.lr", "3e-4")?;
    /// assert_eq!((config.train.epochs, config.optim.lr), (5, 3e-4));
    /// assert!(matches!(config.set("epoch", "5"), Err(RecipeError::UnknownKey { .. })));
    /// config.validate()?;
    /// # Ok::<(), RecipeError>(())
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let full = resolve_key(key)?;
        let (section, field) = full.split_once('.').expect("CONFIG_KEYS are section.field");
        self.check_paths_are_utf8()?;
        let mut root =
            toml::Table::try_from(&*self).expect("a TrainConfig with UTF-8 paths serializes to TOML");
        let table = root
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("sections are tables");
        let bad = |reason: String| RecipeError::InvalidOverride {
            key: full.to_string(),
            value: value.to_string(),
            reason,
        };
        if full == "scheduler.kind" {
            table.clear();
        }
        let trimmed = value.trim();
        // TOML's integers are i64: a larger whole number would otherwise be read as a string.
        if trimmed.parse::<i64>().is_err() && trimmed.trim_start_matches(['+', '-']).parse::<u128>().is_ok() {
            let bound = if trimmed.starts_with('-') {
                format!("at least {}", i64::MIN)
            } else {
                format!("at most {}", i64::MAX)
            };
            return Err(bad(format!("must be {bound}, the range of a config's (TOML's) integers")));
        }
        let result = if trimmed.eq_ignore_ascii_case("none") && is_optional(full) {
            table.remove(field);
            toml::Value::Table(root).try_into::<TrainConfig>()
        } else {
            let parsed = parse_value(trimmed);
            table.insert(field.to_string(), parsed.clone());
            let first = toml::Value::Table(root.clone()).try_into::<TrainConfig>();
            match first {
                Err(_) if !parsed.is_str() => {
                    // `123` given for a string field (a folder name): try it as text.
                    let table = root.get_mut(section).and_then(|s| s.as_table_mut()).expect("inserted above");
                    table.insert(field.to_string(), toml::Value::String(trimmed.to_string()));
                    toml::Value::Table(root).try_into::<TrainConfig>().or(first)
                }
                other => other,
            }
        };
        *self = result.map_err(|e| {
            let mut reason = one_line(e.message());
            if section == "scheduler" && reason.starts_with("unknown field") {
                let kind = self.scheduler.kind();
                reason.push_str(&format!(
                    " (the `{kind}` scheduler has no `{field}`: set scheduler.kind first)"
                ));
            }
            bad(reason)
        })?;
        Ok(())
    }
}

fn is_optional(key: &str) -> bool {
    matches!(
        key,
        "data.image_size"
            | "data.interpolation"
            | "data.crop_pct"
            | "data.eval_image_size"
            | "data.eval_crop_pct"
            | "data.crop_mode"
            | "data.mean"
            | "data.std"
            | "model.pretrained"
            | "model.num_classes"
            | "optim.backbone_lr"
            | "optim.norm_weight_decay"
            | "optim.bias_weight_decay"
            | "optim.layer_decay"
            | "train.grad_clip"
            | "train.bce_target_thresh"
            | "train.early_stopping_patience"
            | "train.checkpoint_every_steps"
            | "text.tokenizer"
    )
}

/// Reads `text` as a TOML value (`5`, `1e-3`, `true`, `[1, 2]`, `"quoted"`), else as a string.
fn parse_value(text: &str) -> toml::Value {
    match format!("v = {text}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").expect("parsed a table with key v"),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

/// The dotted key a user's `key` names: itself when dotted, else the unique key with that leaf.
fn resolve_key(key: &str) -> Result<&'static str> {
    let normalized = key.trim().trim_start_matches("--").replace('-', "_");
    if let Some(k) = CONFIG_KEYS.iter().find(|k| **k == normalized) {
        return Ok(k);
    }
    let by_leaf: Vec<&'static str> =
        CONFIG_KEYS.iter().copied().filter(|k| k.rsplit('.').next() == Some(normalized.as_str())).collect();
    if by_leaf.len() == 1 {
        return Ok(by_leaf[0]);
    }
    let leaf = normalized.rsplit('.').next().unwrap_or_default().to_string();
    let suggestions = if by_leaf.is_empty() {
        let leaf_of = |k: &&&str| k.rsplit('.').next().unwrap_or_default().to_string();
        // Prefer keys the user's word begins (`epoch` -> `epochs`), then any that share it.
        let starting: Vec<String> = CONFIG_KEYS
            .iter()
            .filter(|k| !leaf.is_empty() && leaf_of(k).starts_with(leaf.as_str()))
            .map(|k| k.to_string())
            .collect();
        if !starting.is_empty() {
            starting
        } else {
            CONFIG_KEYS
                .iter()
                .filter(|k| {
                    !leaf.is_empty() && (leaf_of(k).contains(leaf.as_str()) || leaf.contains(&leaf_of(k)))
                })
                .map(|k| k.to_string())
                .collect()
        }
    } else {
        by_leaf.iter().map(|k| k.to_string()).collect()
    };
    Err(RecipeError::UnknownKey { key: key.to_string(), suggestions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{OptimizerKind, SchedulerConfig};
    use std::collections::BTreeSet;
    use std::path::PathBuf;
    use torchlight_tensor::DeviceSpec;

    /// A config with every optional field set and every scheduler parameter present somewhere.
    fn all_keys_seen() -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let schedulers = [
            SchedulerConfig::None,
            SchedulerConfig::Step { step_size: 3, gamma: 0.5 },
            SchedulerConfig::MultiStep { milestones: vec![1, 2], gamma: 0.5 },
            SchedulerConfig::Cosine { eta_min: 0.0 },
            SchedulerConfig::OneCycle { pct_start: 0.3, div_factor: 25.0, final_div_factor: 1e4 },
            SchedulerConfig::Plateau {
                monitor: "val_loss".into(),
                mode: "min".into(),
                factor: 0.1,
                patience: 10,
                threshold: 1e-4,
                threshold_mode: "rel".into(),
                cooldown: 0,
                min_lr: 0.0,
                eps: 1e-8,
            },
        ];
        for s in schedulers {
            let mut c = TrainConfig::default();
            c.model.pretrained = Some("w.pth".into());
            c.model.num_classes = Some(3);
            c.train.grad_clip = Some(1.0);
            c.train.early_stopping_patience = Some(3);
            c.train.checkpoint_every_steps = Some(100);
            c.train.mixup_off_epoch = Some(5);
            c.train.bce_target_thresh = Some(0.2);
            c.optim.norm_weight_decay = Some(0.0);
            c.optim.bias_weight_decay = Some(0.0);
            c.optim.layer_decay = Some(0.75);
            c.optim.backbone_lr = Some(1e-4);
            c.text.tokenizer = Some("tokenizer.json".into());
            c.data.image_size = Some(224);
            c.data.interpolation = Some(crate::config::Interpolation::Bicubic);
            c.data.crop_pct = Some(0.95);
            c.data.eval_image_size = Some(256);
            c.data.eval_crop_pct = Some(1.0);
            c.data.crop_mode = Some(crate::config::CropMode::Squash);
            c.data.mean = Some([0.5; 3]);
            c.data.std = Some([0.5; 3]);
            // Written only away from their defaults.
            c.data.hflip = 0.3;
            c.data.color_jitter = 0.4;
            c.data.rotation = 10.0;
            c.scheduler = s;
            let t = toml::Table::try_from(&c).unwrap();
            for (section, v) in t {
                for field in v.as_table().unwrap().keys() {
                    seen.insert(format!("{section}.{field}"));
                }
            }
        }
        seen
    }

    #[test]
    fn config_keys_match_the_structs() {
        let listed: BTreeSet<String> = CONFIG_KEYS.iter().map(|s| s.to_string()).collect();
        assert_eq!(listed, all_keys_seen());
    }

    #[test]
    fn defaults_are_valid_and_pytorch_like() {
        let c = TrainConfig::default();
        c.validate().unwrap();
        assert_eq!(c.optim.optimizer, OptimizerKind::AdamW);
        assert_eq!((c.optim.lr, c.optim.weight_decay, c.optim.betas), (1e-3, 0.01, [0.9, 0.999]));
        assert_eq!(c.scheduler, SchedulerConfig::Cosine { eta_min: 0.0 });
        assert_eq!((c.data.image_size(), c.train.batch_size, c.train.label_smoothing), (224, 32, 0.0));
        assert_eq!(c.data.train_dir(), PathBuf::from("data/train"));
        assert_eq!(c.train.device_spec().unwrap(), DeviceSpec::Auto);
    }

    #[test]
    fn empty_text_is_the_default_config() {
        assert_eq!(TrainConfig::from_toml_str("").unwrap(), TrainConfig::default());
    }

    #[test]
    fn to_toml_round_trips_every_scheduler() {
        for kind in ["none", "step", "cosine", "onecycle"] {
            let mut c = TrainConfig::default();
            c.set("scheduler.kind", kind).unwrap();
            c.set("grad_clip", "2.5").unwrap();
            c.set("pretrained", "weights/r18.pth").unwrap();
            let text = c.to_toml();
            assert_eq!(TrainConfig::from_toml_str(&text).unwrap(), c, "{text}");
        }
    }

    #[test]
    fn scheduler_parameters_get_pytorch_defaults() {
        let c = TrainConfig::from_toml_str("[scheduler]\nkind = \"step\"\n").unwrap();
        assert_eq!(c.scheduler, SchedulerConfig::Step { step_size: 30, gamma: 0.1 });
        let c = TrainConfig::from_toml_str("[scheduler]\nkind = \"onecycle\"\n").unwrap();
        assert_eq!(
            c.scheduler,
            SchedulerConfig::OneCycle { pct_start: 0.3, div_factor: 25.0, final_div_factor: 1e4 }
        );
        assert_eq!(c.scheduler.kind(), "onecycle");
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_are_errors_not_panics() {
        use std::os::unix::ffi::OsStrExt;
        let mut c = TrainConfig::default();
        c.data.root = PathBuf::from(std::ffi::OsStr::from_bytes(b"data\xff"));
        for err in [c.validate().unwrap_err(), c.clone().set("epochs", "3").unwrap_err()] {
            assert!(
                matches!(&err, RecipeError::InvalidConfig { field, .. } if field == "data.root"),
                "{err:?}"
            );
        }
    }

    #[test]
    fn parse_value_reads_toml_else_text() {
        assert_eq!(parse_value("5"), toml::Value::Integer(5));
        assert_eq!(parse_value("3e-4"), toml::Value::Float(3e-4));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("runs/a b"), toml::Value::String("runs/a b".into()));
    }

    #[test]
    fn resolve_key_takes_unique_leaves_and_dashes() {
        assert_eq!(resolve_key("epochs").unwrap(), "train.epochs");
        assert_eq!(resolve_key("--image-size").unwrap(), "data.image_size");
        assert_eq!(resolve_key("optim.lr").unwrap(), "optim.lr");
        match resolve_key("lr_backbone") {
            Err(RecipeError::UnknownKey { key, .. }) => assert_eq!(key, "lr_backbone"),
            other => panic!("expected UnknownKey, got {other:?}"),
        }
    }

    #[test]
    fn the_pixel_limit_is_pillows_by_default_and_settable() {
        let mut config = TrainConfig::default();
        assert_eq!(config.data.pixel_limit(), Some(178_956_970));
        config.set("data.max_image_pixels", "1000000").unwrap();
        assert_eq!(config.data.pixel_limit(), Some(1_000_000));
        config.set("max-image-pixels", "0").unwrap();
        assert_eq!(config.data.pixel_limit(), None, "0 lifts the limit");
        assert_eq!(TrainConfig::from_toml_str(&config.to_toml()).unwrap(), config);
    }
}
