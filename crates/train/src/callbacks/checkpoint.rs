//! `ModelCheckpoint`: `last` after every epoch (and every N steps), `best` by a metric, and
//! the last N epochs, in a run's `checkpoints/` folder.

use crate::callback::{BatchEnd, Callback, Context};
use crate::error::Result;
use crate::record::EpochRecord;
use crate::task::Monitor;
use std::path::{Path, PathBuf};
use torchlight_checkpoint::CheckpointManager;

/// Saves the whole training state (everything [`Context::snapshot`] holds) through a
/// [`CheckpointManager`]: `last` after every epoch, `best` when the monitored metric improves
/// (the task's monitor unless set), optionally `epoch_NNNN` for the last N epochs and `last`
/// every N optimizer steps within an epoch; and `last` on an interrupt, so a stopped run
/// resumes at the exact batch.
#[derive(Debug)]
pub struct ModelCheckpoint {
    dir: PathBuf,
    monitor: Option<Monitor>,
    keep_epochs: usize,
    every_n_steps: Option<u64>,
    manager: Option<CheckpointManager>,
}

impl ModelCheckpoint {
    /// Checkpoints in `dir` (usually `<run>/checkpoints`).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ModelCheckpoint { dir: dir.into(), monitor: None, keep_epochs: 0, every_n_steps: None, manager: None }
    }

    /// Picks `best` by `monitor` instead of the task's.
    pub fn monitor(mut self, monitor: Monitor) -> Self {
        self.monitor = Some(monitor);
        self
    }

    /// Also keeps the last `n` epochs as `epoch_NNNN` (copies of `last`).
    pub fn keep_epochs(mut self, n: usize) -> Self {
        self.keep_epochs = n;
        self
    }

    /// Also saves `last` every `n` optimizer steps, mid-epoch.
    pub fn every_n_steps(mut self, n: u64) -> Self {
        self.every_n_steps = Some(n.max(1));
        self
    }

    /// The folder of `last`.
    pub fn last(&self) -> PathBuf {
        self.dir.join("last")
    }

    /// The folder of `best`.
    pub fn best(&self) -> PathBuf {
        self.dir.join("best")
    }

    /// The checkpoints folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn save_last(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if let Some(manager) = &mut self.manager {
            manager.save_last(ctx.snapshot())?;
            ctx.saved_checkpoint(manager.last());
        }
        Ok(())
    }
}

impl Callback for ModelCheckpoint {
    fn name(&self) -> String {
        "ModelCheckpoint".into()
    }

    fn on_train_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let monitor = self.monitor.clone().unwrap_or_else(|| ctx.monitor.clone());
        std::fs::create_dir_all(&self.dir).map_err(|e| crate::TrainError::io(&self.dir, e))?;
        self.manager =
            Some(CheckpointManager::new(&self.dir, monitor.name, monitor.mode).keep_epochs(self.keep_epochs));
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        let due =
            self.every_n_steps.is_some_and(|n| batch.stepped && ctx.position.global_step.is_multiple_of(n));
        // The epoch's last batch is saved by `on_train_epoch_end`, with its metrics.
        if due && ctx.position.batch < ctx.position.batches {
            self.save_last(ctx)?;
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        let Some(manager) = &mut self.manager else { return Ok(()) };
        let name = self.monitor.as_ref().map_or(&ctx.monitor.name, |m| &m.name);
        let value = record.monitored(name).unwrap_or(f64::NAN);
        let saved = manager.save(ctx.snapshot(), value)?;
        let last = manager.last();
        if saved.best {
            ctx.annotate("*best*");
        }
        ctx.saved_checkpoint(last);
        Ok(())
    }

    fn on_interrupt(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        self.save_last(ctx)
    }
}
