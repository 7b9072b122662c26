//! `Callback`: code that runs at fixed points of the Trainer's loop (PyTorch Lightning's hook
//! points), with a saveable state of JSON and tensors; and the `Context` every hook gets.

use crate::error::{Result, TrainError};
use crate::metrics::MetricSet;
use crate::progress::Progress;
use crate::record::{history_to_json, EpochRecord};
use crate::task::Monitor;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tch::{Device, Tensor};
use torchlight_checkpoint::{Progress as Position, Snapshot};
use torchlight_nn::Module;
use torchlight_optim::{GradScaler, LrScheduler, Optimizer, ReduceLROnPlateau};

/// Where the loop stands when a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopPosition {
    /// The 0-based epoch running (or, after `on_train_epoch_end`, the number completed).
    pub epoch: u64,
    /// Epochs the run is set to train.
    pub epochs: u64,
    /// Batches of this epoch already trained on.
    pub batch: u64,
    /// Batches per training epoch.
    pub batches: u64,
    /// Optimizer steps taken in the whole run.
    pub global_step: u64,
}

/// What a training batch produced, for `on_train_batch_end`.
#[derive(Debug)]
pub struct BatchEnd {
    /// The batch's mean loss, detached, on the device (reading it syncs CUDA).
    pub loss: Tensor,
    /// Samples in the batch.
    pub samples: usize,
    /// Whether an optimizer step closed this batch's accumulation window.
    pub stepped: bool,
    /// The mean training loss of the epoch so far, read back every `log_every` batches.
    pub running_loss: Option<f64>,
}

/// What a hook can see of the run and ask of the Trainer.
pub struct Context<'a> {
    pub(crate) model: &'a mut dyn Module,
    /// Its optimizer (hooks may change learning rates).
    pub optimizer: &'a mut dyn Optimizer,
    /// The lr scheduler, if any.
    pub scheduler: Option<&'a dyn LrScheduler>,
    /// The GradScaler (disabled unless AMP runs in float16 on CUDA).
    pub scaler: &'a GradScaler,
    /// Where the loop stands.
    pub position: LoopPosition,
    /// The device batches go to.
    pub device: Device,
    /// Every completed epoch's record, oldest first.
    pub history: &'a [EpochRecord],
    /// The metric that picks the best checkpoint.
    pub monitor: &'a Monitor,
    /// Where progress lines go.
    pub progress: &'a Progress,
    pub(crate) control: &'a mut Control,
    pub(crate) saved: Saved<'a>,
}

/// Requests hooks make of the Trainer.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) stop: Option<String>,
    pub(crate) notes: Vec<String>,
    pub(crate) checkpoint: Option<PathBuf>,
    pub(crate) logged: Vec<(String, f64, i64)>,
}

/// Every callback's state as of the end of its last hook, refreshed by the Trainer after each
/// hook (so a callback that snapshots holds the states of those that ran before it in the
/// same round).
#[derive(Debug, Default)]
pub(crate) struct CallbackStates {
    pub(crate) json: BTreeMap<String, serde_json::Value>,
    pub(crate) tensors: BTreeMap<String, Vec<(String, Tensor)>>,
}

impl CallbackStates {
    /// Takes `callback`'s current state.
    pub(crate) fn refresh(&mut self, callback: &dyn Callback) {
        let name = callback.name();
        let tensors = callback.tensor_state();
        if tensors.is_empty() {
            self.tensors.remove(&name);
        } else {
            self.tensors.insert(name.clone(), tensors);
        }
        self.json.insert(name, callback.state_dict());
    }
}

/// What a snapshot holds besides model, optimizer, scheduler and scaler, borrowed from the
/// loop: the loop's own state is assembled only when a snapshot is taken.
pub(crate) struct Saved<'a> {
    /// The Trainer's ReduceLROnPlateau, saved in `loop_state.plateau`.
    pub(crate) plateau: Option<&'a ReduceLROnPlateau>,
    pub(crate) callbacks: &'a CallbackStates,
    /// The epoch's training metrics so far (saved mid-epoch).
    pub(crate) train_metrics: &'a MetricSet,
    pub(crate) data_seed: Option<u64>,
    pub(crate) config: &'a serde_json::Value,
}

/// The loop's own part of a checkpoint's `meta.json` (`loop_state`): the run length, the epoch
/// history, every callback's JSON state and the keys of its tensors, and the ReduceLROnPlateau's
/// state when the Trainer has one.
pub(crate) fn loop_state(
    position: &LoopPosition,
    history: &[EpochRecord],
    callbacks: &CallbackStates,
    plateau: Option<&ReduceLROnPlateau>,
) -> serde_json::Value {
    let tensor_keys: BTreeMap<&String, Vec<&String>> =
        callbacks.tensors.iter().map(|(name, ts)| (name, ts.iter().map(|(k, _)| k).collect())).collect();
    let mut state = json!({
        "epochs": position.epochs,
        "history": history_to_json(history),
        "callbacks": callbacks.json,
        "callback_tensors": tensor_keys,
    });
    if let Some(p) = plateau {
        state["plateau"] = json!(p.state_dict());
    }
    state
}

