//! `ModelEma`: an exponential moving average of the model's parameters and buffers, as
//! torchvision's `ExponentialMovingAverage` (its reference script's schedule) or timm's
//! `ModelEmaV3` (with its warm-up), updated with multi-tensor kernels, saved in every
//! checkpoint and validated each epoch next to the raw model.

use crate::callback::{swap_back, swap_in, BatchEnd, Callback, Context};
use crate::error::{Result, TrainError};
use crate::record::EpochRecord;
use crate::task::Monitor;
use serde_json::json;
use std::path::PathBuf;
use tch::{Kind, Tensor};
use torchlight_checkpoint::{Metric, Progress as Position, Snapshot};
use torchlight_nn::Module;

/// Whose EMA rule and schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Style {
    /// torchvision: `AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)`
    /// updated at batches `i % steps == 0` of each epoch; the first update (and every update
    /// of the first `copy_epochs` epochs, the script's lr warm-up) copies the weights.
    Torchvision { copy_epochs: u64 },
    /// timm's `ModelEmaV3.update(model, step=num_updates)` after every optimizer step.
    Timm { warmup: Option<(f64, f64)>, min_decay: f64, update_after_step: u64 },
}

/// An exponential moving average of a model's parameters and buffers (`ema = decay * ema +
/// (1 - decay) * weights`, one `torch._foreach_lerp_` per dtype and device, so no
/// per-tensor host round trip), as a [`Callback`]:
///
/// - [`ModelEma::torchvision`]: torchvision's `ExponentialMovingAverage` as its reference
///   `train.py` drives it (`--model-ema`, `--model-ema-steps`, `--model-ema-decay`; the decay
///   adjusted by [`torchvision_decay`](ModelEma::torchvision_decay)): updated after the
///   optimizer steps `0, steps, 2*steps, ...` of each epoch (counted from 0 within the epoch),
///   the first update copying the weights; integer buffers (`num_batches_tracked`) get
///   `ema * decay + w * (1 - decay)` truncated, as torch's `get_ema_multi_avg_fn` gives them.
/// - [`ModelEma::timm`]: timm's `ModelEmaV3` (`update(model, step=num_updates)` after every
///   optimizer step, `--model-ema-warmup` as [`with_warmup`](ModelEma::with_warmup)); integer
///   buffers are copied.
///
/// The EMA starts as a copy of the weights at the start of training (`deepcopy(model)`). Its
/// tensors and counters are in every checkpoint the Trainer writes (`tensor_state`, keys
/// `callbacks.ModelEma.<state_dict key>`), so a run stopped mid-epoch and resumed ends with
/// the EMA bit for bit as an uninterrupted run. Each epoch the Trainer validates the EMA
/// weights after the raw model's ([`Callback::validation_weights`]): metrics `ema_val_loss`,
/// `ema_val_acc`, ... in `metrics.csv`, TensorBoard (`loss/ema_val`, ...) and the history,
/// which a [`ModelCheckpoint`](crate::ModelCheckpoint) or `EarlyStopping` can monitor.
#[derive(Debug)]
pub struct ModelEma {
    decay: f64,
    every: u64,
    style: Style,
    validate: bool,
    /// The averaged tensors, by state_dict key (parameters, then buffers, as torch's
    /// `parameters()` then `buffers()`), on the model's devices.
    ema: Vec<(String, Tensor)>,
    /// Tensors restored from a checkpoint, placed when training starts.
    loaded: Option<Vec<(String, Tensor)>>,
    /// torchvision's `n_averaged`.
    n_averaged: u64,
    /// Updates applied.
    updates: u64,
    /// The global step when the current epoch began (torchvision counts steps within it).
    epoch_start_step: u64,
    /// Where the EMA weights of their best epoch go, and by which metric.
    best_checkpoint: Option<(PathBuf, Monitor)>,
    /// The best value of that metric so far, with its (1-based) epoch.
    best: Option<(f64, u64)>,
}

fn invalid(setting: &str, value: impl ToString, reason: &str) -> TrainError {
    TrainError::InvalidSetting { setting: setting.into(), value: value.to_string(), reason: reason.into() }
}

fn check_decay(decay: f64) -> Result<()> {
    if (0.0..=1.0).contains(&decay) {
        Ok(())
    } else {
        Err(invalid("model_ema_decay", decay, "must be in [0, 1]"))
    }
}

impl ModelEma {
    /// torchvision's `ExponentialMovingAverage(model, decay)` updated every `steps` optimizer
    /// steps of an epoch (`--model-ema-steps`, its default 32). `decay` is the one the EMA
    /// uses: pass [`torchvision_decay`](Self::torchvision_decay) of the flags to follow the
    /// script.
    pub fn torchvision(decay: f64, steps: u64) -> Result<Self> {
        check_decay(decay)?;
        if steps == 0 {
            return Err(invalid("model_ema_steps", 0, "must be at least 1"));
        }
        Ok(Self::with_style(decay, steps, Style::Torchvision { copy_epochs: 0 }))
    }

