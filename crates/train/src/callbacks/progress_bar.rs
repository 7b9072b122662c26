//! `ProgressBar`: bars for training and validation, and one summary line per epoch.

use crate::callback::{BatchEnd, Callback, Context};
use crate::error::Result;
use crate::record::EpochRecord;

/// Shows a bar per training and validation pass (on a terminal: throughput, ETA, the running
/// loss) and prints one line per epoch with its metrics, lr, throughput, data-stall share and
/// the notes other callbacks added (`*best*`). Added last by the Trainer.
#[derive(Debug, Default)]
pub struct ProgressBar {
    bar: Option<indicatif::ProgressBar>,
}

impl ProgressBar {
    /// A progress display writing to the Trainer's [`Progress`](crate::Progress).
    pub fn new() -> Self {
        Self::default()
    }
}

fn metrics_text(metrics: &[(String, f64)]) -> String {
    metrics
        .iter()
        .map(|(k, v)| if k == "loss" { format!("{k} {v:.4}") } else { format!("{k} {v:.3}") })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The epoch's summary line.
pub(crate) fn epoch_line(record: &EpochRecord, epochs: u64, notes: &[String]) -> String {
    let mut line = format!("epoch {}/{epochs}  train {}", record.epoch, metrics_text(&record.train));
    if !record.val.is_empty() {
        line.push_str(&format!("  val {}", metrics_text(&record.val)));
    }
    if !record.ema_val.is_empty() {
        line.push_str(&format!("  ema val {}", metrics_text(&record.ema_val)));
    }
    line.push_str(&format!(
        "  lr {:.2e}  {:.0} samples/s  stall {:.0}%  {:.1}s",
        record.lr, record.samples_per_s, record.data_stall_pct, record.seconds
    ));
    for note in notes {
        line.push_str("  ");
        line.push_str(note);
    }
    line
}

impl Callback for ProgressBar {
    fn name(&self) -> String {
        "ProgressBar".into()
    }

    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let p = ctx.position;
        let bar = ctx.progress.bar(p.batches, &format!("epoch {}", p.epoch + 1));
        bar.set_position(p.batch);
        self.bar = Some(bar);
        Ok(())
    }

    fn on_train_batch_end(&mut self, _ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        if let Some(bar) = &self.bar {
            if let Some(loss) = batch.running_loss {
                bar.set_message(format!("loss {loss:.4}"));
            }
            bar.inc(1);
        }
        Ok(())
    }

    fn on_validation_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.bar = Some(ctx.progress.bar(0, "validate"));
        Ok(())
    }

    fn on_validation_batch_end(&mut self, _ctx: &mut Context<'_>) -> Result<()> {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        let notes = ctx.take_notes();
        ctx.progress.line(&epoch_line(record, ctx.position.epochs, &notes));
        Ok(())
    }

    fn on_interrupt(&mut self, _ctx: &mut Context<'_>) -> Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_line_shows_metrics_lr_throughput_and_notes() {
        let r = EpochRecord {
            epoch: 2,
            lr: 1e-3,
            train: vec![("loss".into(), 0.5), ("acc".into(), 0.75)],
            val: vec![("loss".into(), 0.6), ("acc".into(), 0.7), ("top2".into(), 0.9)],
            ema_val: vec![],
            seconds: 3.25,
            samples_per_s: 120.4,
            data_stall_pct: 12.0,
        };
        assert_eq!(
            epoch_line(&r, 5, &["*best*".into()]),
            "epoch 2/5  train loss 0.5000 acc 0.750  val loss 0.6000 acc 0.700 top2 0.900  lr 1.00e-3  120 samples/s  stall 12%  3.2s  *best*"
        );
    }
}
