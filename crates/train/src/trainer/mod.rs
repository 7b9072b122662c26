//! The `Trainer`: the training loop as a library, for any model, data and task.
//!
//! It owns what every careful loop needs (device placement, AMP with a GradScaler,
//! accumulation, clipping, the NaN/device/out-of-memory guards, validation, lr scheduling,
//! graceful stop on SIGINT/SIGTERM, exact mid-epoch resume) and leaves the rest to parts that
//! plug in: a [`Task`] says what a step computes, [`Callback`]s log, checkpoint, stop early or
//! unfreeze, a [`BatchTransform`] mixes batches, and any [`BatchSource`] (a DataLoader)
//! supplies batches. With a [`Distributed`] world it trains data-parallel: one `fit` per rank,
//! rank 0 alone writing.
//!
//! The loop itself is in `run.rs` (one `fit`, step by step), its resume in `restore.rs`, the
//! evaluation loop that validation, [`Trainer::evaluate`] and [`evaluate`] share in
//! `evaluate.rs`, one optimisation step in `step.rs`, the lr range test
//! ([`Trainer::lr_find`]) in `lr_find.rs`, the batch-size search
//! ([`Trainer::batch_size_find`]) in `batch_size_find.rs`, and the snapshot both tuners put
//! back in `snapshot.rs`.

mod batch_size_find;
mod evaluate;
mod lr_find;
mod restore;
mod run;
mod signal;
mod snapshot;
mod step;

pub use evaluate::evaluate;
pub use step::{GuardRead, MicroStep, NonFiniteAction, OptimizerStep, StepConfig, StepRunner};

use crate::batch::Batch;
use crate::batch_transform::BatchTransform;
use crate::callback::Callback;
use crate::callbacks::{CsvLogging, CurvesPlot, ModelCheckpoint, ProgressBar, TensorBoardLogging};
use crate::distributed::Distributed;
use crate::error::{Result, TrainError};
use crate::metrics::MetricSet;
use crate::progress::Progress;
use crate::record::EpochRecord;
use crate::scheduler::Interval;
use crate::source::BatchSource;
use crate::task::{Monitor, Stage, Task};
use std::any::Any;
use std::path::PathBuf;
use tch::{Device, Kind};
use torchlight_nn::Module;
use torchlight_optim::{LrScheduler, Optimizer, ReduceLROnPlateau};

/// A model the Trainer can take: any [`Module`], or a `dyn Module`.
pub trait AsDynModule {
    /// `self` as a `&dyn Module`.
    fn as_dyn(&self) -> &dyn Module;

    /// `self` as a `&mut dyn Module` (what a callback gets to change a layer).
    fn as_dyn_mut(&mut self) -> &mut dyn Module;
}