    /// timm's `ModelEmaV3(model, decay)` (its default decay 0.9999), updated after every
    /// optimizer step.
    pub fn timm(decay: f64) -> Result<Self> {
        check_decay(decay)?;
        Ok(Self::with_style(decay, 1, Style::Timm { warmup: None, min_decay: 0.0, update_after_step: 0 }))
    }

    fn with_style(decay: f64, every: u64, style: Style) -> Self {
        ModelEma {
            decay,
            every,
            style,
            validate: true,
            ema: Vec::new(),
            loaded: None,
            n_averaged: 0,
            updates: 0,
            epoch_start_step: 0,
            best_checkpoint: None,
            best: None,
        }
    }

    /// The decay torchvision's reference `train.py` gives its EMA for `--model-ema-decay
    /// decay`, `--model-ema-steps steps`, `--batch-size` (per process), the world size and
    /// `--epochs`: `1 - min(1, (1 - decay) * world * batch * steps / epochs)`.
    pub fn torchvision_decay(
        decay: f64,
        steps: u64,
        batch_size: usize,
        world_size: usize,
        epochs: u64,
    ) -> f64 {
        let adjust = (world_size * batch_size) as f64 * steps as f64 / epochs.max(1) as f64;
        let alpha = (1.0 - decay) * adjust;
        1.0 - alpha.min(1.0)
    }

    /// torchvision style: copy the weights instead of averaging during the first `epochs`
    /// epochs (the script resets `n_averaged` while `epoch < --lr-warmup-epochs`).
    pub fn with_copy_epochs(mut self, epochs: u64) -> Self {
        if let Style::Torchvision { copy_epochs } = &mut self.style {
            *copy_epochs = epochs;
        }
        self
    }

    /// timm style: the warm-up decay `1 - (1 + step / gamma) ^ -power`, clamped to
    /// `[min_decay, decay]` (timm's `use_warmup`, defaults gamma 1, power 2/3).
    pub fn with_warmup(mut self, gamma: f64, power: f64) -> Result<Self> {
        if !(gamma.is_finite() && gamma > 0.0 && power.is_finite() && power > 0.0) {
            return Err(invalid(
                "model_ema_warmup",
                format!("gamma {gamma}, power {power}"),
                "both must be > 0",
            ));
        }
        if let Style::Timm { warmup, .. } = &mut self.style {
            *warmup = Some((gamma, power));
        }
        Ok(self)
    }

    /// timm style: the lower bound of the decay (`min_decay`, default 0).
    pub fn with_min_decay(mut self, min: f64) -> Result<Self> {
        check_decay(min)?;
        if let Style::Timm { min_decay, .. } = &mut self.style {
            *min_decay = min;
        }
        Ok(self)
    }

    /// timm style: steps before averaging starts (`update_after_step`, default 0).
    pub fn with_update_after_step(mut self, steps: u64) -> Self {
        if let Style::Timm { update_after_step, .. } = &mut self.style {
            *update_after_step = steps;
        }
        self
    }

    /// Also save the EMA weights as a checkpoint in `dir` (model weights and the run's config,
    /// no optimizer: what `eval`, `predict` and `export` load) after each epoch whose
    /// `monitor` (e.g. `ema_val_acc`, larger is better) is the best so far: timm's
    /// `CheckpointSaver` of the EMA. Add it on the process that writes the run folder only.
    pub fn with_best_checkpoint(mut self, dir: impl Into<PathBuf>, monitor: Monitor) -> Self {
        self.best_checkpoint = Some((dir.into(), monitor));
        self
    }

    /// The best value of the best-checkpoint monitor so far, with its (1-based) epoch.
    pub fn best(&self) -> Option<(f64, u64)> {
        self.best
    }

    /// Whether the Trainer validates the EMA weights each epoch (default on).
    pub fn with_validation(mut self, on: bool) -> Self {
        self.validate = on;
        self
    }

    /// The EMA's base decay.
    pub fn decay(&self) -> f64 {
        self.decay
    }

    /// The averaged parameters and buffers by state_dict key (empty before training starts).
    pub fn weights(&self) -> &[(String, Tensor)] {
        &self.ema
    }

    /// Updates applied so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// timm's `get_decay(step)`: 0 up to `update_after_step + 1`, then the decay (or its
    /// warm-up form).
    pub fn timm_decay(&self, step: u64) -> f64 {
        let Style::Timm { warmup, min_decay, update_after_step } = self.style else { return self.decay };
        let step = step.saturating_sub(update_after_step + 1);
        if step == 0 {
            return 0.0;
        }
        match warmup {
            None => self.decay,
            Some((gamma, power)) => {
                let d = 1.0 - (1.0 + step as f64 / gamma).powf(-power);
                d.min(self.decay).max(min_decay)
            }
        }
    }

