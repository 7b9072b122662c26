//! The `Trainer`: the training loop as a library, for any model, data and task.
//!
//! It owns what every careful loop needs (device placement, AMP with a GradScaler,
//! accumulation, clipping, the NaN/device/out-of-memory guards, validation, lr scheduling,
//! graceful stop on SIGINT/SIGTERM, exact mid-epoch resume) and leaves the rest to parts that
//! plug in: a [`Task`] says what a step computes, [`Callback`]s log, checkpoint, stop early or
//! unfreeze, and any [`BatchSource`] (a DataLoader) supplies batches. With a [`Distributed`]
//! world it trains data-parallel: one `fit` per rank, rank 0 alone writing.

mod batch;
mod callback;
pub(crate) mod distributed;
mod signal;
mod source;
mod step;
mod task;

pub use batch::Batch;
pub use callback::{BatchEnd, Callback, Context, LoopPosition};
pub use distributed::Distributed;
pub use source::{BatchSource, EpochBatches};
pub use step::{GuardRead, MicroStep, OptimizerStep, StepConfig, StepRunner};
pub use task::{Monitor, Stage, StepOutput, Task};

use crate::callbacks::{CsvLogging, CurvesPlot, ModelCheckpoint, ProgressBar, TensorBoardLogging};
use crate::config::NonFiniteAction;
use crate::csv_log::EpochRecord;
use crate::error::{Result, TrainError};
use crate::guard;
use crate::metrics::MetricSet;
use crate::progress::Progress;
use callback::{Control, SavedState};
use serde_json::json;
use signal::SignalGuard;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::{Device, Kind, Tensor};
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::Module;
use torchlight_optim::{GradScaler, LrScheduler, Optimizer};
use torchlight_tensor::{no_grad, seed_everything};

/// A model the Trainer can take: any [`Module`], or a `dyn Module`.
pub trait AsDynModule {
    /// `self` as a `&dyn Module`.
    fn as_dyn(&self) -> &dyn Module;
}

impl<T: Module> AsDynModule for T {
    fn as_dyn(&self) -> &dyn Module {
        self
    }
}

impl AsDynModule for dyn Module {
    fn as_dyn(&self) -> &dyn Module {
        self
    }
}

/// When an lr scheduler steps (Lightning's `interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// After every epoch (after validation), like `StepLR` or `CosineAnnealingLR` per epoch.
    Epoch,
    /// After every optimizer step, like `OneCycleLR`.
    Step,
}

/// Builds a [`Trainer`]; every setting has a default.
pub struct TrainerBuilder {
    device: Device,
    epochs: u64,
    step: StepConfig,
    log_every: usize,
    seed: Option<u64>,
    data_seed: Option<u64>,
    callbacks: Vec<Box<dyn Callback>>,
    run_dir: Option<PathBuf>,
    keep_epochs: usize,
    checkpoint_every: Option<u64>,
    progress: Progress,
    graceful: bool,
    scheduler: Option<(Box<dyn LrScheduler>, Interval)>,
    resume: Option<PathBuf>,
    restore_scheduler: bool,
    config: serde_json::Value,
    distributed: Option<Box<dyn Distributed>>,
}

impl Default for TrainerBuilder {
    fn default() -> Self {
        TrainerBuilder {
            device: Device::Cpu,
            epochs: 1,
            step: StepConfig::default(),
            log_every: 50,
            seed: None,
            data_seed: None,
            callbacks: Vec::new(),
            run_dir: None,
            keep_epochs: 0,
            checkpoint_every: None,
            progress: Progress::auto(),
            graceful: true,
            scheduler: None,
            resume: None,
            restore_scheduler: true,
            config: serde_json::Value::Null,
            distributed: None,
        }
    }
}