impl<T: Module> AsDynModule for T {
    fn as_dyn(&self) -> &dyn Module {
        self
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module {
        self
    }
}

impl AsDynModule for dyn Module {
    fn as_dyn(&self) -> &dyn Module {
        self
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module {
        self
    }
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
    plateau: Option<PlateauSlot>,
    resume: Option<PathBuf>,
    restore_scheduler: bool,
    config: serde_json::Value,
    distributed: Option<Box<dyn Distributed>>,
    /// A `Box<dyn BatchTransform<B>>` for the `B` it was given with.
    batch_transform: Option<Box<dyn Any>>,
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
            plateau: None,
            resume: None,
            restore_scheduler: true,
            config: serde_json::Value::Null,
            distributed: None,
            batch_transform: None,
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

    /// A monitored-metric scheduler, PyTorch's `ReduceLROnPlateau`: stepped once per epoch,
    /// after validation, with the epoch's value of `monitor` (`val_loss`, `val_acc`,
    /// `train_loss`: a stage prefix and a metric name, as [`Monitor`] names them), as
    /// Lightning steps `{"scheduler": ..., "monitor": "val_loss"}`. Its state is saved in every
    /// checkpoint (`loop_state.plateau`) and restored on resume, with the lrs it set (they are
    /// the optimizer's). It changes the optimizer's current lrs, so it cannot be combined with
    /// an [`lr_scheduler`](Self::lr_scheduler), which would overwrite them at its next step;
    /// `build` refuses both. An epoch whose record lacks `monitor` (no validation data for a
    /// `val_` name) stops the run with an error naming the metric.
    pub fn plateau_scheduler(mut self, scheduler: ReduceLROnPlateau, monitor: impl Into<String>) -> Self {
        self.plateau = Some(PlateauSlot { scheduler, monitor: monitor.into() });
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

    /// Transforms every training batch (after the move to the device, before its step) with
    /// `transform`, e.g. Mixup or CutMix; each batch gets a generator seeded from (the seed,
    /// the rank, the epoch, the batch's index), so a resumed run transforms the same batches
    /// the same way. `B` must be the batch type `fit` is given; the seed is the data seed, else
    /// [`seed`](Self::seed), else the process's (`seed_everything`), and `fit` fails without one.
    pub fn batch_transform<B: 'static>(mut self, transform: impl BatchTransform<B> + 'static) -> Self {
        let boxed: Box<dyn BatchTransform<B>> = Box::new(transform);
        self.batch_transform = Some(Box::new(boxed));
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
            return Err(TrainError::InvalidSetting {
                setting: "epochs".into(),
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        if let (Some((s, _)), Some(p)) = (&self.scheduler, &self.plateau) {
            return Err(TrainError::InvalidSetting {
                setting: "plateau_scheduler".into(),
                value: format!("ReduceLROnPlateau on {} beside {}", p.monitor, s.name()),
                reason: "both set the optimizer's lrs (the lr scheduler would overwrite the plateau cuts \
                         at its next step): use one of them"
                    .into(),
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
                return Err(TrainError::InvalidSetting {
                    setting: "callbacks".into(),
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
            plateau: self.plateau,
            resume: self.resume,
            restore_scheduler: self.restore_scheduler,
            config: self.config,
            distributed: self.distributed,
            checkpoint_every: self.checkpoint_every,
            batch_transform: self.batch_transform,
        })
    }
}

/// A ReduceLROnPlateau and the metric it is stepped with.
#[derive(Debug)]
struct PlateauSlot {
    scheduler: ReduceLROnPlateau,
    monitor: String,
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
/// # fn demo(mut model: torchlight_nn::ResNet,
/// #         train: &mut torchlight_data::DataLoader<torchlight_data::TensorDataset<(tch::Tensor, tch::Tensor)>>,
/// #         val: &mut torchlight_data::DataLoader<torchlight_data::TensorDataset<(tch::Tensor, tch::Tensor)>>,
/// #         optimizer: &mut dyn torchlight_optim::Optimizer) -> torchlight_train::Result<()> {
/// let mut trainer = Trainer::builder().epochs(10).amp(true).run_dir("runs/exp_001").build()?;
/// let summary = trainer.fit(&mut model, &Classification::new(3), optimizer, train, Some(val))?;
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
    plateau: Option<PlateauSlot>,
    resume: Option<PathBuf>,
    restore_scheduler: bool,
    config: serde_json::Value,
    distributed: Option<Box<dyn Distributed>>,
    /// The run folder's mid-epoch checkpoint interval, in optimizer steps.
    checkpoint_every: Option<u64>,
    batch_transform: Option<Box<dyn Any>>,
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

    /// The ReduceLROnPlateau of [`TrainerBuilder::plateau_scheduler`] (its best value, its
    /// state) and the metric it monitors.
    pub fn plateau_scheduler(&self) -> Option<(&ReduceLROnPlateau, &str)> {
        self.plateau.as_ref().map(|p| (&p.scheduler, p.monitor.as_str()))
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

    /// The step runner of a fit or an lr sweep. Under a distributed Trainer an out-of-memory
    /// failure comes back at once (`fits: None`), without the halving probe: the probe's
    /// forwards would run on this rank alone, while the others wait in the step's gradient
    /// all-reduce, and with synchronised BatchNorm they would enter collectives the other ranks
    /// never join (a hang rather than the error).
    pub(crate) fn step_runner(&self) -> Result<StepRunner> {
        let runner = StepRunner::new(self.step.clone(), self.device)?;
        Ok(if self.distributed.is_some() { runner.without_oom_probe() } else { runner })
    }

    /// Trains `model` on `train` for the configured epochs, validating on `val` after each,
    /// with `task` computing each step and `optimizer` updating the parameters. The model is
    /// borrowed mutably so that callbacks can change its layers ([`Context::model_mut`]).
    ///
    /// Errors stop the loop; those that leave it in a consistent state (an interrupt after a
    /// step, a data error while validating) first give the callbacks `on_interrupt`, where
    /// [`ModelCheckpoint`] saves `last` so the run resumes from exactly there.
    ///
    /// [`Context::model_mut`]: crate::Context::model_mut
    pub fn fit<M, B, T>(
        &mut self,
        model: &mut M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        train: &mut dyn BatchSource<B>,
        val: Option<&mut dyn BatchSource<B>>,
    ) -> Result<FitSummary>
    where
        M: AsDynModule + ?Sized,
        B: Batch + 'static,
        T: Task<M, B> + ?Sized,
    {
        let mut transform = self.batch_transform.take();
        let result = (|| {
            let transform = typed_batch_transform::<B>(transform.as_mut(), "fit")?;
            run::Run::start(self, model, task, optimizer, train.len())?.fit(train, val, transform)
        })();
        self.batch_transform = transform;
        result
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

    /// The seed a batch transform's per-batch generators derive from outside `fit` (the
    /// tuners): the data seed, else the Trainer's seed, else the process's; an error without
    /// one.
    pub(crate) fn batch_transform_seed(&self) -> Result<u64> {
        self.data_seed.or(self.seed).or_else(torchlight_tensor::global_seed).ok_or_else(|| {
            TrainError::InvalidSetting {
                setting: "batch_transform".into(),
                value: "no seed".into(),
                reason: "a batch transform draws from generators seeded per batch: set \
                         TrainerBuilder::seed or data_seed (or call seed_everything first)"
                    .into(),
            }
        })
    }
}

/// The best value of `monitor` over `history`, with its epoch; an epoch with a non-finite figure
/// in the monitored stage is never best ([`EpochRecord::monitored`]).
pub fn best_of(history: &[EpochRecord], monitor: &Monitor) -> Option<(f64, u64)> {
    let mut best: Option<(f64, u64)> = None;
    for r in history {
        if let Some(v) = r.monitored(&monitor.name) {
            if monitor.mode.improves(v, best.map(|b| b.0)) {
                best = Some((v, r.epoch as u64));
            }
        }
    }
    best
}

/// The Trainer's batch transform (stored type-erased) as one for batches of type `B`, or an
/// error naming `what` (`fit`, `lr_find`) when it was set for another batch type.
pub(crate) fn typed_batch_transform<'a, B: Batch + 'static>(
    transform: Option<&'a mut Box<dyn Any>>,
    what: &str,
) -> Result<Option<&'a mut Box<dyn BatchTransform<B>>>> {
    transform
        .map(|any| {
            any.downcast_mut::<Box<dyn BatchTransform<B>>>().ok_or_else(|| TrainError::InvalidSetting {
                setting: "batch_transform".into(),
                value: "a transform of another batch type".into(),
                reason: format!("{what} trains on batches of type {}", std::any::type_name::<B>()),
            })
        })
        .transpose()
}
