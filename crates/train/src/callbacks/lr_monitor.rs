//! `LearningRateMonitor`: every param group's learning rate, logged for TensorBoard.

use crate::callback::{BatchEnd, Callback, Context};
use crate::error::Result;
use crate::record::EpochRecord;
use crate::scheduler::Interval;

/// Logs the learning rate of each param group as `lr/group<i>` (Lightning's
/// `LearningRateMonitor`), after every epoch or every optimizer step. Loggers placed after it
/// (the run folder's TensorBoard logger) write the values.
#[derive(Debug)]
pub struct LearningRateMonitor {
    interval: Interval,
}

impl LearningRateMonitor {
    /// Logs every `interval`.
    pub fn new(interval: Interval) -> Self {
        LearningRateMonitor { interval }
    }

    fn log(ctx: &mut Context<'_>, step: i64) {
        for (i, lr) in ctx.optimizer.lrs().into_iter().enumerate() {
            ctx.log_scalar(format!("lr/group{i}"), lr, step);
        }
    }
}

impl Callback for LearningRateMonitor {
    fn name(&self) -> String {
        "LearningRateMonitor".into()
    }

    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        if self.interval == Interval::Step && batch.stepped {
            let step = ctx.position.global_step as i64;
            Self::log(ctx, step);
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        if self.interval == Interval::Epoch {
            Self::log(ctx, record.epoch as i64);
        }
        Ok(())
    }
}