impl TrainerBuilder {
    /// The device batches go to (the model must already be there); default CPU.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Epochs to train (an epoch count, not a number to add on resume); default 1.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.epochs = epochs;
        self
    }

    /// Mixed precision (see [`StepConfig::amp`]); default off.
    pub fn amp(mut self, amp: bool) -> Self {
        self.step.amp = amp;
        self
    }

    /// The autocast dtype instead of float16 on CUDA / bfloat16 on the CPU.
    pub fn amp_dtype(mut self, kind: Kind) -> Self {
        self.step.amp_dtype = Some(kind);
        self
    }

    /// Micro-batches per optimizer step; default 1.
    pub fn accumulation(mut self, steps: usize) -> Self {
        self.step.accumulation = steps;
        self
    }

    /// Clip the gradients' total L2 norm to `max_norm` before each step.
    pub fn grad_clip(mut self, max_norm: f64) -> Self {
        self.step.grad_clip = Some(max_norm);
        self
    }

    /// What a step with NaN/Inf gradients does; default stop with an error.
    pub fn on_nonfinite(mut self, action: NonFiniteAction) -> Self {
        self.step.on_nonfinite = action;
        self
    }

    /// The whole step configuration at once.
    pub fn step_config(mut self, step: StepConfig) -> Self {
        self.step = step;
        self
    }

    /// Read the running loss back (for the progress bar and the finite check) every `n`
    /// batches; default 50.
    pub fn log_every(mut self, n: usize) -> Self {
        self.log_every = n.max(1);
        self
    }

    /// Calls `seed_everything(seed)` when `fit` starts (a resume then restores the saved
    /// generator states over it).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The loaders' seed, recorded in checkpoints.
    pub fn data_seed(mut self, seed: u64) -> Self {
        self.data_seed = Some(seed);
        self
    }

    /// Adds a callback; callbacks run in the order added, before the run folder's.
    pub fn callback(mut self, callback: impl Callback + 'static) -> Self {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// A run folder: adds `metrics.csv` ([`CsvLogging`]), TensorBoard events
    /// ([`TensorBoardLogging`]), `curves.png` ([`CurvesPlot`]) and `checkpoints/` with `last`
    /// and `best` ([`ModelCheckpoint`], by the task's monitor), after the callbacks added.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = Some(dir.into());
        self
    }

    /// With a run folder, also keep the last `n` epochs' checkpoints as `epoch_NNNN`.
    pub fn keep_epochs(mut self, n: usize) -> Self {
        self.keep_epochs = n;
        self
    }

    /// With a run folder, also save `last` every `n` optimizer steps (mid-epoch).
    pub fn checkpoint_every_n_steps(mut self, n: u64) -> Self {
        self.checkpoint_every = Some(n.max(1));
        self
    }

    /// Where progress goes; default bars on a terminal, lines elsewhere.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// Stop gracefully on SIGINT/SIGTERM (finish the step, checkpoint, return
    /// [`TrainError::Interrupted`]); default on.
    pub fn graceful_shutdown(mut self, on: bool) -> Self {
        self.graceful = on;
        self
    }

    /// An lr scheduler built on the optimizer `fit` will get, stepped per `interval`.
    pub fn lr_scheduler(mut self, scheduler: Box<dyn LrScheduler>, interval: Interval) -> Self {
        self.scheduler = Some((scheduler, interval));
        self
    }

    /// Resume from this checkpoint folder (e.g. `runs/exp_001/checkpoints/last`): weights,
    /// optimizer, scheduler, GradScaler, generator states, the position (mid-epoch too),
    /// partial metrics and the callbacks' states.
    pub fn resume_from(mut self, checkpoint: impl Into<PathBuf>) -> Self {
        self.resume = Some(checkpoint.into());
        self
    }

    /// Whether a resume restores the lr scheduler's state (default true); false starts the
    /// scheduler given to [`lr_scheduler`](Self::lr_scheduler) afresh (a warm restart).
    pub fn restore_scheduler(mut self, restore: bool) -> Self {
        self.restore_scheduler = restore;
        self
    }

    /// The run's configuration, written into every checkpoint's `meta.json` (`config`).
    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.config = config;
        self
    }

    /// Trains data-parallel in `world` (see [`Distributed`] for what is called when): every
    /// rank runs `fit` with the same model, task and settings and its own shard of the data (a
    /// `DistributedSampler` in its DataLoader). Metrics are reduced over the ranks before they
    /// are read, so every rank takes the same early-stopping and best decisions; only rank 0
    /// keeps the run folder (logs, curves, checkpoints) and prints progress. To resume, every
    /// rank passes rank 0's checkpoint folder to [`resume_from`](Self::resume_from).
    pub fn distributed(mut self, world: Box<dyn Distributed>) -> Self {
        self.distributed = Some(world);
        self
    }

    /// Checks the settings and makes the Trainer.
    pub fn build(self) -> Result<Trainer> {
        if self.epochs == 0 {
            return Err(TrainError::InvalidConfig {
                field: "train.epochs".into(),
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        let mut callbacks = self.callbacks;
        let main = self.distributed.as_ref().is_none_or(|d| d.is_main());
        if let Some(dir) = self.run_dir.as_ref().filter(|_| main) {
            callbacks.push(Box::new(CsvLogging::new(dir.join("metrics.csv"))));
            callbacks.push(Box::new(TensorBoardLogging::new(dir)));
            callbacks.push(Box::new(CurvesPlot::new(dir.join("curves.png"))));
            let mut checkpoint = ModelCheckpoint::new(dir.join("checkpoints")).keep_epochs(self.keep_epochs);
            if let Some(n) = self.checkpoint_every {
                checkpoint = checkpoint.every_n_steps(n);
            }
            callbacks.push(Box::new(checkpoint));
        }
        callbacks.push(Box::new(ProgressBar::new()));
        let mut names = std::collections::HashSet::new();
        for c in &callbacks {
            if !names.insert(c.name()) {
                return Err(TrainError::InvalidConfig {
                    field: "callbacks".into(),
                    value: c.name(),
                    reason: "two callbacks have this name; their saved states would collide".into(),
                });
            }
        }
        // Checked here so that a bad setting fails before any work.
        StepRunner::new(self.step.clone(), self.device)?;
        Ok(Trainer {
            device: self.device,
            epochs: self.epochs,
            step: self.step,
            log_every: self.log_every,
            seed: self.seed,
            data_seed: self.data_seed,
            callbacks,
            progress: if main { self.progress } else { Progress::quiet() },
            graceful: self.graceful,
            scheduler: self.scheduler,
            resume: self.resume,
            restore_scheduler: self.restore_scheduler,
            config: self.config,
            distributed: self.distributed,
            checkpoint_every: self.checkpoint_every,
        })
    }
}

/// What a `fit` did.
#[derive(Debug, Clone)]
pub struct FitSummary {
    /// Epochs completed (including those before a resume).
    pub epochs: u64,
    /// Optimizer steps taken in the whole run.
    pub global_step: u64,
    /// Every completed epoch's record.
    pub history: Vec<EpochRecord>,
    /// The best value of the task's monitor over the history, with its (1-based) epoch.
    pub best: Option<(f64, u64)>,
    /// Why the run stopped before its last epoch (early stopping), if it did.
    pub stopped_early: Option<String>,
    /// Wall time of this `fit` call.
    pub seconds: f64,
    /// Training samples per second over this call's epochs (of all ranks together).
    pub samples_per_s: f64,
    /// The ranks that trained (1 without [`TrainerBuilder::distributed`]).
    pub world_size: usize,
}

/// The training loop. Build one with [`Trainer::builder`], then call [`Trainer::fit`].
///
/// ```no_run
/// use torchlight_train::{Classification, Trainer};
/// # fn demo(model: &torchlight_nn::ResNet,
/// #         train: &mut torchlight_data::DataLoader<torchlight_data::Subset<torchlight_vision::ImageFolder>>,
/// #         val: &mut torchlight_data::DataLoader<torchlight_data::Subset<torchlight_vision::ImageFolder>>,
/// #         optimizer: &mut dyn torchlight_optim::Optimizer) -> torchlight_train::Result<()> {
/// let mut trainer = Trainer::builder().epochs(10).amp(true).run_dir("runs/exp_001").build()?;
/// let summary = trainer.fit(model, &Classification::new(3), optimizer, train, Some(val))?;
/// println!("best val_acc {:?}", summary.best);
/// # Ok(()) }
/// ```
pub struct Trainer {
    device: Device,
    epochs: u64,
    step: StepConfig,
    log_every: usize,
    seed: Option<u64>,
    data_seed: Option<u64>,
    callbacks: Vec<Box<dyn Callback>>,
    progress: Progress,
    graceful: bool,
    scheduler: Option<(Box<dyn LrScheduler>, Interval)>,
    resume: Option<PathBuf>,
    restore_scheduler: bool,
    config: serde_json::Value,
    distributed: Option<Box<dyn Distributed>>,
    /// The run folder's mid-epoch checkpoint interval, in optimizer steps.
    checkpoint_every: Option<u64>,
}

/// Everything the loop holds besides the model, task, optimizer and data, so that hooks can
/// borrow parts of it while the loop holds the rest.
struct LoopState<'m> {
    module: &'m dyn Module,
    position: LoopPosition,
    history: Vec<EpochRecord>,
    callback_states: BTreeMap<String, serde_json::Value>,
    control: Control,
    saved: SavedState,
    monitor: Monitor,
}

impl Trainer {
    /// A builder with the defaults.
    pub fn builder() -> TrainerBuilder {
        TrainerBuilder::default()
    }

    /// The device batches go to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The step configuration.
    pub fn step_config(&self) -> &StepConfig {
        &self.step
    }

    /// The data-parallel world, when the run is distributed.
    pub fn distributed(&self) -> Option<&dyn Distributed> {
        self.distributed.as_deref()
    }

    /// The ranks training together (1 when not distributed).
    pub fn world_size(&self) -> usize {
        self.distributed.as_ref().map_or(1, |d| d.world_size())
    }

    /// Whether this process writes the run folder and prints progress: rank 0, or the only
    /// process.
    pub fn is_main(&self) -> bool {
        self.distributed.as_ref().is_none_or(|d| d.is_main())
    }

    /// Trains `model` on `train` for the configured epochs, validating on `val` after each,
    /// with `task` computing each step and `optimizer` updating the parameters.
    ///
    /// Errors stop the loop; those that leave it in a consistent state (an interrupt after a
    /// step, a data error while validating) first give the callbacks `on_interrupt`, where
    /// [`ModelCheckpoint`] saves `last` so the run resumes from exactly there.
    pub fn fit<M, B, T>(
        &mut self,
        model: &M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        train: &mut dyn BatchSource<B>,
        mut val: Option<&mut dyn BatchSource<B>>,
    ) -> Result<FitSummary>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let started = Instant::now();
        let module = model.as_dyn();
        guard::check_device(module, self.device)?;
        if let Some(seed) = self.seed {
            seed_everything(seed);
        }
        let mut runner = StepRunner::new(self.step.clone(), self.device)?;
        let mut train_metrics = MetricSet::new(task.metrics(Stage::Train));
        let batches = train.len() as u64;
        let mut state = LoopState {
            module,
            position: LoopPosition { epoch: 0, epochs: self.epochs, batch: 0, batches, global_step: 0 },
            history: Vec::new(),
            callback_states: BTreeMap::new(),
            control: Control::default(),
            saved: SavedState {
                data_seed: self.data_seed,
                config: self.config.clone(),
                ..Default::default()
            },
            monitor: task.monitor(),
        };
        if let Some(path) = self.resume.clone() {
            self.restore(&path, &mut state, optimizer, &mut runner, &mut train_metrics)?;
        }
        if let Some(d) = self.distributed.as_mut() {
            d.broadcast_parameters(module)?;
        }
        let world = self.world_size() as u64;
        let mut batch_shown = self.distributed.is_none();
        for c in &self.callbacks {
            state.callback_states.insert(c.name(), c.state_dict());
        }
        let signals = if self.graceful { Some(SignalGuard::install()?) } else { None };
        self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| c.on_train_start(ctx))?;

        let (mut samples, mut train_seconds) = (0u64, 0.0f64);
        let mut stopped_early = None;
        while state.position.epoch < self.epochs {
            let epoch = state.position.epoch;
            let epoch_started = Instant::now();
            runner.set_position(epoch, state.position.global_step);
            let skipped_before = runner.skipped_steps();
            self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| c.on_train_epoch_start(ctx))?;

            // Training.
            let first = state.position.batch as usize;
            let mut epoch_samples = 0u64;
            let stall = {
                let mut it = train.batches(epoch, first);
                let mut index = first;
                while let Some(batch) = it.next() {
                    let batch = batch?.to_device(self.device);
                    if !batch_shown {
                        batch_shown = true;
                        self.show_batch(batch.len());
                    }
                    let micro = runner.forward_backward(model, task, &batch)?;
                    count_outputs(&mut train_metrics, &micro.ready)?;
                    index += 1;
                    epoch_samples += micro.samples as u64;
                    let stepped = micro.window_full || index as u64 == batches;
                    if stepped {
                        self.optimizer_step(&mut state, optimizer, &mut runner, &mut train_metrics)?;
                    }
                    state.position.batch = index as u64;
                    if stepped && self.settle_before_save(state.position.global_step) {
                        count_outputs(&mut train_metrics, &runner.settle(module)?)?;
                    }
                    let running_loss = if index % self.log_every == 0 && train_metrics.samples() > 0 {
                        let loss = train_metrics.running_loss();
                        if !loss.is_finite() {
                            return Err(TrainError::Training {
                                epoch: epoch + 1,
                                reason: format!("loss became {loss} at batch {index}"),
                            });
                        }
                        Some(loss)
                    } else {
                        None
                    };
                    let end = BatchEnd { loss: micro.loss, samples: micro.samples, stepped, running_loss };
                    self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| {
                        c.on_train_batch_end(ctx, &end)
                    })?;
                    if !stepped {
                        continue;
                    }
                    if let Some(signal) = self.agreed_signal(signals.as_ref())? {
                        drop(it);
                        // The checkpoint saved on interrupt counts the last window.
                        count_outputs(&mut train_metrics, &runner.settle(module)?)?;
                        return Err(self.interrupt(&mut state, optimizer, &runner, &train_metrics, signal));
                    }
                }
                it.stall()
            };
            // Batches left out entirely (every sample skipped) can leave a window open.
            if runner.window_open() {
                self.optimizer_step(&mut state, optimizer, &mut runner, &mut train_metrics)?;
            }
            // A deferred non-finite check is read here at the latest: the epoch's metrics,
            // skip count and checkpoint see every step.
            count_outputs(&mut train_metrics, &runner.settle(module)?)?;
            state.position.batch = batches;
            if let Some(d) = self.distributed.as_deref() {
                train_metrics.reduce(d)?;
            }
            // Every rank runs as many batches (the DistributedSampler pads its shards).
            let epoch_samples = epoch_samples * world;
            let train_values = train_metrics.compute();
            let train_loss = train_values.first().map_or(f64::NAN, |(_, v)| *v);
            if !train_loss.is_finite() && train_metrics.samples() > 0 {
                return Err(TrainError::Training {
                    epoch: epoch + 1,
                    reason: format!("mean training loss is {train_loss}"),
                });
            }
            let train_time = epoch_started.elapsed().as_secs_f64();
            samples += epoch_samples;
            train_seconds += train_time;

            // Validation.
            let val_values = match val.as_deref_mut() {
                Some(source) => {
                    match self.validate_epoch(
                        &mut state,
                        model,
                        task,
                        source,
                        optimizer,
                        &runner,
                        &train_metrics,
                    ) {
                        Ok(values) => values,
                        Err(e) => {
                            let _ = self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| {
                                c.on_interrupt(ctx)
                            });
                            return Err(e);
                        }
                    }
                }
                None => Vec::new(),
            };
            let lr = optimizer.lrs().last().copied().unwrap_or(0.0);
            if let Some((s, Interval::Epoch)) = self.scheduler.as_mut() {
                s.step(optimizer)?;
            }
            let skipped = runner.skipped_steps() - skipped_before;
            if skipped > 0 {
                self.progress.line(&format!(
                    "epoch {}: skipped {skipped} optimizer steps with non-finite gradients (train.on_nonfinite = \"skip\")",
                    epoch + 1
                ));
            }
            let record = EpochRecord {
                epoch: epoch as usize + 1,
                lr,
                train: train_values,
                val: val_values,
                seconds: epoch_started.elapsed().as_secs_f64(),
                images_per_s: epoch_samples as f64 / train_time.max(1e-9),
                data_stall_pct: 100.0 * stall.as_secs_f64() / train_time.max(1e-9),
            };
            state.position.epoch += 1;
            state.position.batch = 0;
            train_metrics.reset();
            state.history.push(record.clone());
            self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| {
                c.on_train_epoch_end(ctx, &record)
            })?;
            if let Some(reason) = state.control.stop.take() {
                self.progress.line(&reason);
                stopped_early = Some(reason);
                break;
            }
        }
        self.hook(&mut state, optimizer, &runner, &train_metrics, |c, ctx| c.on_train_end(ctx))?;
        if let Some(d) = self.distributed.as_deref() {
            // Rank 0's last writes are done before any rank goes on (to its best checkpoint).
            d.barrier()?;
        }
        drop(signals);
        let best = best_of(&state.history, &state.monitor);
        Ok(FitSummary {
            epochs: state.position.epoch,
            global_step: state.position.global_step,
            history: state.history,
            best,
            stopped_early,
            seconds: started.elapsed().as_secs_f64(),
            samples_per_s: samples as f64 / train_seconds.max(1e-9),
            world_size: world as usize,
        })
    }

    /// Whether a deferred non-finite check must be read before the batch-end hooks of the step
    /// that reached `global_step`: with `on_nonfinite = Skip`, when the run folder's
    /// mid-epoch checkpoint is due, so that it holds the metrics of the step's window.
    fn settle_before_save(&self, global_step: u64) -> bool {
        self.step.on_nonfinite == NonFiniteAction::Skip
            && self.checkpoint_every.is_some_and(|n| global_step.is_multiple_of(n))
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

    /// Closes an accumulation window: the `on_before_optimizer_step` hooks, the step, the
    /// per-step scheduler and the metrics of a window that held back its outputs.
    fn optimizer_step(
        &mut self,
        state: &mut LoopState<'_>,
        optimizer: &mut dyn Optimizer,
        runner: &mut StepRunner,
        metrics: &mut MetricSet,
    ) -> Result<()> {
        if let Some(d) = self.distributed.as_mut() {
            // Once per optimizer step, after the window's last backward: torch's `no_sync()`
            // on the earlier micro-batches. The hooks, the guard, the unscale and the clip then
            // see the same averaged gradients on every rank.
            d.sync_gradients(state.module)?;
        }
        self.hook(state, optimizer, runner, metrics, |c, ctx| c.on_before_optimizer_step(ctx))?;
        let done = runner.optimizer_step(state.module, optimizer)?;
        count_outputs(metrics, &done.ready)?;
        if let Some((s, Interval::Step)) = self.scheduler.as_mut() {
            s.step(optimizer)?;
        }
        state.position.global_step = runner.global_step();
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn validate_epoch<M, B, T>(
        &mut self,
        state: &mut LoopState<'_>,
        model: &M,
        task: &T,
        source: &mut dyn BatchSource<B>,
        optimizer: &mut dyn Optimizer,
        runner: &StepRunner,
        train_metrics: &MetricSet,
    ) -> Result<Vec<(String, f64)>>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        self.hook(state, optimizer, runner, train_metrics, |c, ctx| c.on_validation_epoch_start(ctx))?;
        let mut metrics = MetricSet::new(task.metrics(Stage::Validate));
        {
            let _grad = no_grad();
            let mut it = source.batches(0, 0);
            while let Some(batch) = it.next() {
                let batch = batch?.to_device(self.device);
                let out = {
                    let _amp = runner.autocast()?;
                    task.step(model, &batch, Stage::Validate)?
                };
                metrics.update(&out.loss, &out.output, &out.target)?;
                self.hook(state, optimizer, runner, train_metrics, |c, ctx| c.on_validation_batch_end(ctx))?;
            }
        }
        if let Some(d) = self.distributed.as_deref() {
            metrics.reduce(d)?;
        }
        let values = metrics.compute();
        let named: Vec<(String, f64)> = values.iter().map(|(k, v)| (format!("val_{k}"), *v)).collect();
        self.hook(state, optimizer, runner, train_metrics, |c, ctx| c.on_validation_epoch_end(ctx, &named))?;
        Ok(values)
    }

    /// Evaluates `model` on every batch of `source` in evaluation mode (no-grad, the Trainer's
    /// autocast) and returns the metrics of `stage`, e.g. for the test split. In a distributed
    /// run every rank evaluates its shard and gets the metrics of all of them.
    pub fn evaluate<M, B, T>(
        &self,
        model: &M,
        task: &T,
        source: &mut dyn BatchSource<B>,
        stage: Stage,
    ) -> Result<MetricSet>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let mut metrics = evaluate(model, task, source, self.device, &self.step, stage, &self.progress)?;
        if let Some(d) = self.distributed.as_deref() {
            metrics.reduce(d)?;
        }
        Ok(metrics)
    }

    fn interrupt(
        &mut self,
        state: &mut LoopState<'_>,
        optimizer: &mut dyn Optimizer,
        runner: &StepRunner,
        metrics: &MetricSet,
        signal: &str,
    ) -> TrainError {
        let saved = self.hook(state, optimizer, runner, metrics, |c, ctx| c.on_interrupt(ctx));
        if let Err(e) = saved {
            return e;
        }
        TrainError::Interrupted {
            signal: signal.to_string(),
            epoch: state.position.epoch + 1,
            step: state.position.global_step,
            checkpoint: state.control.checkpoint.clone(),
        }
    }

    /// Runs `f` on every callback in order, each with a fresh [`Context`]; after each, its
    /// state is refreshed so that a checkpoint taken by a later callback holds it.
    fn hook(
        &mut self,
        state: &mut LoopState<'_>,
        optimizer: &mut dyn Optimizer,
        runner: &StepRunner,
        train_metrics: &MetricSet,
        mut f: impl FnMut(&mut dyn Callback, &mut Context<'_>) -> Result<()>,
    ) -> Result<()> {
        for i in 0..self.callbacks.len() {
            state.saved.loop_state = loop_state(state);
            state.saved.loop_tensors = if state.position.batch > 0 {
                train_metrics.state().into_iter().map(|(k, t)| (format!("train_metrics.{k}"), t)).collect()
            } else {
                Vec::new()
            };
            let callback = &mut self.callbacks[i];
            let mut ctx = Context {
                model: state.module,
                optimizer: &mut *optimizer,
                scheduler: self.scheduler.as_ref().map(|(s, _)| s.as_ref()),
                scaler: runner.scaler(),
                position: state.position,
                device: self.device,
                history: &state.history,
                monitor: &state.monitor,
                progress: &self.progress,
                control: &mut state.control,
                saved: &state.saved,
            };
            f(callback.as_mut(), &mut ctx)?;
            state.callback_states.insert(callback.name(), callback.state_dict());
        }
        Ok(())
    }

    fn restore(
        &mut self,
        path: &Path,
        state: &mut LoopState<'_>,
        optimizer: &mut dyn Optimizer,
        runner: &mut StepRunner,
        train_metrics: &mut MetricSet,
    ) -> Result<()> {
        let mut checkpoint = Checkpoint::load(path)?;
        let scheduler = match self.scheduler.as_mut() {
            Some((s, _)) if self.restore_scheduler => Some(&mut **s as &mut dyn LrScheduler),
            _ => None,
        };
        let scaler: Option<&mut GradScaler> =
            checkpoint.meta.grad_scaler.is_some().then_some(runner.scaler_mut());
        let progress = checkpoint.restore(state.module, Some(optimizer), scheduler, scaler)?;
        let saved = &checkpoint.meta.loop_state;
        if let Some(history) = saved.get("history") {
            state.history = history_from_json(history)?;
        }
        if let Some(callbacks) = saved.get("callbacks").and_then(|c| c.as_object()) {
            for c in &mut self.callbacks {
                if let Some(s) = callbacks.get(&c.name()) {
                    c.load_state_dict(s)?;
                }
            }
        }
        state.position.epoch = progress.epoch;
        state.position.global_step = progress.global_step;
        state.position.batch = progress.batch;
        // Rank 0 saved its own partial metrics; the other ranks' count from the resume on.
        if progress.batch > 0 && self.is_main() {
            let tensors: Vec<(String, Tensor)> = checkpoint
                .loop_tensors()
                .into_iter()
                .filter_map(|(k, t)| k.strip_prefix("train_metrics.").map(|k| (k.to_string(), t)))
                .collect();
            train_metrics.load_state(&tensors)?;
        }
        let at = if progress.batch > 0 {
            format!("epoch {}, batch {} of {}", progress.epoch + 1, progress.batch, state.position.batches)
        } else {
            format!("after epoch {}", progress.epoch)
        };
        self.progress.line(&format!("resuming from {} at {at}", checkpoint.dir.display()));
        Ok(())
    }
}

