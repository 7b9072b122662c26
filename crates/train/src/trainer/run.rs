//! One `fit`, step by step: [`Run::start`] (guards, seeding, resume, broadcast), then per epoch
//! [`Run::train_epoch`] (batch transform, step, hooks, signals), [`Run::finish_training`]
//! (the epoch's training metrics), [`Run::validate`] and [`Run::end_epoch`] (scheduler,
//! record, hooks, early stop), and [`Run::finish`].

use super::evaluate::{eval_loop, eval_step};
use super::signal::SignalGuard;
use super::step::StepRunner;
use super::{best_of, AsDynModule, FitSummary, Trainer};
use crate::batch::Batch;
use crate::batch_transform::{BatchContext, BatchTransform};
use crate::callback::{BatchEnd, Callback, CallbackStates, Context, Control, LoopPosition, Saved};
use crate::error::{Result, TrainError};
use crate::guard;
use crate::metrics::{Metric, MetricSet};
use crate::record::EpochRecord;
use crate::scheduler::Interval;
use crate::source::BatchSource;
use crate::task::{Monitor, Stage, StepOutput, Task};
use std::time::{Duration, Instant};
use tch::Tensor;
use torchlight_optim::Optimizer;
use torchlight_tensor::seed_everything;

/// Everything one `fit` holds: the Trainer's settings and callbacks, the model, task and
/// optimizer it was given, and the loop's own state.
pub(super) struct Run<'r, M: ?Sized, T: ?Sized> {
    pub(super) trainer: &'r mut Trainer,
    pub(super) model: &'r mut M,
    task: &'r T,
    pub(super) optimizer: &'r mut dyn Optimizer,
    pub(super) runner: StepRunner,
    /// The epoch's training metrics.
    pub(super) metrics: MetricSet,
    /// In a distributed run, while the hooks of a mid-epoch save run: the training metrics so
    /// far reduced over the ranks, which the checkpoint holds instead of rank 0's own.
    world_metrics: Option<MetricSet>,
    pub(super) position: LoopPosition,
    pub(super) history: Vec<EpochRecord>,
    pub(super) states: CallbackStates,
    control: Control,
    monitor: Monitor,
    signals: Option<SignalGuard>,
    started: Instant,
    /// Whether the per-rank batch has been printed (distributed runs print it once).
    batch_shown: bool,
    /// Training samples and seconds over this call's epochs.
    samples: u64,
    train_seconds: f64,
}

/// Metric values by name, as a pass computes them.
type Metrics = Vec<(String, f64)>;

/// What an epoch's training pass measured.
struct Trained {
    /// Samples of this rank.
    samples: u64,
    /// Time spent waiting for batches.
    stall: Duration,
    /// The epoch's training time (set by `finish_training`).
    seconds: f64,
}

