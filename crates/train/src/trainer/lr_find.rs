//! `Trainer::lr_find`: the lr range test (`lr_finder.rs`) driven through the Trainer's own
//! step (`StepRunner`: autocast, GradScaler, accumulation, clipping, the guards) and batch
//! transform, on the training source `fit` takes, with everything it touches put back after.
//!
//! Under data parallelism every rank runs the same sweep on its shard, as `fit` does: the
//! replicas start from rank 0's weights, the gradients are averaged over the ranks before each
//! step, and each step's loss is the mean over the ranks, so every rank draws the same curve,
//! stops at the same step and gets the same suggestion (Lightning reduces the loss the same way).
//!
//! The snapshot (`snapshot.rs`) is kept in memory (Lightning writes a checkpoint file and
//! reads it back, and once restored too little: its bug #6675): the model's parameters and
//! buffers, the optimizer's state and lrs, torch's generators and Torchlight's process-wide
//! one, copied beside the tensors. The lr
//! scheduler, the plateau scheduler and the callbacks are never called; the GradScaler is the
//! sweep's own (every `fit` starts a fresh one); a DataLoader's epochs depend only on (seed,
//! epoch, index), so reading epochs from it changes nothing.

use super::snapshot::{Snapshot, SnapshotPlace};
use super::{AsDynModule, Trainer};
use crate::batch::Batch;
use crate::batch_transform::{BatchContext, BatchTransform};
use crate::distributed::Distributed;
use crate::error::{Result, TrainError};
use crate::guard;
use crate::lr_finder::{LossSmoother, LrFindConfig, LrFinder};
use crate::source::BatchSource;
use crate::task::Task;
use tch::{Device, Tensor};
use torchlight_optim::Optimizer;

impl Trainer {
    /// The learning-rate range test (Leslie Smith's, as PyTorch Lightning's `Tuner.lr_find`
    /// runs it; see [`LrFindConfig`] for the settings and where it departs from Lightning):
    /// `config.num_training` optimizer steps on `train` (epoch after epoch from its first
    /// batch, as many as it takes) with the lr raised each step from `min_lr` to `max_lr`,
    /// through this Trainer's own step ([`StepRunner`] with its [`StepConfig`]: AMP, GradScaler,
    /// accumulation, clipping, the non-finite guard) and its batch transform, stopping early
    /// when the smoothed loss diverges (or a step's gradients are not finite). Returns the
    /// curve and the suggestion; [`LrFinder::plot`] draws it.
    ///
    /// Every param group keeps its ratio to the group with the largest lr when the test
    /// starts, and that group's lr is the one swept and suggested (for one group, the lr).
    ///
    /// Afterwards the model's parameters and buffers, the optimizer (state and lrs) and the
    /// random generators are exactly as they were, so `lr_find` then `fit` trains as `fit`
    /// alone does, bit for bit on the CPU; the schedulers and callbacks are not touched.
    ///
    /// A distributed Trainer ([`TrainerBuilder::distributed`]) runs it on every rank, each on
    /// its shard of the data (call it on every rank, as `fit`): the replicas start from rank
    /// 0's weights, the gradients are averaged over the ranks before each step and each step's
    /// loss is the ranks' mean, so every rank returns the same curve and suggestion, and the
    /// sweep equals one process's on the ranks' batches together. Each rank's own weights are
    /// put back afterwards (`fit` then broadcasts rank 0's, as always). Only rank 0 prints.
    ///
    /// [`TrainerBuilder::distributed`]: super::TrainerBuilder::distributed
    ///
    /// [`StepConfig`]: super::StepConfig
    /// [`StepRunner`]: super::StepRunner
    pub fn lr_find<M, B, T>(
        &mut self,
        model: &mut M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        train: &mut dyn BatchSource<B>,
        config: &LrFindConfig,
    ) -> Result<LrFinder>
    where
        M: AsDynModule + ?Sized,
        B: Batch + 'static,
        T: Task<M, B> + ?Sized,
    {
        config.validate()?;
        if train.is_empty() {
            return Err(TrainError::InvalidSetting {
                setting: "lr_find".into(),
                value: "an empty training source".into(),
                reason: "the range test needs training batches".into(),
            });
        }
        guard::check_device(model.as_dyn(), self.device)?;
        let saved = Snapshot::take(model.as_dyn(), optimizer, "lr_find", SnapshotPlace::Device)?;
        let mut transform = self.batch_transform.take();
        let swept = (|| {
            if let Some(d) = self.distributed.as_mut() {
                // Every replica starts from rank 0's weights, as in `fit`; each rank's own
                // come back with the snapshot.
                d.broadcast_parameters(model.as_dyn())?;
            }
            let transform = super::typed_batch_transform::<B>(transform.as_mut(), "lr_find")?;
            self.sweep(&*model, task, optimizer, train, transform, config)
        })();
        self.batch_transform = transform;
        let restored = saved.restore_owned(optimizer);
        let finder = swept?;
        restored?;
        let end = finder.lrs.last().copied().unwrap_or(config.min_lr);
        let how = if finder.stopped_early { ": the loss diverged" } else { "" };
        if self.is_main() {
            let ranks = match self.world_size() {
                1 => String::new(),
                n => format!(" on {n} ranks (losses averaged over them)"),
            };
            self.progress.line(&format!(
                "lr_find: {} steps from {:.1e} to {end:.1e}{ranks}{how}; model and optimizer restored",
                finder.lrs.len(),
                config.min_lr
            ));
        }
        Ok(finder)
    }