/// The loop's own part of a checkpoint: the history, the callbacks' states and the run length.
/// Counts the outputs of finished steps (a window's, or those a deferred non-finite check held
/// back until it was read) in `metrics`.
fn count_outputs(metrics: &mut MetricSet, outputs: &[StepOutput]) -> Result<()> {
    for out in outputs {
        metrics.update(&out.loss, &out.output, &out.target)?;
    }
    Ok(())
}

fn loop_state(state: &LoopState<'_>) -> serde_json::Value {
    json!({
        "epochs": state.position.epochs,
        "history": history_to_json(&state.history),
        "callbacks": state.callback_states,
    })
}

/// Records as CSV text inside JSON: exact (shortest round-trip floats) and NaN-safe.
fn history_to_json(history: &[EpochRecord]) -> serde_json::Value {
    match history.first() {
        None => json!({ "header": "", "rows": [] }),
        Some(first) => json!({
            "header": first.csv_header(),
            "rows": history.iter().map(EpochRecord::to_csv_line).collect::<Vec<_>>(),
        }),
    }
}

fn history_from_json(value: &serde_json::Value) -> Result<Vec<EpochRecord>> {
    let bad = |reason: String| TrainError::State { what: "the epoch history".into(), reason };
    let header = value.get("header").and_then(|h| h.as_str()).ok_or_else(|| bad("no header".into()))?;
    let rows = value.get("rows").and_then(|r| r.as_array()).ok_or_else(|| bad("no rows".into()))?;
    let columns: Vec<&str> = header.split(',').collect();
    rows.iter()
        .map(|r| {
            let line = r.as_str().ok_or_else(|| bad("a row is not text".into()))?;
            EpochRecord::parse(&columns, line).map_err(bad)
        })
        .collect()
}

