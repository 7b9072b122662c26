//! `RunSummary`: the numbers a recipe's run writes to `summary.json`.

use crate::error::{RecipeError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use torchlight_optim::ParamGroups;
use torchlight_train::Progress;

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
    /// The optimizer's parameter groups ([`param_groups`](crate::param_groups)), in order.
    #[serde(default)]
    pub param_groups: Vec<ParamGroupSummary>,
    /// With `train.model_ema`: the EMA weights' best validation top-1 accuracy.
    #[serde(default)]
    pub best_ema_val_acc: Option<f64>,
    /// The (1-based) epoch of [`best_ema_val_acc`](Self::best_ema_val_acc).
    #[serde(default)]
    pub best_ema_epoch: Option<u64>,
    /// Whether the EMA weights were selected: their best `ema_val_acc` beat the raw model's
    /// best `val_acc`, so the test figures are theirs and `eval`, `predict` and `export` of the
    /// run folder load `checkpoints/best_ema` (see [`selected_checkpoint`]).
    #[serde(default)]
    pub ema_selected: bool,
}

/// The checkpoint a run folder's outputs come from, decided from the checkpoints themselves:
/// `checkpoints/best_ema` when its `ema_val_acc` beats `checkpoints/best`'s `val_acc` (the rule
/// by which a run selects its EMA weights, [`RunSummary::ema_selected`]), else
/// `checkpoints/best`. Not from `summary.json`, which a run extended and then interrupted
/// leaves behind the checkpoints it has since saved.
pub fn selected_checkpoint(run: &Path) -> PathBuf {
    let best = run.join("checkpoints/best");
    let ema = run.join("checkpoints/best_ema");
    let metric = |dir: &Path| torchlight_checkpoint::read_meta(dir).ok().and_then(|(_, meta)| meta.metric);
    match (metric(&best), metric(&ema)) {
        (Some(raw), Some(averaged)) if raw.name == "val_acc" && averaged.value > raw.value => ema,
        _ => best,
    }
}

/// One parameter group as the run's log, `summary.json` and `torchlight summary` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamGroupSummary {
    /// The rules that made the group (`prefix `fc.`, layer 9, no weight decay`).
    pub rules: String,
    /// Its initial lr (before warm-up and schedule).
    pub lr: f64,
    /// Its weight decay.
    pub weight_decay: f64,
    /// Its layer under layer-wise lr decay.
    pub layer: Option<usize>,
    /// Its parameters' names, in `state_dict` order.
    pub params: Vec<String>,
    /// The values its parameters hold.
    pub values: i64,
    /// How many of its tensors do not train (`requires_grad` off when the groups were made:
    /// the BatchNorms `model.freeze_bn` froze).
    #[serde(default)]
    pub frozen: usize,
}

impl ParamGroupSummary {
    /// Each of `groups`, in order.
    pub fn of(groups: &ParamGroups) -> Vec<ParamGroupSummary> {
        groups
            .groups()
            .iter()
            .map(|g| ParamGroupSummary {
                rules: g.label(),
                lr: g.lr,
                weight_decay: g.weight_decay,
                layer: g.layer,
                params: g.names().iter().map(|n| n.to_string()).collect(),
                values: g.params.iter().map(|(_, t)| t.numel() as i64).sum(),
                frozen: g.params.iter().filter(|(_, t)| !t.requires_grad()).count(),
            })
            .collect()
    }
}

/// `lr 0.0001, weight decay 0.01, 20 tensors, 11166912 values (weight decay): conv1.weight .. layer4.1.conv2.weight`,
/// with `, 40 frozen` after the rules when some of its tensors do not train.
impl fmt::Display for ParamGroupSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lr {:.4e}, weight decay {}, {} tensors, {} values ({})",
            self.lr,
            self.weight_decay,
            self.params.len(),
            self.values,
            self.rules
        )?;
        if self.frozen > 0 {
            write!(f, ", {} frozen", self.frozen)?;
        }
        match self.params.as_slice() {
            [] => Ok(()),
            [one] => write!(f, ": {one}"),
            [first, .., last] => write!(f, ": {first} .. {last}"),
        }
    }
}

fn one() -> usize {
    1
}

/// A run whose validation figures were NaN or Inf (weights or BatchNorm statistics gone
/// non-finite, e.g. under `train.on_nonfinite = "skip"`) says so, naming the epochs, and fails
/// unless `train.allow_nonfinite_val`; those epochs were never taken as best.
pub(crate) fn check_finite_validation(
    history: &[torchlight_train::EpochRecord],
    summary: &RunSummary,
    allowed: bool,
    progress: &Progress,
) -> Result<()> {
    let bad: Vec<String> = history
        .iter()
        .filter_map(|r| {
            let names = r.non_finite_validation();
            (!names.is_empty()).then(|| format!("epoch {} ({})", r.epoch, names.join(", ")))
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    let best = if summary.best_epoch > 0 {
        format!("checkpoints/best is epoch {}, the best finite one", summary.best_epoch)
    } else {
        "no epoch validated finite, so there is no best checkpoint".to_string()
    };
    let message = format!(
        "validation was not finite at {}: the weights or the BatchNorm statistics went non-finite in training; {best}",
        bad.join(", ")
    );
    progress.line(&format!("warning: {message}"));
    if allowed {
        return Ok(());
    }
    Err(RecipeError::RunDir {
        path: summary.run_dir.clone(),
        reason: format!(
            "{message}; lower optim.lr or set train.grad_clip, or set train.allow_nonfinite_val = true to accept the run"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use torchlight_checkpoint::Snapshot;

    /// The EMA weights serve the run exactly when their best checkpoint's `ema_val_acc` beats
    /// `best`'s `val_acc`, whatever a (stale) `summary.json` says.
    #[test]
    fn the_selected_checkpoint_follows_the_checkpoints_not_the_summary() {
        let run = tempfile::tempdir().unwrap();
        let run = run.path();
        let (best, ema) = (run.join("checkpoints/best"), run.join("checkpoints/best_ema"));
        let model = torchlight_nn::Linear::new(2, 2, true);
        let save = |dir: &Path, name: &str, value: f64| {
            let metric = torchlight_checkpoint::Metric {
                name: name.into(),
                value,
                mode: torchlight_checkpoint::MetricMode::Max,
                epoch: 1,
            };
            let snapshot = Snapshot { metric: Some(metric), ..Snapshot::model(&model) };
            torchlight_checkpoint::save(dir, &snapshot).unwrap();
        };
        assert_eq!(selected_checkpoint(run), best, "no checkpoint yet");
        save(&best, "val_acc", 0.5);
        assert_eq!(selected_checkpoint(run), best, "no best_ema");
        save(&ema, "ema_val_acc", 0.75);
        assert_eq!(selected_checkpoint(run), ema);
        // A summary saying otherwise (written before the run went on) does not decide.
        std::fs::write(run.join("summary.json"), r#"{"run_dir":"x","best_val_acc":0.9,"best_epoch":1,"test_acc":null,"test_topk_acc":null,"epochs":1,"stopped_early":false,"seconds":1,"train_images_per_s":1,"classes":[],"ema_selected":false}"#).unwrap();
        assert_eq!(selected_checkpoint(run), ema);
        // The raw model caught up: a tie keeps the raw weights, as the run's selection does.
        save(&best, "val_acc", 0.75);
        assert_eq!(selected_checkpoint(run), best);
    }
}