    /// The sweep itself; the caller restores what it changed.
    fn sweep<M, B, T>(
        &mut self,
        model: &M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        train: &mut dyn BatchSource<B>,
        mut transform: Option<&mut Box<dyn BatchTransform<B>>>,
        config: &LrFindConfig,
    ) -> Result<LrFinder>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let transform_seed = if transform.is_some() { self.batch_transform_seed()? } else { 0 };
        // Each rank mixes its own batch differently, as in `fit`.
        let rank = self.distributed.as_ref().map_or(0, |d| d.rank());
        let main = self.is_main();
        let mut runner = self.step_runner()?;
        let start = optimizer.lrs();
        let reference = start.iter().copied().fold(0.0f64, f64::max);
        let ratios: Vec<f64> =
            start.iter().map(|lr| if reference > 0.0 { lr / reference } else { 1.0 }).collect();
        let mut smoother = LossSmoother::new(config.beta, config.early_stop_threshold);
        let (mut lrs, mut losses, mut raw) = (Vec::new(), Vec::new(), Vec::new());
        let mut stopped_early = false;
        let batches = train.len();
        let mut epoch = 0u64;
        'epochs: while lrs.len() < config.num_training {
            let mut it = train.batches(epoch, 0);
            let mut index = 0usize;
            let mut window: Vec<Tensor> = Vec::new();
            let mut yielded = false;
            while let Some(batch) = it.next() {
                let mut batch = batch?.to_device(self.device);
                yielded = true;
                index = it.consumed().unwrap_or(index + 1);
                if let Some(t) = transform.as_deref_mut() {
                    let mut ctx =
                        BatchContext::new(transform_seed, rank, epoch, (index as u64).saturating_sub(1));
                    batch = t.apply(batch, &mut ctx)?;
                }
                if !runner.window_open() {
                    let lr = config.lr_at(lrs.len());
                    let group_lrs: Vec<f64> = ratios.iter().map(|r| r * lr).collect();
                    optimizer.set_lrs(&group_lrs)?;
                }
                let micro = runner.forward_backward(model, task, &batch)?;
                window.push(micro.loss);
                if !(micro.window_full || index == batches) {
                    continue;
                }
                if let Some(d) = self.distributed.as_mut() {
                    // The averaged gradients on every rank, so the guard and the step agree.
                    d.sync_gradients(model.as_dyn())?;
                }
                let step = runner
                    .optimizer_step(model.as_dyn(), optimizer)
                    .and_then(|_| runner.settle(model.as_dyn(), optimizer));
                let loss = match step {
                    Ok(_) => mean_loss(&window),
                    // Gradients that are not finite: the lr is past divergence.
                    Err(TrainError::NonFinite { .. }) => f64::NAN,
                    Err(e) => return Err(e),
                };
                window.clear();
                // The ranks' mean, so every rank's smoother stops at the same step.
                let loss = match self.distributed.as_deref() {
                    Some(d) => mean_over_ranks(d, loss, self.device)?,
                    None => loss,
                };
                lrs.push(config.lr_at(lrs.len()));
                raw.push(loss);
                let (smoothed, diverged) = smoother.push(loss);
                losses.push(smoothed);
                let every = (config.num_training / 10).max(1);
                if main && lrs.len() % every == 0 {
                    self.progress.line(&format!(
                        "lr_find: step {}/{}, lr {:.2e}, loss {loss:.4} (smoothed {smoothed:.4})",
                        lrs.len(),
                        config.num_training,
                        lrs[lrs.len() - 1]
                    ));
                }
                if diverged {
                    stopped_early = true;
                    break 'epochs;
                }
                if lrs.len() == config.num_training {
                    break 'epochs;
                }
            }
            drop(it);
            if runner.window_open() {
                // Batches left out entirely (every sample skipped) can leave a window open.
                if let Some(d) = self.distributed.as_mut() {
                    d.sync_gradients(model.as_dyn())?;
                }
                runner.optimizer_step(model.as_dyn(), optimizer)?;
            }
            if !yielded {
                return Err(TrainError::InvalidSetting {
                    setting: "lr_find".into(),
                    value: format!("epoch {epoch} of the training source"),
                    reason: "it yielded no batch".into(),
                });
            }
            epoch += 1;
        }
        Ok(LrFinder::new(config.clone(), lrs, losses, raw, stopped_early))
    }
}

/// The mean of a window's micro-batch losses (each already the batch's mean), read back once.
fn mean_loss(window: &[Tensor]) -> f64 {
    let sum: f64 = window.iter().map(|l| l.double_value(&[])).sum();
    sum / window.len().max(1) as f64
}

/// `loss` averaged over the ranks of `world` (every rank passes its own; a NaN stays NaN). The
/// tensor goes through `device`, where the backend reduces (NCCL reduces CUDA tensors only).
fn mean_over_ranks(world: &dyn Distributed, loss: f64, device: Device) -> Result<f64> {
    let t = Tensor::from_slice(&[loss]).to_device(device);
    world.all_reduce_sum(std::slice::from_ref(&t))?;
    Ok(t.double_value(&[0]) / world.world_size() as f64)
}