/// The best value of `monitor` over `history`, with its epoch.
pub fn best_of(history: &[EpochRecord], monitor: &Monitor) -> Option<(f64, u64)> {
    let mut best: Option<(f64, u64)> = None;
    for r in history {
        if let Some(v) = r.get(&monitor.name) {
            if monitor.mode.improves(v, best.map(|b| b.0)) {
                best = Some((v, r.epoch as u64));
            }
        }
    }
    best
}

/// Runs `model` over every batch of `source` in evaluation mode (no-grad, autocast as `step`
/// says, `task.step(.., stage)`) and returns the metrics of `stage`.
pub fn evaluate<M, B, T>(
    model: &M,
    task: &T,
    source: &mut dyn BatchSource<B>,
    device: Device,
    step: &StepConfig,
    stage: Stage,
    progress: &Progress,
) -> Result<MetricSet>
where
    M: AsDynModule + ?Sized,
    B: Batch,
    T: Task<M, B> + ?Sized,
{
    let runner = StepRunner::new(step.clone(), device)?;
    let mut metrics = MetricSet::new(task.metrics(stage));
    let _grad = no_grad();
    let bar = progress.bar(source.len() as u64, stage.prefix());
    let mut it = source.batches(0, 0);
    while let Some(batch) = it.next() {
        let batch = batch?.to_device(device);
        let out = {
            let _amp = runner.autocast()?;
            task.step(model, &batch, stage)?
        };
        metrics.update(&out.loss, &out.output, &out.target)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(metrics)
}