impl<'r, M, T> Run<'r, M, T>
where
    M: AsDynModule + ?Sized,
    T: ?Sized,
{
    /// Checks the model's device, seeds, restores a resume's checkpoint and gives every rank
    /// rank 0's weights: everything before the first hook.
    pub(super) fn start<B>(
        trainer: &'r mut Trainer,
        model: &'r mut M,
        task: &'r T,
        optimizer: &'r mut dyn Optimizer,
        batches: usize,
    ) -> Result<Self>
    where
        B: Batch,
        T: Task<M, B>,
    {
        let started = Instant::now();
        guard::check_device(model.as_dyn(), trainer.device)?;
        if let Some(seed) = trainer.seed {
            seed_everything(seed);
        }
        let runner = trainer.step_runner()?;
        let position = LoopPosition {
            epoch: 0,
            epochs: trainer.epochs,
            batch: 0,
            batches: batches as u64,
            global_step: 0,
        };
        let mut run = Run {
            metrics: MetricSet::new(task.metrics(Stage::Train)),
            world_metrics: None,
            monitor: task.monitor(),
            batch_shown: trainer.distributed.is_none(),
            trainer,
            model,
            task,
            optimizer,
            runner,
            position,
            history: Vec::new(),
            states: CallbackStates::default(),
            control: Control::default(),
            signals: None,
            started,
            samples: 0,
            train_seconds: 0.0,
        };
        if let Some(path) = run.trainer.resume.clone() {
            run.restore(&path)?;
        }
        if let Some(d) = run.trainer.distributed.as_mut() {
            d.broadcast_parameters(run.model.as_dyn())?;
        }
        for c in &run.trainer.callbacks {
            run.states.refresh(c.as_ref());
        }
        Ok(run)
    }

    /// The whole loop: `on_train_start`, the epochs, `on_train_end`.
    pub(super) fn fit<B>(
        mut self,
        train: &mut dyn BatchSource<B>,
        mut val: Option<&mut dyn BatchSource<B>>,
        mut transform: Option<&mut Box<dyn BatchTransform<B>>>,
    ) -> Result<FitSummary>
    where
        B: Batch,
        T: Task<M, B>,
    {
        let transform_seed = match transform {
            None => 0,
            Some(_) => self.transform_seed()?,
        };
        self.signals = if self.trainer.graceful { Some(SignalGuard::install()?) } else { None };
        self.hook(|c, ctx| c.on_train_start(ctx))?;
        let mut stopped_early = None;
        while self.position.epoch < self.trainer.epochs {
            let epoch_started = Instant::now();
            let skipped_before = self.runner.skipped_steps();
            self.runner.set_position(self.position.epoch, self.position.global_step);
            self.hook(|c, ctx| c.on_train_epoch_start(ctx))?;
            let mut trained = self.train_epoch(train, transform.as_deref_mut(), transform_seed)?;
            let train_values = self.finish_training(&mut trained, epoch_started)?;
            let (val_values, ema_values) = match val.as_deref_mut() {
                None => (Vec::new(), Vec::new()),
                Some(source) => match self.validate(source) {
                    Ok(values) => values,
                    Err(e) => {
                        let _ = self.hook(|c, ctx| c.on_interrupt(ctx));
                        return Err(e);
                    }
                },
            };
            let record = self.end_epoch(
                &trained,
                train_values,
                (val_values, ema_values),
                epoch_started,
                skipped_before,
            )?;
            self.hook(|c, ctx| c.on_train_epoch_end(ctx, &record))?;
            if let Some(reason) = self.control.stop.take() {
                self.trainer.progress.line(&reason);
                stopped_early = Some(reason);
                break;
            }
        }
        self.finish(stopped_early)
    }

    /// The batch transform's base seed: the data seed, the Trainer's seed, or the process's.
    fn transform_seed(&self) -> Result<u64> {
        let t = &*self.trainer;
        t.data_seed.or(t.seed).or_else(torchlight_tensor::global_seed).ok_or_else(|| {
            TrainError::InvalidSetting {
                setting: "batch_transform".into(),
                value: "no seed".into(),
                reason:
                    "a batch transform draws from generators seeded per batch: set TrainerBuilder::seed or \
                     data_seed (or call seed_everything first)"
                        .into(),
            }
        })
    }

    /// One training pass over `train` from the loop's batch on (mid-epoch after a resume):
    /// per batch the transform, `on_train_batch_start`, forward and backward, the optimizer
    /// step when a window closes, `on_train_batch_end`, and the signal check; then the last
    /// open window and the deferred non-finite check.
    fn train_epoch<B>(
        &mut self,
        train: &mut dyn BatchSource<B>,
        mut transform: Option<&mut Box<dyn BatchTransform<B>>>,
        transform_seed: u64,
    ) -> Result<Trained>
    where
        B: Batch,
        T: Task<M, B>,
    {
        let (epoch, batches) = (self.position.epoch, self.position.batches);
        let rank = self.trainer.distributed.as_ref().map_or(0, |d| d.rank());
        let first = self.position.batch as usize;
        let mut samples = 0u64;
        let mut it = train.batches(epoch, first);
        let mut index = first;
        while let Some(batch) = it.next() {
            let mut batch = batch?.to_device(self.trainer.device);
            // The source's position, not the batches received: a batch it left out entirely
            // (every sample skipped) still counts, so a resume starts after this batch.
            index = it.consumed().unwrap_or(index + 1);
            if !self.batch_shown {
                self.batch_shown = true;
                self.trainer.show_batch(batch.len());
            }
            let mut metric_target = None;
            if let Some(t) = transform.as_deref_mut() {
                let at = (index as u64).saturating_sub(1);
                let mut ctx = BatchContext::new(transform_seed, rank, epoch, at);
                batch = t.apply(batch, &mut ctx)?;
                metric_target = ctx.take_metric_target();
                if let Some(target) = &metric_target {
                    if target.size().first().copied() != Some(batch.len() as i64) {
                        return Err(TrainError::Task {
                            task: "batch transform".into(),
                            reason: format!(
                                "BatchContext::set_metric_target got a target of shape {:?} for a batch of {}: its first dimension must be the batch's",
                                target.size(),
                                batch.len()
                            ),
                        });
                    }
                }
            }
            self.hook(|c, ctx| c.on_train_batch_start(ctx))?;
            let micro = match metric_target {
                None => self.runner.forward_backward(&*self.model, self.task, &batch)?,
                Some(target) => {
                    let task = WithMetricTarget { task: self.task, target };
                    self.runner.forward_backward(&*self.model, &task, &batch)?
                }
            };
            count_outputs(&mut self.metrics, &micro.ready)?;
            samples += micro.samples as u64;
            let stepped = micro.window_full || index as u64 == batches;
            if stepped {
                self.optimizer_step()?;
            }
            self.position.batch = index as u64;
            if stepped && self.trainer.settle_before_save(self.position.global_step) {
                let settled = self.runner.settle(self.model.as_dyn(), &mut *self.optimizer)?;
                count_outputs(&mut self.metrics, &settled)?;
            }
            let running_loss = self.running_loss(index)?;
            let end = BatchEnd { loss: micro.loss, samples: micro.samples, stepped, running_loss };
            if stepped && index < batches as usize && self.trainer.save_due(self.position.global_step) {
                self.world_metrics = self.reduced_metrics()?;
            }
            let ended = self.hook(|c, ctx| c.on_train_batch_end(ctx, &end));
            self.world_metrics = None;
            ended?;
            if !stepped {
                continue;
            }
            if let Some(signal) = self.trainer.agreed_signal(self.signals.as_ref())? {
                drop(it);
                // The checkpoint saved on interrupt counts the last window, of every rank.
                let settled = self.runner.settle(self.model.as_dyn(), &mut *self.optimizer)?;
                count_outputs(&mut self.metrics, &settled)?;
                self.world_metrics = self.reduced_metrics()?;
                return Err(self.interrupt(signal));
            }
        }
        let stall = it.stall();
        drop(it);
        // Batches left out entirely (every sample skipped) can leave a window open.
        if self.runner.window_open() {
            self.optimizer_step()?;
        }
        // A deferred non-finite check is read here at the latest: the epoch's metrics, skip
        // count and checkpoint see every step.
        let settled = self.runner.settle(self.model.as_dyn(), &mut *self.optimizer)?;
        count_outputs(&mut self.metrics, &settled)?;
        self.position.batch = batches;
        Ok(Trained { samples, stall, seconds: 0.0 })
    }

    /// In a distributed run, the epoch's training metrics so far reduced over the ranks (a
    /// collective: every rank calls it at the same step), leaving this rank's own untouched;
    /// `None` otherwise.
    fn reduced_metrics<B>(&self) -> Result<Option<MetricSet>>
    where
        B: Batch,
        T: Task<M, B>,
    {
        let Some(d) = self.trainer.distributed.as_deref() else { return Ok(None) };
        let mut world = MetricSet::new(self.task.metrics(Stage::Train));
        world.load_state(&self.metrics.state())?;
        world.reduce(d)?;
        Ok(Some(world))
    }

    /// The running training loss every `log_every` batches (read back then only), stopping the
    /// run when it is not finite.
    fn running_loss(&self, index: usize) -> Result<Option<f64>> {
        if !index.is_multiple_of(self.trainer.log_every) || self.metrics.samples() == 0 {
            return Ok(None);
        }
        let loss = self.metrics.running_loss();
        if !loss.is_finite() {
            return Err(TrainError::Training {
                epoch: self.position.epoch + 1,
                reason: format!("loss became {loss} at batch {index}"),
            });
        }
        Ok(Some(loss))
    }

    /// Closes an accumulation window: gradients averaged over the ranks, the
    /// `on_before_optimizer_step` hooks, the step, the per-step scheduler and the metrics of a
    /// window that held back its outputs.
    fn optimizer_step(&mut self) -> Result<()> {
        if let Some(d) = self.trainer.distributed.as_mut() {
            // Once per optimizer step, after the window's last backward: torch's `no_sync()`
            // on the earlier micro-batches. The hooks, the guard, the unscale and the clip then
            // see the same averaged gradients on every rank.
            d.sync_gradients(self.model.as_dyn())?;
        }
        self.hook(|c, ctx| c.on_before_optimizer_step(ctx))?;
        let done = self.runner.optimizer_step(self.model.as_dyn(), &mut *self.optimizer)?;
        count_outputs(&mut self.metrics, &done.ready)?;
        if let Some((s, Interval::Step)) = self.trainer.scheduler.as_mut() {
            s.step(&mut *self.optimizer)?;
        }
        self.position.global_step = self.runner.global_step();
        Ok(())
    }

    /// The epoch's training metrics, reduced over the ranks; a non-finite mean loss stops the
    /// run.
    fn finish_training(
        &mut self,
        trained: &mut Trained,
        epoch_started: Instant,
    ) -> Result<Vec<(String, f64)>> {
        if let Some(d) = self.trainer.distributed.as_deref() {
            self.metrics.reduce(d)?;
        }
        let values = self.metrics.compute();
        let loss = values.first().map_or(f64::NAN, |(_, v)| *v);
        if !loss.is_finite() && self.metrics.samples() > 0 {
            return Err(TrainError::Training {
                epoch: self.position.epoch + 1,
                reason: format!("mean training loss is {loss}"),
            });
        }
        // Every rank runs as many batches (the DistributedSampler pads its shards).
        trained.seconds = epoch_started.elapsed().as_secs_f64();
        self.samples += trained.samples * self.trainer.world_size() as u64;
        self.train_seconds += trained.seconds;
        Ok(values)
    }

    /// One validation pass through the evaluation loop, with the validation hooks; its
    /// metrics reduced over the ranks. Then, when a callback keeps averaged weights
    /// ([`Callback::validation_weights`]), a second pass with them in the model (no batch
    /// hooks), its metrics the record's `ema_val`; the raw weights are back after it.
    fn validate<B>(&mut self, source: &mut dyn BatchSource<B>) -> Result<(Metrics, Metrics)>
    where
        B: Batch,
        T: Task<M, B>,
    {
        self.hook(|c, ctx| c.on_validation_epoch_start(ctx))?;
        let values = self.validation_pass(source, true)?;
        let ema_values = match self.validation_weights()? {
            None => Vec::new(),
            Some(weights) => {
                let raw = crate::callback::swap_in(self.model.as_dyn(), &weights)?;
                let result = self.validation_pass(source, false);
                crate::callback::swap_back(&raw)?;
                result?
            }
        };
        let mut named: Vec<(String, f64)> = values.iter().map(|(k, v)| (format!("val_{k}"), *v)).collect();
        named.extend(ema_values.iter().map(|(k, v)| (format!("ema_val_{k}"), *v)));
        self.hook(|c, ctx| c.on_validation_epoch_end(ctx, &named))?;
        Ok((values, ema_values))
    }

    /// One pass of the evaluation loop over `source` with the model as it is, the batch hooks
    /// when `hooks`; the metrics reduced over the ranks.
    fn validation_pass<B>(
        &mut self,
        source: &mut dyn BatchSource<B>,
        hooks: bool,
    ) -> Result<Vec<(String, f64)>>
    where
        B: Batch,
        T: Task<M, B>,
    {
        let mut metrics = MetricSet::new(self.task.metrics(Stage::Validate));
        eval_loop(source, self.trainer.device, |batch| {
            eval_step(&*self.model, self.task, batch, Stage::Validate, &self.runner, &mut metrics)?;
            if hooks {
                self.hook(|c, ctx| c.on_validation_batch_end(ctx))?;
            }
            Ok(())
        })?;
        if let Some(d) = self.trainer.distributed.as_deref() {
            metrics.reduce(d)?;
        }
        Ok(metrics.compute())
    }

    /// The averaged weights a callback asks to validate, if any (at most one callback may).
    fn validation_weights(&self) -> Result<Option<Vec<(String, Tensor)>>> {
        let mut found: Option<(String, Vec<(String, Tensor)>)> = None;
        for c in &self.trainer.callbacks {
            if let Some(w) = c.validation_weights() {
                if let Some((first, _)) = &found {
                    return Err(TrainError::InvalidSetting {
                        setting: "callbacks".into(),
                        value: format!("{first} and {}", c.name()),
                        reason: "both keep weights to validate (ema_val_*); keep one".into(),
                    });
                }
                found = Some((c.name(), w));
            }
        }
        Ok(found.map(|(_, w)| w))
    }

    /// After validation: the per-epoch scheduler step, the skip count, the epoch's record in
    /// the history, and the position moved to the next epoch.
    fn end_epoch(
        &mut self,
        trained: &Trained,
        train: Vec<(String, f64)>,
        (val, ema_val): (Metrics, Metrics),
        epoch_started: Instant,
        skipped_before: u64,
    ) -> Result<EpochRecord> {
        let lr = self.optimizer.lrs().last().copied().unwrap_or(0.0);
        if let Some((s, Interval::Epoch)) = self.trainer.scheduler.as_mut() {
            s.step(&mut *self.optimizer)?;
        }
        let epoch = self.position.epoch;
        if let Some(p) = self.trainer.plateau.as_mut() {
            let probe = EpochRecord {
                epoch: epoch as usize + 1,
                lr,
                train: train.clone(),
                val: val.clone(),
                ..Default::default()
            };
            let value = probe.get(&p.monitor).ok_or_else(|| TrainError::InvalidSetting {
                setting: "plateau_scheduler".into(),
                value: p.monitor.clone(),
                reason: format!(
                    "epoch {} logged no such metric (it has {}{}): ReduceLROnPlateau needs its value every epoch",
                    epoch + 1,
                    train.iter().map(|(k, _)| format!("train_{k}")).collect::<Vec<_>>().join(", "),
                    val.iter().map(|(k, _)| format!(", val_{k}")).collect::<String>(),
                ),
            })?;
            p.scheduler.step(value, &mut *self.optimizer)?;
        }
        let skipped = self.runner.skipped_steps() - skipped_before;
        if skipped > 0 {
            self.trainer.progress.line(&format!(
                "epoch {}: skipped {skipped} optimizer steps with non-finite gradients (train.on_nonfinite = \"skip\")",
                epoch + 1
            ));
        }
        let train_time = trained.seconds;
        let world = self.trainer.world_size() as f64;
        let record = EpochRecord {
            epoch: epoch as usize + 1,
            lr,
            train,
            val,
            ema_val,
            seconds: epoch_started.elapsed().as_secs_f64(),
            samples_per_s: trained.samples as f64 * world / train_time.max(1e-9),
            data_stall_pct: 100.0 * trained.stall.as_secs_f64() / train_time.max(1e-9),
        };
        self.position.epoch += 1;
        self.position.batch = 0;
        self.metrics.reset();
        self.history.push(record.clone());
        Ok(record)
    }

    /// `on_train_end`, the barrier of a distributed run, and the summary.
    fn finish(mut self, stopped_early: Option<String>) -> Result<FitSummary> {
        self.hook(|c, ctx| c.on_train_end(ctx))?;
        if let Some(d) = self.trainer.distributed.as_deref() {
            // Rank 0's last writes are done before any rank goes on (to its best checkpoint).
            d.barrier()?;
        }
        self.signals = None;
        Ok(FitSummary {
            epochs: self.position.epoch,
            global_step: self.position.global_step,
            best: best_of(&self.history, &self.monitor),
            history: self.history,
            stopped_early,
            seconds: self.started.elapsed().as_secs_f64(),
            samples_per_s: self.samples as f64 / self.train_seconds.max(1e-9),
            world_size: self.trainer.world_size(),
        })
    }

    /// The `on_interrupt` hooks (where a checkpoint callback saves `last`), then the error
    /// that reports where the run stopped and what was saved.
    fn interrupt(&mut self, signal: &str) -> TrainError {
        if let Err(e) = self.hook(|c, ctx| c.on_interrupt(ctx)) {
            return e;
        }
        TrainError::Interrupted {
            signal: signal.to_string(),
            epoch: self.position.epoch + 1,
            step: self.position.global_step,
            checkpoint: self.control.checkpoint.clone(),
        }
    }

    /// Runs `f` on every callback in order, each with a fresh [`Context`]; after each, its
    /// state is taken, so that a checkpoint taken by a later callback holds it.
    pub(super) fn hook(
        &mut self,
        mut f: impl FnMut(&mut dyn Callback, &mut Context<'_>) -> Result<()>,
    ) -> Result<()> {
        let trainer = &mut *self.trainer;
        for callback in trainer.callbacks.iter_mut() {
            {
                let mut ctx = Context {
                    model: self.model.as_dyn_mut(),
                    optimizer: &mut *self.optimizer,
                    scheduler: trainer.scheduler.as_ref().map(|(s, _)| s.as_ref()),
                    scaler: self.runner.scaler(),
                    position: self.position,
                    device: trainer.device,
                    history: &self.history,
                    monitor: &self.monitor,
                    progress: &trainer.progress,
                    control: &mut self.control,
                    saved: Saved {
                        plateau: trainer.plateau.as_ref().map(|p| &p.scheduler),
                        callbacks: &self.states,
                        train_metrics: self.world_metrics.as_ref().unwrap_or(&self.metrics),
                        data_seed: trainer.data_seed,
                        config: &trainer.config,
                    },
                };
                f(callback.as_mut(), &mut ctx)?;
            }
            self.states.refresh(callback.as_ref());
        }
        Ok(())
    }
}

/// Counts the outputs of finished steps (a window's, or those a deferred non-finite check held
/// back until it was read) in `metrics`.
fn count_outputs(metrics: &mut MetricSet, outputs: &[StepOutput]) -> Result<()> {
    for out in outputs {
        metrics.update(&out.loss, &out.output, &out.target)?;
    }
    Ok(())
}

impl Trainer {
    /// Whether a deferred non-finite check must be read before the batch-end hooks of the step
    /// that reached `global_step`: when the run folder's mid-epoch checkpoint is due, so that
    /// it holds the metrics of the step's window (`on_nonfinite = Skip`) and no fresh state of
    /// a skipped step, and a bad step stops the run before it is saved (`Stop`). The save
    /// reads the state back anyway, so the read costs no extra sync.
    fn settle_before_save(&self, global_step: u64) -> bool {
        self.save_due(global_step)
    }

    /// Whether the run folder's mid-epoch checkpoint is due after the step that reached
    /// `global_step` (the same answer on every rank).
    fn save_due(&self, global_step: u64) -> bool {
        self.checkpoint_every.is_some_and(|n| global_step.is_multiple_of(n))
    }

    /// The per-rank and global batch, printed once by rank 0 of a distributed run.
    fn show_batch(&self, per_rank: usize) {
        let world = self.world_size();
        let accumulation = self.step.accumulation;
        let per_step = if accumulation > 1 {
            format!(", {} per optimizer step ({accumulation} accumulated)", per_rank * world * accumulation)
        } else {
            String::new()
        };
        self.progress.line(&format!(
            "distributed: {world} ranks; batch {per_rank} per rank, {} global{per_step}",
            per_rank * world
        ));
    }

    /// The signal to stop on after this optimizer step: this process's, or in a distributed
    /// run any rank's (one small all-reduce), so that every rank stops at the same step.
    fn agreed_signal(&self, signals: Option<&SignalGuard>) -> Result<Option<&'static str>> {
        let local = signals.and_then(|s| s.received());
        let Some(d) = self.distributed.as_deref() else { return Ok(local) };
        if signals.is_none() {
            return Ok(None);
        }
        let flag = Tensor::from_slice(&[f32::from(u8::from(local.is_some()))]);
        // On the training device: the CPU for Gloo, the GPU for NCCL.
        let flag = flag.to_device(self.device);
        d.all_reduce_sum(&[flag.shallow_clone()])?;
        if flag.double_value(&[0]) > 0.0 {
            return Ok(Some(local.unwrap_or("a signal to another rank")));
        }
        Ok(None)
    }
}

/// A task whose training step's metrics read the target a batch transform handed on
/// ([`BatchContext::set_metric_target`], Mixup's labels before mixing) instead of the task's.
struct WithMetricTarget<'a, T: ?Sized> {
    task: &'a T,
    target: Tensor,
}

impl<M: ?Sized, B, T: Task<M, B> + ?Sized> Task<M, B> for WithMetricTarget<'_, T> {
    fn step(&self, model: &M, batch: &B, stage: Stage) -> Result<StepOutput> {
        // (The out-of-memory probe, a zero batch of another size, reads only the loss.)
        let mut out = self.task.step(model, batch, stage)?;
        out.target = self.target.shallow_clone();
        Ok(out)
    }

    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        self.task.metrics(stage)
    }

    fn monitor(&self) -> Monitor {
        self.task.monitor()
    }
}