/// The key under which callback `name`'s tensor `key` is saved (`loop.` is the checkpoint's
/// own prefix): `callbacks.<name>.<key>`.
pub(crate) fn callback_tensor_key(name: &str, key: &str) -> String {
    format!("callbacks.{name}.{key}")
}

impl Context<'_> {
    /// The model being trained.
    pub fn model(&self) -> &dyn Module {
        self.model
    }

    /// The model being trained, to change a layer (freeze BatchNorm statistics, swap a head):
    /// structure through [`Module::children_mut`].
    pub fn model_mut(&mut self) -> &mut dyn Module {
        self.model
    }

    /// Asks the Trainer to stop after this hook round (early stopping); `reason` is printed.
    pub fn request_stop(&mut self, reason: impl Into<String>) {
        self.control.stop = Some(reason.into());
    }

    /// Adds a note to the epoch's summary line (`*best*`).
    pub fn annotate(&mut self, note: impl Into<String>) {
        self.control.notes.push(note.into());
    }

    /// The notes added so far this round, taken (the progress line prints them).
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.control.notes)
    }

    /// Logs a scalar (Lightning's `self.log`) under `tag` at `step`; loggers that run later in
    /// the same hook round ([`TensorBoardLogging`](crate::callbacks::TensorBoardLogging))
    /// write it.
    pub fn log_scalar(&mut self, tag: impl Into<String>, value: f64, step: i64) {
        self.control.logged.push((tag.into(), value, step));
    }

    /// The scalars logged so far this round, taken.
    pub fn take_logged(&mut self) -> Vec<(String, f64, i64)> {
        std::mem::take(&mut self.control.logged)
    }

    /// Whether a callback asked the loop to stop after this epoch.
    pub fn stop_requested(&self) -> Option<&str> {
        self.control.stop.as_deref()
    }

    /// Records that a checkpoint to resume from was written at `dir` (reported when the run is
    /// interrupted).
    pub fn saved_checkpoint(&mut self, dir: impl Into<PathBuf>) {
        self.control.checkpoint = Some(dir.into());
    }

    /// Everything needed to resume the run exactly from this point, for
    /// [`torchlight_checkpoint::save`] or a [`torchlight_checkpoint::CheckpointManager`]: model,
    /// optimizer, scheduler, GradScaler, generator states, the loop's position (mid-epoch
    /// included), partial metrics and every callback's state.
    pub fn snapshot(&self) -> Snapshot<'_> {
        let mut loop_tensors = Vec::new();
        if self.position.batch > 0 {
            let partial = self.saved.train_metrics.state().into_iter();
            loop_tensors.extend(partial.map(|(k, t)| (format!("train_metrics.{k}"), t)));
        }
        for (name, tensors) in &self.saved.callbacks.tensors {
            let own = tensors.iter().map(|(k, t)| (callback_tensor_key(name, k), t.shallow_clone()));
            loop_tensors.extend(own);
        }
        Snapshot {
            model: &*self.model,
            optimizer: Some(&*self.optimizer),
            scheduler: self.scheduler,
            grad_scaler: Some(self.scaler),
            progress: Position {
                epoch: self.position.epoch,
                global_step: self.position.global_step,
                batch: self.position.batch,
            },
            metric: None,
            best: None,
            data_seed: self.saved.data_seed,
            rng: true,
            config: self.saved.config.clone(),
            loop_state: loop_state(&self.position, self.history, self.saved.callbacks, self.saved.plateau),
            loop_tensors,
        }
    }
}

/// Copies `weights` (by state_dict key) into `model`'s tensors in one multi-tensor call and
/// returns each model tensor with a copy of its raw value, to copy back; an error naming a key
/// the model lacks or a shape that differs, before anything is changed.
pub(crate) fn swap_in(
    model: &dyn torchlight_nn::Module,
    weights: &[(String, Tensor)],
) -> Result<Vec<(Tensor, Tensor)>> {
    let _guard = torchlight_tensor::no_grad();
    let mut own: std::collections::HashMap<String, Tensor> =
        torchlight_nn::state_dict(model).into_iter().collect();
    let mut pairs = Vec::with_capacity(weights.len());
    for (k, w) in weights {
        let m = own.remove(k).filter(|m| m.size() == w.size()).ok_or_else(|| TrainError::State {
            what: "the averaged weights to validate".into(),
            reason: format!("`{k}` {:?} is not a tensor of that shape in the model", w.size()),
        })?;
        pairs.push((m, w));
    }
    let raw: Vec<(Tensor, Tensor)> = pairs.iter().map(|(m, _)| (m.shallow_clone(), m.copy())).collect();
    let (dst, src): (Vec<&Tensor>, Vec<&Tensor>) = pairs.iter().map(|(m, w)| (m, *w)).unzip();
    torchlight_tensor::foreach_copy_(&dst, &src)?;
    Ok(raw)
}