    /// Starts the average as a copy of `model`'s parameters and buffers (done at the start of
    /// training when no checkpoint restored it).
    pub fn init(&mut self, model: &dyn Module) {
        let _guard = torchlight_tensor::no_grad();
        self.ema = model_tensors(model).into_iter().map(|(k, t)| (k, t.copy())).collect();
    }

    /// One update from `model` at global optimizer step `step` (1-based), as the callback does
    /// it (torchvision: `update_parameters`; timm: `update(model, step)`), for a loop of your
    /// own. Starts the average from `model` when it has none.
    pub fn update(&mut self, model: &dyn Module, step: u64) -> Result<()> {
        if self.ema.is_empty() {
            self.init(model);
        }
        let current = model_tensors(model);
        self.check_names(&current)?;
        match self.style {
            Style::Torchvision { .. } => {
                if self.n_averaged == 0 {
                    let (dst, src): (Vec<&Tensor>, Vec<&Tensor>) =
                        self.ema.iter().zip(&current).map(|((_, e), (_, m))| (e, m)).unzip();
                    torchlight_tensor::foreach_copy_(&dst, &src)?;
                } else {
                    self.lerp(&current, self.decay, true)?;
                }
                self.n_averaged += 1;
            }
            Style::Timm { .. } => {
                let decay = self.timm_decay(step);
                self.lerp(&current, decay, false)?;
            }
        }
        self.updates += 1;
        Ok(())
    }

    /// `ema.lerp_(w, 1 - decay)` over the floating tensors, grouped by dtype and device (one
    /// multi-tensor call each); integer buffers averaged and truncated (torchvision) or copied
    /// (timm).
    fn lerp(&self, current: &[(String, Tensor)], decay: f64, average_integers: bool) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut integers: Vec<(&Tensor, &Tensor)> = Vec::new();
        for ((_, e), (_, m)) in self.ema.iter().zip(current) {
            if !e.is_floating_point() {
                integers.push((e, m));
                continue;
            }
            let key = (e.kind(), e.device());
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, es, ms)) => {
                    es.push(e);
                    ms.push(m);
                }
                None => groups.push((key, vec![e], vec![m])),
            }
        }
        for (_, es, ms) in &groups {
            torchlight_tensor::foreach_lerp_(es, ms, 1.0 - decay)?;
        }
        if average_integers {
            for (e, m) in integers {
                // torch's `p_ema.copy_(p_ema * decay + p_model * (1 - decay))`.
                let mut e = e.shallow_clone();
                e.copy_(&(e.g_mul_scalar(decay) + m.g_mul_scalar(1.0 - decay)));
            }
        } else {
            let (dst, src): (Vec<&Tensor>, Vec<&Tensor>) = integers.into_iter().unzip();
            torchlight_tensor::foreach_copy_(&dst, &src)?;
        }
        Ok(())
    }

    fn check_names(&self, current: &[(String, Tensor)]) -> Result<()> {
        let same = self.ema.len() == current.len()
            && self.ema.iter().zip(current).all(|((a, x), (b, y))| a == b && x.size() == y.size());
        if same {
            return Ok(());
        }
        let first = self
            .ema
            .iter()
            .map(|(k, t)| (k.clone(), t.size()))
            .zip(current.iter().map(|(k, t)| (k.clone(), t.size())))
            .find(|(a, b)| a != b)
            .map_or_else(
                || format!("{} averaged tensors but the model has {}", self.ema.len(), current.len()),
                |(a, b)| format!("averaged `{}` {:?} but the model has `{}` {:?}", a.0, a.1, b.0, b.1),
            );
        Err(TrainError::State { what: "ModelEma".into(), reason: format!("the model changed: {first}") })
    }

    /// Places tensors restored from a checkpoint on the devices of `model`'s.
    fn place_loaded(&mut self, model: &dyn Module, loaded: Vec<(String, Tensor)>) -> Result<()> {
        let current = model_tensors(model);
        let mut by_name: std::collections::HashMap<String, Tensor> = loaded.into_iter().collect();
        let mut ema = Vec::with_capacity(current.len());
        for (k, m) in &current {
            let t = by_name.remove(k).ok_or_else(|| TrainError::State {
                what: "ModelEma".into(),
                reason: format!("the checkpoint has no averaged `{k}` (saved for another model?)"),
            })?;
            if t.size() != m.size() || t.kind() != m.kind() {
                return Err(TrainError::State {
                    what: "ModelEma".into(),
                    reason: format!(
                        "averaged `{k}` is {:?} {:?} in the checkpoint but the model's is {:?} {:?}",
                        t.size(),
                        t.kind(),
                        m.size(),
                        m.kind()
                    ),
                });
            }
            ema.push((k.clone(), t.to_device(m.device())));
        }
        if let Some(extra) = by_name.keys().next() {
            return Err(TrainError::State {
                what: "ModelEma".into(),
                reason: format!("the checkpoint averages `{extra}`, which the model does not have"),
            });
        }
        self.ema = ema;
        Ok(())
    }
}

