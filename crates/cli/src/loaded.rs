//! A trained model rebuilt from a checkpoint folder: architecture, weights, classes and the
//! preprocessing it was trained with.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use tch::Device;
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::Module;
use torchlight_recipes::ModelCard;

pub struct Loaded {
    pub model: Box<dyn Module>,
    pub card: ModelCard,
}

/// A run folder's selected checkpoint (`checkpoints/best`, or `checkpoints/best_ema` when the
/// run selected its EMA weights), or `path` itself. A run folder with
/// no `best` (no epoch had a finite validation score, e.g. an empty validation split) is an
/// error saying so and naming `last`, not "not a Torchlight checkpoint".
pub fn checkpoint_dir(path: &Path) -> Result<PathBuf> {
    let checkpoints = path.join("checkpoints");
    let best = checkpoints.join("best");
    if best.is_dir() {
        Ok(torchlight_recipes::selected_checkpoint(path))
    } else if checkpoints.join("last").is_dir() {
        anyhow::bail!(
            "{}: the run has no best checkpoint (no epoch had a finite validation score: an empty validation split?); pass {} to use the last one",
            path.display(),
            checkpoints.join("last").display()
        )
    } else {
        Ok(path.to_path_buf())
    }
}

/// Loads `path` (a checkpoint folder, or a run folder whose `checkpoints/best` is used).
pub fn load(path: &Path, device: Device) -> Result<Loaded> {
    let dir = checkpoint_dir(path)?;
    let checkpoint = Checkpoint::load(&dir)?;
    let card = ModelCard::from_checkpoint(&checkpoint)?;
    let model = card.build_model(device)?;
    checkpoint.restore_model(model.as_ref()).with_context(|| format!("loading {}", dir.display()))?;
    Ok(Loaded { model, card })
}