/// Copies back the raw values [`swap_in`] returned.
pub(crate) fn swap_back(raw: &[(Tensor, Tensor)]) -> Result<()> {
    let (dst, src): (Vec<&Tensor>, Vec<&Tensor>) = raw.iter().map(|(m, b)| (m, b)).unzip();
    Ok(torchlight_tensor::foreach_copy_(&dst, &src)?)
}

/// Code run at fixed points of the loop, like a Lightning `Callback`. Every hook has a default
/// that does nothing. A callback's state is saved in every checkpoint and handed back on
/// resume: JSON through [`state_dict`](Callback::state_dict) /
/// [`load_state_dict`](Callback::load_state_dict), tensors (EMA weights, running statistics)
/// through [`tensor_state`](Callback::tensor_state) /
/// [`load_tensor_state`](Callback::load_tensor_state), stored bit for bit in the checkpoint's
/// `training.safetensors` (never in the model's file).
///
/// The built-in logging, checkpointing, early stopping, lr monitoring, progress and staged
/// unfreezing are callbacks (see `crate::callbacks`); a user's callback gets the same access.
pub trait Callback {
    /// A unique name: the key of its state in checkpoints.
    fn name(&self) -> String;

    /// Once, before the first epoch (after a resume's state is restored).
    fn on_train_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// At the start of each training epoch (also a resumed, partly done one).
    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Before each training batch's forward pass (after the batch transform, if any);
    /// `ctx.position.batch` is the batch's 0-based index in the epoch.
    fn on_train_batch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// After each training batch (its backward, and its optimizer step if it closed a window).
    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        let _ = (ctx, batch);
        Ok(())
    }

    /// Before each optimizer step, with the gradients in place (still scaled under float16
    /// AMP): inspect or change them here.
    fn on_before_optimizer_step(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// At the start of each validation pass.
    fn on_validation_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// After each validation batch.
    fn on_validation_batch_end(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// After each validation pass, with its metrics (`("val_loss", 0.41)`, ...).
    fn on_validation_epoch_end(&mut self, ctx: &mut Context<'_>, metrics: &[(String, f64)]) -> Result<()> {
        let _ = (ctx, metrics);
        Ok(())
    }

    /// After each epoch (training and validation), with the epoch's record. As in Lightning 2,
    /// this runs after validation, so the record holds both.
    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        let _ = (ctx, record);
        Ok(())
    }

    /// Once, after the last epoch (also after early stopping).
    fn on_train_end(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// When the loop stops early on an interrupt (SIGINT/SIGTERM) or an error that leaves the
    /// run resumable (a data error during validation). The position in `ctx` is consistent:
    /// a checkpoint saved here resumes exactly.
    fn on_interrupt(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// The callback's state, saved in checkpoints (JSON null by default).
    fn state_dict(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Restores [`Callback::state_dict`] on resume.
    fn load_state_dict(&mut self, state: &serde_json::Value) -> Result<()> {
        let _ = state;
        Ok(())
    }

    /// The callback's tensors, saved in checkpoints under their keys (none by default). Return
    /// shallow clones (`Tensor::shallow_clone`): the checkpoint writes their current values
    /// when it is taken. Called after each of the callback's hooks, so keep it cheap.
    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Weights besides the model's own (an EMA of them, [`ModelEma`](crate::ModelEma)) that the
    /// Trainer validates after each validation pass of the raw model, by the model's
    /// state_dict keys (parameters and buffers): it copies them into the model, validates,
    /// and copies the raw weights back, and the metrics go into the epoch's record as
    /// `ema_val_<metric>` (one callback per Trainer may return some). None by default.
    fn validation_weights(&self) -> Option<Vec<(String, Tensor)>> {
        None
    }

    /// Restores [`Callback::tensor_state`] on resume, with the tensors as saved (on the CPU,
    /// with their saved dtypes): copy them into the callback's own tensors, or move them to
    /// the device. Called after [`load_state_dict`](Callback::load_state_dict), only when the
    /// checkpoint holds tensors of this callback.
    fn load_tensor_state(&mut self, tensors: Vec<(String, Tensor)>) -> Result<()> {
        let _ = tensors;
        Ok(())
    }
}
