//! A trained model rebuilt from a checkpoint folder: architecture, weights, classes and the
//! preprocessing it was trained with (for a text model, the tokenizer its card carries).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::Device;
use torchlight_checkpoint::{Checkpoint, Meta, Metric};
use torchlight_nn::Module;
use torchlight_recipes::{ModelCard, TaskKind};
use torchlight_text::Tokenizer;

pub struct Loaded {
    pub model: Box<dyn Module>,
    pub card: ModelCard,
    /// A text model's tokenizer, from its card (`None` for an image model).
    pub tokenizer: Option<Arc<dyn Tokenizer>>,
    /// The checkpoint folder the weights came from, and what it was saved for.
    pub from: LoadedFrom,
    /// The checkpoint folder asked for (a run folder's selected one) and the `meta.json` read
    /// from it: where `eval --calibrate` stores its temperature, refused if the folder was
    /// saved over since. `None` for a Hub folder.
    pub saved: Option<(PathBuf, Meta)>,
}

/// Which checkpoint a command loaded: eval, predict and export say it (and put it in `--json`),
/// since a run folder serves `best` or `best_ema`; or the Hub model folder (`--weights`).
pub struct LoadedFrom {
    pub dir: PathBuf,
    /// The timm architecture, when `dir` is a Hub model folder rather than a checkpoint.
    pub hub: Option<String>,
    /// Epochs completed when it was saved.
    pub epoch: u64,
    /// The metric it was saved for (`val_acc` of `best`), if any.
    pub metric: Option<Metric>,
}

impl LoadedFrom {
    pub fn to_json(&self) -> serde_json::Value {
        if let Some(arch) = &self.hub {
            return serde_json::json!({ "path": self.dir, "hub_architecture": arch });
        }
        serde_json::json!({
            "path": self.dir,
            "epoch": self.epoch,
            "metric": self.metric.as_ref().map(|m| serde_json::json!({"name": m.name, "value": m.value})),
        })
    }
}

impl std::fmt::Display for LoadedFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(arch) = &self.hub {
            return write!(f, "Hub folder {} ({arch})", self.dir.display());
        }
        write!(f, "checkpoint {} (epoch {}", self.dir.display(), self.epoch)?;
        if let Some(m) = &self.metric {
            write!(f, ", {} {:.4}", m.name, m.value)?;
        }
        write!(f, ")")
    }
}

/// A run folder's selected checkpoint (`checkpoints/best`, or `checkpoints/best_ema` when its
/// EMA weights validated better), or `path` itself. A run folder with no `best` is an error
/// saying why there is none (training stopped before an epoch ended, or no epoch validated
/// finite) and naming `last`; one with no checkpoint at all says so, not "no meta.json".
pub fn checkpoint_dir(path: &Path) -> Result<PathBuf> {
    let checkpoints = path.join("checkpoints");
    let (best, last) = (checkpoints.join("best"), checkpoints.join("last"));
    if best.is_dir() {
        return Ok(torchlight_recipes::selected_checkpoint(path));
    }
    if last.is_dir() {
        let why = match torchlight_checkpoint::read_meta(&last) {
            Ok((_, meta)) if meta.progress.epoch == 0 => {
                "training stopped before its first epoch ended, so no best exists yet (resume it with `torchlight train --resume` to train on)".to_string()
            }
            _ => "no epoch had a finite validation score (an empty validation split, or weights gone non-finite)".to_string(),
        };
        anyhow::bail!(
            "{}: the run has no best checkpoint: {why}; pass {} to use the last one",
            path.display(),
            last.display()
        )
    }
    if checkpoints.is_dir() || path.join("config.toml").is_file() {
        anyhow::bail!(
            "{}: a run folder with no checkpoint yet (training stopped before it saved one: at the end of the first epoch, or every train.checkpoint_every_steps)",
            path.display()
        )
    }
    Ok(path.to_path_buf())
}

/// Loads `path` (a checkpoint folder, or a run folder whose selected checkpoint is used).
pub fn load(path: &Path, device: Device) -> Result<Loaded> {
    let dir = checkpoint_dir(path)?;
    let checkpoint = Checkpoint::load(&dir)?;
    let card = ModelCard::from_checkpoint(&checkpoint)?;
    let tokenizer = match card.task() {
        TaskKind::Text => Some(card.text_tokenizer(&checkpoint.dir)?),
        TaskKind::Image => None,
    };
    let model = card.build_model(device)?;
    checkpoint.restore_model(model.as_ref()).with_context(|| format!("loading {}", dir.display()))?;
    let from = LoadedFrom {
        dir: checkpoint.dir.clone(),
        hub: None,
        epoch: checkpoint.meta.progress.epoch,
        metric: checkpoint.meta.metric.clone(),
    };
    let saved = Some((dir, checkpoint.meta.clone()));
    Ok(Loaded { model, card, tokenizer, from, saved })
}

/// The model of a Hub model folder (`--weights DIR`, `--model` optional: the folder's
/// `config.json` names it), every weight loaded, with the preprocessing its `pretrained_cfg`
/// gives (the `--set` keys winning, as in training), as a [`Loaded`] like a checkpoint's.
pub fn load_hub(model: Option<&str>, dir: &Path, sets: &[String], device: Device) -> Result<Loaded> {
    let mut config = torchlight_recipes::TrainConfig::default();
    for pair in sets {
        let Some((key, value)) = pair.split_once('=') else {
            anyhow::bail!("--set {pair}: expected KEY=VALUE, e.g. --set data.crop_pct=0.9");
        };
        config.set(key.trim(), value.trim())?;
    }
    let hub = torchlight_recipes::image::load_hub_model(config, model, dir, device)?;
    if let Some(line) = &hub.preprocessing_line {
        eprintln!("{line}");
    }
    let from = LoadedFrom {
        dir: dir.to_path_buf(),
        hub: Some(hub.folder.config.architecture.clone()),
        epoch: 0,
        metric: None,
    };
    Ok(Loaded { model: hub.model, card: hub.card, tokenizer: None, from, saved: None })
}
