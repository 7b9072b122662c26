//! `meta.json`: the versioned, documented description of a checkpoint folder.
//!
//! ```text
//! <checkpoint>/
//!   model.safetensors     the model's state_dict under PyTorch keys (weights and buffers);
//!                         Python: model.load_state_dict(safetensors.torch.load_file(path))
//!   training.safetensors  optimizer state tensors as "optimizer.<param>.<field>", torch's
//!                         generator states as "rng.cpu", "rng.cuda.<i>", and the training
//!                         loop's tensors (a mid-epoch checkpoint's partial metrics) as "loop.*"
//!   meta.json             this struct: format version, versions, time, progress, best metric,
//!                         optimizer groups, scheduler and GradScaler state, data seed, config,
//!                         and each file's size and CRC-32
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use torchlight_optim::{GradScalerState, OptimizerMeta, SchedulerState};

/// The `format` tag of every Torchlight checkpoint.
pub const FORMAT: &str = "torchlight-checkpoint";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// The libtorch version Torchlight is built against (tch 0.24.0).
pub const LIBTORCH_VERSION: &str = "2.11.0";

/// Whether larger or smaller is better for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricMode {
    /// Accuracy-like.
    Max,
    /// Loss-like.
    Min,
}

impl MetricMode {
    /// Whether `candidate` beats `incumbent`.
    pub fn improves(self, candidate: f64, incumbent: Option<f64>) -> bool {
        match incumbent {
            None => candidate.is_finite(),
            Some(best) => match self {
                MetricMode::Max => candidate > best,
                MetricMode::Min => candidate < best,
            },
        }
    }
}

/// A named metric value with its direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Its name (`val_acc`).
    pub name: String,
    /// Its value. NaN (a validation split with no images, a diverged loss) is written as JSON
    /// `null`, as serde_json writes every non-finite number, and read back as NaN.
    #[serde(deserialize_with = "nan_from_null")]
    pub value: f64,
    /// Larger or smaller is better.
    pub mode: MetricMode,
    /// The epoch it was measured after.
    pub epoch: u64,
}

/// A number, or `null` (what serde_json writes for NaN and the infinities) as NaN.
fn nan_from_null<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// Where training stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Epochs completed (the next epoch to run).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// Batches of epoch `epoch` already trained on: 0 at an epoch boundary, more for a
    /// mid-epoch checkpoint (absent in format 1 files written before mid-epoch resume).
    #[serde(default)]
    pub batch: u64,
}

/// Size and CRC-32 of a file of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the content, lowercase hex.
    pub crc32: String,
}

/// The content of `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The Torchlight version that wrote it.
    pub torchlight_version: String,
    /// The libtorch version it was written with.
    pub libtorch_version: String,
    /// Seconds since the Unix epoch at save time.
    pub created_unix: u64,
    /// The model's kind (`ResNet`) and parameter count, for error messages and humans.
    pub model_kind: String,
    /// Parameter elements in the model.
    pub model_parameters: i64,
    /// Epoch and step.
    pub progress: Progress,
    /// The metric this save was made for (e.g. the epoch's `val_acc`).
    pub metric: Option<Metric>,
    /// The best metric seen so far in the run.
    pub best: Option<Metric>,
    /// Optimizer hyperparameters and parameter names (tensors in training.safetensors).
    pub optimizer: Option<OptimizerMeta>,
    /// The lr scheduler's state.
    pub scheduler: Option<SchedulerState>,
    /// The GradScaler's state.
    pub grad_scaler: Option<GradScalerState>,
    /// The data seed (shuffles and augmentation derive from it and the epoch).
    pub data_seed: Option<u64>,
    /// Whether training.safetensors holds torch's generator states.
    pub has_rng: bool,
    /// The run's configuration, as the caller gave it.
    pub config: serde_json::Value,
    /// The training loop's own state (its epoch history, its callbacks' states), as the loop
    /// gave it; its tensors (partial metrics) are `loop.*` in training.safetensors.
    #[serde(default)]
    pub loop_state: serde_json::Value,
    /// Size and checksum of each data file.
    pub files: BTreeMap<String, FileRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint saved after an epoch whose metric was NaN reads back (it was "invalid
    /// type: null, expected f64", so the run could not be resumed or evaluated).
    #[test]
    fn a_nan_metric_survives_the_round_trip() {
        let metric = Metric { name: "val_acc".into(), value: f64::NAN, mode: MetricMode::Max, epoch: 1 };
        let text = serde_json::to_string(&metric).unwrap();
        assert!(text.contains("\"value\":null"), "{text}");
        let back: Metric = serde_json::from_str(&text).unwrap();
        assert!(back.value.is_nan() && back.epoch == 1);
        let finite: Metric = serde_json::from_str(&text.replace("null", "0.5")).unwrap();
        assert_eq!(finite.value, 0.5);
    }
}