/// EMA and model tensors of one dtype and device, for one multi-tensor call.
type Group<'a> = ((Kind, tch::Device), Vec<&'a Tensor>, Vec<&'a Tensor>);

/// The model's parameters then buffers (torch's `parameters()` then `buffers()`), detached.
fn model_tensors(model: &dyn Module) -> Vec<(String, Tensor)> {
    let params = torchlight_nn::named_parameters(model).into_iter();
    let buffers = torchlight_nn::named_buffers(model).into_iter();
    params.chain(buffers).map(|(k, t)| (k, t.detach())).collect()
}

impl Callback for ModelEma {
    fn name(&self) -> String {
        "ModelEma".into()
    }

    fn on_train_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if let Some(loaded) = self.loaded.take() {
            self.place_loaded(ctx.model(), loaded)?;
        } else if self.ema.is_empty() {
            self.init(ctx.model());
        }
        Ok(())
    }

    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if ctx.position.batch == 0 {
            self.epoch_start_step = ctx.position.global_step;
        }
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        if !batch.stepped {
            return Ok(());
        }
        let step = ctx.position.global_step;
        match self.style {
            Style::Torchvision { copy_epochs } => {
                // torchvision's `i % args.model_ema_steps == 0`, i counted within the epoch.
                let i = step.saturating_sub(self.epoch_start_step + 1);
                if i.is_multiple_of(self.every) {
                    self.update(ctx.model(), step)?;
                    if ctx.position.epoch < copy_epochs {
                        self.n_averaged = 0;
                    }
                }
            }
            Style::Timm { .. } => {
                if step.is_multiple_of(self.every) {
                    self.update(ctx.model(), step)?;
                }
            }
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        let Some((dir, monitor)) = &self.best_checkpoint else { return Ok(()) };
        let Some(value) = record.monitored(&monitor.name) else { return Ok(()) };
        if !monitor.mode.improves(value, self.best.map(|b| b.0)) || self.ema.is_empty() {
            return Ok(());
        }
        let epoch = record.epoch as u64;
        let metric = Metric { name: monitor.name.clone(), value, mode: monitor.mode, epoch };
        let raw = swap_in(ctx.model(), &self.tensor_state())?;
        let saved = {
            let mut snapshot = Snapshot::model(ctx.model());
            snapshot.progress =
                Position { epoch: ctx.position.epoch, global_step: ctx.position.global_step, batch: 0 };
            snapshot.metric = Some(metric.clone());
            snapshot.best = Some(metric);
            snapshot.config = ctx.saved.config.clone();
            torchlight_checkpoint::save(dir, &snapshot)
        };
        swap_back(&raw)?;
        saved?;
        self.best = Some((value, epoch));
        ctx.annotate("*best ema*");
        Ok(())
    }

    fn state_dict(&self) -> serde_json::Value {
        json!({
            "n_averaged": self.n_averaged,
            "updates": self.updates,
            "epoch_start_step": self.epoch_start_step,
            "decay": self.decay,
            "best": self.best.map(|(v, e)| json!({ "value": v, "epoch": e })),
        })
    }

    fn load_state_dict(&mut self, state: &serde_json::Value) -> Result<()> {
        let get = |k: &str| {
            state.get(k).and_then(|v| v.as_u64()).ok_or_else(|| TrainError::State {
                what: "ModelEma".into(),
                reason: format!("`{k}` is missing or not a count in {state}"),
            })
        };
        self.n_averaged = get("n_averaged")?;
        self.updates = get("updates")?;
        self.epoch_start_step = get("epoch_start_step")?;
        self.best = match state.get("best") {
            None | Some(serde_json::Value::Null) => None,
            Some(b) => Some((
                b.get("value").and_then(|v| v.as_f64()).unwrap_or(f64::NAN),
                b.get("epoch").and_then(|v| v.as_u64()).unwrap_or(0),
            )),
        };
        Ok(())
    }

    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        self.ema.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect()
    }

    fn load_tensor_state(&mut self, tensors: Vec<(String, Tensor)>) -> Result<()> {
        self.loaded = Some(tensors);
        Ok(())
    }

    fn validation_weights(&self) -> Option<Vec<(String, Tensor)>> {
        (self.validate && !self.ema.is_empty()).then(|| self.tensor_state())
    }
}
