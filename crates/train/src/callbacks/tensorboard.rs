//! `TensorBoardLogging`: the epoch's metrics and any logged scalars in a TensorBoard event file.

use crate::callback::{BatchEnd, Callback, Context};
use crate::error::Result;
use crate::record::EpochRecord;
use crate::tfevents::EventWriter;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Writes each epoch's record to `events.out.tfevents.*` in a folder (`tensorboard --logdir
/// runs`), under PyTorch users' usual tags: `loss/train`, `loss/val`, `accuracy/train`,
/// `accuracy/val`, `accuracy/val_top5`, `<metric>/<stage>` for other metrics (an EMA's are
/// stage `ema_val`: `loss/ema_val`, `accuracy/ema_val`), `lr`,
/// `throughput/samples_per_s`, `throughput/data_stall_pct`; and whatever earlier callbacks
/// logged with [`Context::log_scalar`].
///
/// Scalars logged in a batch hook (`LearningRateMonitor`'s per-step `lr/group<i>`) are at
/// optimizer steps, the rest at epochs: on resume the new file's `SessionLog START` drops the
/// points logged after the checkpoint on both axes, and the step-axis points up to the
/// checkpoint's step are written again (their tags are this callback's checkpointed state).
#[derive(Debug)]
pub struct TensorBoardLogging {
    dir: PathBuf,
    writer: Option<EventWriter>,
    /// Tags logged in a batch hook, on the optimizer-step axis.
    step_tags: BTreeSet<String>,
}

impl TensorBoardLogging {
    /// Writes into `dir` (usually the run folder).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        TensorBoardLogging { dir: dir.into(), writer: None, step_tags: BTreeSet::new() }
    }

    fn drain(&mut self, ctx: &mut Context<'_>, per_step: bool) -> Result<()> {
        let logged = ctx.take_logged();
        if let Some(w) = &mut self.writer {
            for (tag, value, step) in logged {
                w.add_scalar(&tag, value, step)?;
                if per_step && !self.step_tags.contains(&tag) {
                    self.step_tags.insert(tag);
                }
            }
        }
        Ok(())
    }
}

/// The TensorBoard tag of metric `name` of `stage` (`train`, `val`).
fn tag(name: &str, stage: &str) -> String {
    match name {
        "loss" => format!("loss/{stage}"),
        "acc" => format!("accuracy/{stage}"),
        top if top.starts_with("top") => format!("accuracy/{stage}_{top}"),
        other => format!("{other}/{stage}"),
    }
}

impl Callback for TensorBoardLogging {
    fn name(&self) -> String {
        "TensorBoardLogging".into()
    }

    fn on_train_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| crate::TrainError::io(&self.dir, e))?;
        let done = ctx.history.len() as i64;
        let p = ctx.position;
        self.writer = Some(if done > 0 || p.epoch > 0 || p.global_step > 0 {
            EventWriter::resume_with_step_tags(&self.dir, done, &self.step_tags, p.global_step as i64)?
        } else {
            EventWriter::create(&self.dir)?
        });
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, _batch: &BatchEnd) -> Result<()> {
        self.drain(ctx, true)
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        self.drain(ctx, false)?;
        let Some(w) = &mut self.writer else { return Ok(()) };
        let mut scalars: Vec<(String, f64)> = Vec::new();
        scalars.extend(record.train.iter().map(|(k, v)| (tag(k, "train"), *v)));
        scalars.extend(record.val.iter().map(|(k, v)| (tag(k, "val"), *v)));
        scalars.extend(record.ema_val.iter().map(|(k, v)| (tag(k, "ema_val"), *v)));
        scalars.push(("lr".into(), record.lr));
        scalars.push(("throughput/samples_per_s".into(), record.samples_per_s));
        scalars.push(("throughput/data_stall_pct".into(), record.data_stall_pct));
        let refs: Vec<(&str, f64)> = scalars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        w.add_scalars(record.epoch as i64, &refs)
    }

    /// The tags on the optimizer-step axis, for the resume's replay.
    fn state_dict(&self) -> serde_json::Value {
        serde_json::json!({ "step_tags": self.step_tags })
    }

    fn load_state_dict(&mut self, state: &serde_json::Value) -> Result<()> {
        // Checkpoints from before the field hold null: no tags to replay.
        if let Some(tags) = state.get("step_tags").and_then(|t| t.as_array()) {
            self.step_tags = tags.iter().filter_map(|t| t.as_str().map(str::to_string)).collect();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tags_follow_the_pytorch_habits() {
        assert_eq!(super::tag("loss", "val"), "loss/val");
        assert_eq!(super::tag("acc", "train"), "accuracy/train");
        assert_eq!(super::tag("top5", "val"), "accuracy/val_top5");
        assert_eq!(super::tag("mae", "val"), "mae/val");
        assert_eq!(super::tag("acc", "ema_val"), "accuracy/ema_val");
        assert_eq!(super::tag("loss", "ema_val"), "loss/ema_val");
    }
}
