//! `RunSummary`: the numbers a recipe's run writes to `summary.json`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The numbers `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run folder.
    pub run_dir: PathBuf,
    /// Best validation top-1 accuracy.
    pub best_val_acc: f64,
    /// The (1-based) epoch it was reached at.
    pub best_epoch: u64,
    /// Test top-1 accuracy of the best checkpoint, when there is a `test/` split.
    pub test_acc: Option<f64>,
    /// Test top-k accuracy.
    pub test_topk_acc: Option<f64>,
    /// Epochs completed.
    pub epochs: u64,
    /// Whether early stopping ended the run.
    pub stopped_early: bool,
    /// Wall time of this invocation, seconds.
    pub seconds: f64,
    /// Mean training throughput over this invocation's epochs.
    pub train_images_per_s: f64,
    /// Class names, in index order.
    pub classes: Vec<String>,
    /// The ranks that trained together (1 unless data-parallel).
    #[serde(default = "one")]
    pub world_size: usize,
    /// Images per batch on each rank (`train.batch_size`); the global batch is this times
    /// `world_size`.
    #[serde(default)]
    pub batch_size: usize,
    /// With `train.model_ema`: the EMA weights' best validation top-1 accuracy.
    #[serde(default)]
    pub best_ema_val_acc: Option<f64>,
    /// The (1-based) epoch of [`best_ema_val_acc`](Self::best_ema_val_acc).
    #[serde(default)]
    pub best_ema_epoch: Option<u64>,
    /// Whether the run's outputs (the best checkpoint, the test figures, what eval, predict
    /// and export load) are the EMA weights. Always false for now: the recipe selects the raw
    /// model's best epoch and reports the EMA's figures beside it.
    #[serde(default)]
    pub ema_selected: bool,
}

fn one() -> usize {
    1
}
