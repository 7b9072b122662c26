//! `StepRunner`: one optimisation step, with everything a careful PyTorch loop puts around it:
//! autocast, GradScaler, gradient accumulation, clipping, the all-finite gradient guard and the
//! out-of-memory report. The Trainer drives it; a hand-written loop and `torchlight doctor`
//! call it too, so every loop gets the same step.

use crate::batch::Batch;
use crate::error::{Result, TrainError};
use crate::guard::{self, GradCheck};
use crate::task::{Stage, StepOutput, Task};
use crate::trainer::AsDynModule;
use serde::{Deserialize, Serialize};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, Module};
use torchlight_optim::{clip_grad_norm, GradScaler, GradScalerConfig, Optimizer};
use torchlight_tensor::{autocast_if, set_grad_none, AutocastGuard};

/// How a [`StepRunner`] steps. The defaults are a plain fp32 step with the non-finite guard on.
#[derive(Debug, Clone, PartialEq)]
pub struct StepConfig {
    /// Mixed precision: forward and loss under autocast (float16 on CUDA, with a GradScaler;
    /// bfloat16 on the CPU, which needs none). Default off.
    pub amp: bool,
    /// The autocast dtype instead of the default above (e.g. `Kind::BFloat16` on CUDA, which
    /// then needs no GradScaler).
    pub amp_dtype: Option<Kind>,
    /// Micro-batches per optimizer step (gradient accumulation); each loss is divided by it.
    /// Default 1.
    pub accumulation: usize,
    /// Clip the total L2 norm of the gradients to this (after unscaling). Default none.
    pub grad_clip: Option<f64>,
    /// What a step with NaN/Inf gradients does: stop with [`TrainError::NonFinite`] (default)
    /// or skip the step.
    pub on_nonfinite: NonFiniteAction,
    /// Check all gradients for NaN/Inf before each step (one sum per gradient and one host
    /// read, or no read before the step with [`GuardRead::Deferred`]); default on. Not needed under an enabled GradScaler, which skips such steps itself.
    pub guard_nonfinite: bool,
    /// When the guard's verdict is read back to the host; default [`GuardRead::Auto`].
    pub guard_read: GuardRead,
}

/// What the training guard does when a loss or gradient holds NaN or Inf (the recipe's
/// `train.on_nonfinite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonFiniteAction {
    /// Stop with [`TrainError::NonFinite`], the default.
    #[default]
    Stop,
    /// Skip that optimizer step (gradients dropped, weights untouched) and go on.
    Skip,
}

/// When the non-finite guard ([`StepConfig::guard_nonfinite`]) reads its verdict to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuardRead {
    /// [`Deferred`](Self::Deferred) on CUDA, [`Immediate`](Self::Immediate) on the CPU, where
    /// the read costs nothing (the default).
    #[default]
    Auto,
    /// Before every optimizer step: the step is skipped or the run stops before the update.
    /// On CUDA this read waits for the backward pass every step.
    Immediate,
    /// No read before the step: the flag is computed on the device and handed to the fused
    /// optimizer kernels as `found_inf` (as GradScaler does), which skip a bad update on the
    /// device, and it is read at the next optimizer step, when that step's work is already
    /// queued, or by [`StepRunner::settle`] (the Trainer calls it at each epoch's end and
    /// before a mid-epoch checkpoint). The weights and the optimizer state are those of the
    /// immediate read; a skipped step is counted, or the run stops with the same
    /// [`TrainError::NonFinite`], one step later. Optimizers with a non-fused
    /// group read immediately (their non-fused path would read the flag anyway).
    Deferred,
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig {
            amp: false,
            amp_dtype: None,
            accumulation: 1,
            grad_clip: None,
            on_nonfinite: NonFiniteAction::Stop,
            guard_nonfinite: true,
            guard_read: GuardRead::Auto,
        }
    }
}

/// What [`StepRunner::forward_backward`] did with one micro-batch.
#[derive(Debug)]
pub struct MicroStep {
    /// The batch's mean loss, detached (read it only every few steps: reading syncs CUDA).
    pub loss: Tensor,
    /// Samples in the batch.
    pub samples: usize,
    /// Outputs whose metrics can be counted now: this batch's, or none while its window's
    /// step may still be dropped (`on_nonfinite = Skip`).
    pub ready: Vec<StepOutput>,
    /// Whether the accumulation window is full, so an optimizer step is due.
    pub window_full: bool,
}

/// What [`StepRunner::optimizer_step`] did.
#[derive(Debug, Default)]
pub struct OptimizerStep {
    /// Whether the optimizer step was dropped for non-finite gradients (`on_nonfinite = Skip`).
    /// With [`GuardRead::Deferred`] this is known only a step later: it stays false, and the
    /// drop shows in [`StepRunner::skipped_steps`] once read.
    /// A step that an enabled GradScaler skips itself (fp16 overflow) counts as taken: that is
    /// normal mixed-precision behaviour and the scale is lowered for the next one.
    pub skipped: bool,
    /// Outputs whose metrics can be counted now (`on_nonfinite = Skip` only): this window's,
    /// or with [`GuardRead::Deferred`] the previous window's, once its check was read.
    pub ready: Vec<StepOutput>,
}

/// One optimisation step at a time: `forward_backward` on each micro-batch, then
/// `optimizer_step` when the window is full (or at the end of the epoch).
///
/// ```no_run
/// # use torchlight_train::{StepRunner, StepConfig, Classification, Batch};
/// # fn demo(model: &torchlight_nn::ResNet, opt: &mut dyn torchlight_optim::Optimizer,
/// #         batches: Vec<(tch::Tensor, tch::Tensor)>) -> torchlight_train::Result<()> {
/// let task = Classification::new(10);
/// let mut runner = StepRunner::new(StepConfig { accumulation: 2, ..Default::default() }, tch::Device::Cpu)?;
/// for (i, batch) in batches.iter().enumerate() {
///     let micro = runner.forward_backward(model, &task, batch)?;
///     if micro.window_full || i + 1 == batches.len() {
///         runner.optimizer_step(model, opt)?;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct StepRunner {
    config: StepConfig,
    device: Device,
    scaler: GradScaler,
    micro: usize,
    pending: Vec<StepOutput>,
    last_loss: Option<Tensor>,
    last_batch: Vec<Tensor>,
    epoch: u64,
    global_step: u64,
    skipped_steps: u64,
    unread: Option<UnreadCheck>,
    /// Whether an out-of-memory failure searches the largest batch that fits (by halving a
    /// probe); the batch-size finder, which searches itself, turns it off.
    probe_on_oom: bool,
}

/// A deferred non-finite check (see [`GuardRead::Deferred`]) and what its error would report.
#[derive(Debug)]
struct UnreadCheck {
    check: GradCheck,
    /// The optimizer's parameter names, in the order the check saw them.
    names: Vec<String>,
    epoch: u64,
    step: u64,
    lr: f64,
    loss: Option<Tensor>,
    batch: Vec<Tensor>,
    /// The window's outputs held back until the check is read (`on_nonfinite = Skip`).
    outputs: Vec<StepOutput>,
}

impl StepRunner {
    /// A runner for batches on `device`. Fails on `accumulation = 0` or a bad clip value.
    pub fn new(config: StepConfig, device: Device) -> Result<Self> {
        let bad = |setting: &str, value: String, reason: &str| {
            Err(TrainError::InvalidSetting { setting: setting.into(), value, reason: reason.into() })
        };
        if config.accumulation == 0 {
            return bad("accumulation", "0".into(), "must be at least 1");
        }
        if let Some(c) = config.grad_clip {
            if !(c.is_finite() && c > 0.0) {
                return bad("grad_clip", c.to_string(), "must be a positive number");
            }
        }
        let kind = amp_kind(&config, device);
        let scaled = config.amp && device.is_cuda() && kind == Kind::Half;
        let scaler = GradScaler::new(GradScalerConfig::default().with_enabled(scaled))?;
        Ok(StepRunner {
            config,
            device,
            scaler,
            micro: 0,
            pending: Vec::new(),
            last_loss: None,
            last_batch: Vec::new(),
            epoch: 0,
            global_step: 0,
            skipped_steps: 0,
            unread: None,
            probe_on_oom: true,
        })
    }

    /// This runner without the halving search after an out-of-memory failure: the
    /// [`TrainError::OutOfMemory`] comes back at once with `fits: None` (the batch-size
    /// finder's tries, which are that search).
    pub(crate) fn without_oom_probe(mut self) -> Self {
        self.probe_on_oom = false;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &StepConfig {
        &self.config
    }

    /// The device batches must be on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The GradScaler (disabled unless AMP runs in float16 on CUDA).
    pub fn scaler(&self) -> &GradScaler {
        &self.scaler
    }

    /// The GradScaler, to restore its state from a checkpoint.
    pub fn scaler_mut(&mut self) -> &mut GradScaler {
        &mut self.scaler
    }

    /// Optimizer steps taken (windows closed, including skipped ones).
    pub fn global_step(&self) -> u64 {
        self.global_step
    }

    /// Sets the step count (on resume) and the 0-based epoch that errors report.
    pub fn set_position(&mut self, epoch: u64, global_step: u64) {
        self.epoch = epoch;
        self.global_step = global_step;
    }

    /// Steps dropped for non-finite gradients so far.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// Whether micro-batches since the last optimizer step hold gradients.
    pub fn window_open(&self) -> bool {
        self.micro > 0
    }

    /// An autocast guard for this runner's AMP setting (none when AMP is off): evaluation
    /// loops use it so that they see what training sees.
    pub fn autocast(&self) -> Result<Option<AutocastGuard>> {
        if !self.config.amp {
            return Ok(None);
        }
        Ok(Some(autocast_if(true, self.device, amp_kind(&self.config, self.device))?))
    }

    /// Forward (under autocast), loss divided by the accumulation count, and backward through
    /// the GradScaler for one micro-batch already on the device. An out-of-memory failure
    /// becomes [`TrainError::OutOfMemory`] with the largest batch that fits, found by halving a
    /// zero-filled probe shaped like `batch`.
    pub fn forward_backward<M, B, T>(&mut self, model: &M, task: &T, batch: &B) -> Result<MicroStep>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let accumulation = self.config.accumulation as f64;
        let step = catch_unwind(AssertUnwindSafe(|| -> Result<StepOutput> {
            let out = {
                let _amp = self.autocast()?;
                task.step(model, batch, Stage::Train)?
            };
            self.scaler.scale(&(&out.loss / accumulation)).backward();
            Ok(out)
        }));
        let out = match step {
            Ok(out) => out?,
            Err(payload) => {
                let message = guard::panic_message(payload.as_ref());
                if let Some(layer_input) = guard::batch_norm_single_value(&message) {
                    clear_grads(model.as_dyn());
                    self.micro = 0;
                    self.pending.clear();
                    return Err(TrainError::BatchNormSingleValue {
                        batch_size: batch.len(),
                        input_shape: batch.tensors().first().map(|t| t.size()).unwrap_or_default(),
                        layer_input,
                    });
                }
                if !guard::is_out_of_memory(&message) {
                    std::panic::resume_unwind(payload);
                }
                return Err(self.out_of_memory(model, task, batch));
            }
        };
        let out = out.detach();
        self.micro += 1;
        self.last_loss = Some(out.loss.shallow_clone());
        self.last_batch = batch.tensors().into_iter().map(Tensor::shallow_clone).collect();
        let loss = out.loss.shallow_clone();
        let ready = if self.config.on_nonfinite == NonFiniteAction::Skip && self.guards() {
            self.pending.push(out);
            Vec::new()
        } else {
            vec![out]
        };
        Ok(MicroStep {
            loss,
            samples: batch.len(),
            ready,
            window_full: self.micro >= self.config.accumulation,
        })
    }

    fn guards(&self) -> bool {
        self.config.guard_nonfinite && !self.scaler.is_enabled()
    }

    fn out_of_memory<M, B, T>(&mut self, model: &M, task: &T, batch: &B) -> TrainError
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let module = model.as_dyn();
        clear_grads(module);
        let fits = if !self.probe_on_oom {
            None
        } else {
            guard::largest_fitting_batch(batch.len(), |b| {
                let probe = batch.probe(b);
                let ok = catch_unwind(AssertUnwindSafe(|| {
                    let _amp = self.autocast().ok().flatten();
                    if let Ok(out) = task.step(model, &probe, Stage::Train) {
                        out.loss.backward();
                    }
                }))
                .is_ok();
                clear_grads(module);
                ok
            })
        };
        self.micro = 0;
        self.pending.clear();
        TrainError::OutOfMemory {
            device: guard::device_name(self.device),
            batch_size: batch.len(),
            input_shape: batch.tensors().first().map(|t| t.size()).unwrap_or_default(),
            fits,
            searched: self.probe_on_oom,
        }
    }

    /// Whether this step's guard is read later (see [`GuardRead`]).
    fn defers(&self, optimizer: &dyn Optimizer) -> bool {
        let deferred = match self.config.guard_read {
            GuardRead::Auto => self.device.is_cuda(),
            GuardRead::Immediate => false,
            GuardRead::Deferred => true,
        };
        deferred && self.guards() && optimizer.supports_amp_scaling()
    }

    /// Closes the accumulation window: checks the gradients (stop or skip on NaN/Inf), unscales
    /// and clips them when asked, steps the optimizer through the GradScaler, updates the scale
    /// and clears the gradients. With [`GuardRead::Deferred`] it first reads the previous
    /// step's check (see [`settle`](Self::settle)), and this step's check goes to the
    /// optimizer's kernels instead of the host.
    pub fn optimizer_step(
        &mut self,
        model: &dyn Module,
        optimizer: &mut dyn Optimizer,
    ) -> Result<OptimizerStep> {
        self.micro = 0;
        let settled = match self.settle(model, optimizer) {
            Ok(outputs) => outputs,
            Err(e) => {
                optimizer.zero_grad()?;
                self.pending.clear();
                return Err(e);
            }
        };
        let params: Vec<Tensor> =
            optimizer.named_parameters().into_iter().map(|(_, p)| p.shallow_clone()).collect();
        if self.defers(optimizer) {
            let check = GradCheck::new(params.iter())?;
            let device = params.first().map_or(self.device, Tensor::device);
            let found_inf = check.found_inf(device)?;
            if let Some(max_norm) = self.config.grad_clip {
                let _total_norm = clip_grad_norm(params.iter(), max_norm, 2.0, false)?;
            }
            let lr = optimizer.lrs().last().copied().unwrap_or(0.0);
            optimizer.step_amp(None, &found_inf)?;
            optimizer.zero_grad()?;
            self.unread = Some(UnreadCheck {
                check,
                names: optimizer.named_parameters().into_iter().map(|(n, _)| n.to_string()).collect(),
                epoch: self.epoch + 1,
                step: self.global_step + 1,
                lr,
                loss: self.last_loss.as_ref().map(Tensor::shallow_clone),
                batch: self.last_batch.iter().map(Tensor::shallow_clone).collect(),
                outputs: std::mem::take(&mut self.pending),
            });
            self.global_step += 1;
            return Ok(OptimizerStep { skipped: false, ready: settled });
        }
        if self.guards() && !guard::grads_all_finite(params.iter())? {
            if self.config.on_nonfinite == NonFiniteAction::Stop {
                let err = TrainError::NonFinite {
                    epoch: self.epoch + 1,
                    step: self.global_step + 1,
                    lr: optimizer.lrs().last().copied().unwrap_or(0.0),
                    loss: self.last_loss.as_ref().map_or(f64::NAN, |l| l.double_value(&[])),
                    inputs_finite: self
                        .last_batch
                        .iter()
                        .filter(|t| t.is_floating_point())
                        .all(guard::is_all_finite),
                    parameter: guard::first_non_finite_grad(model),
                };
                optimizer.zero_grad()?;
                self.pending.clear();
                return Err(err);
            }
            self.skipped_steps += 1;
            self.global_step += 1;
            self.pending.clear();
            optimizer.zero_grad()?;
            return Ok(OptimizerStep { skipped: true, ready: settled });
        }
        if let Some(max_norm) = self.config.grad_clip {
            self.scaler.unscale_(optimizer)?;
            let _total_norm = clip_grad_norm(params.iter(), max_norm, 2.0, false)?;
        }
        self.scaler.step(optimizer)?;
        self.scaler.update()?;
        optimizer.zero_grad()?;
        self.global_step += 1;
        let mut ready = settled;
        ready.append(&mut self.pending);
        Ok(OptimizerStep { skipped: false, ready })
    }

    /// Reads the deferred non-finite check of the last optimizer step, if one is unread
    /// ([`GuardRead::Deferred`]): counts the step as skipped, or returns the
    /// [`TrainError::NonFinite`] the immediate read would have (`on_nonfinite = Stop`; the
    /// update was already skipped on the device). A skipped step's fresh optimizer state is
    /// dropped ([`Optimizer::forget_skipped_step`]), so `optimizer` (the one that step ran)
    /// ends as the immediate read leaves it, which is PyTorch's after GradScaler skips
    /// `optimizer.step()`. Returns the outputs of that step's window whose metrics can now be
    /// counted. [`optimizer_step`](Self::optimizer_step) calls it first; call it after a
    /// loop's last step ([`step`](Self::step) does with `last`, the Trainer at each epoch's
    /// end) and before saving the optimizer's state. Without an unread check it does nothing.
    pub fn settle(&mut self, model: &dyn Module, optimizer: &mut dyn Optimizer) -> Result<Vec<StepOutput>> {
        let Some(unread) = self.unread.take() else { return Ok(Vec::new()) };
        if unread.check.all_finite()? {
            return Ok(unread.outputs);
        }
        optimizer.forget_skipped_step()?;
        if self.config.on_nonfinite == NonFiniteAction::Skip {
            self.skipped_steps += 1;
            return Ok(Vec::new());
        }
        let bad: Vec<&str> =
            unread.check.non_finite()?.into_iter().map(|i| unread.names[i].as_str()).collect();
        // The first in the model's order, as the immediate read names it.
        let parameter = named_parameters(model)
            .into_iter()
            .map(|(name, _)| name)
            .find(|name| bad.contains(&name.as_str()))
            .or_else(|| bad.first().map(|n| n.to_string()));
        Err(TrainError::NonFinite {
            epoch: unread.epoch,
            step: unread.step,
            lr: unread.lr,
            loss: unread.loss.as_ref().map_or(f64::NAN, |l| l.double_value(&[])),
            inputs_finite: unread.batch.iter().filter(|t| t.is_floating_point()).all(guard::is_all_finite),
            parameter,
        })
    }

    /// `forward_backward`, then `optimizer_step` when the window is full or `last` is set (the
    /// epoch's last batch): the whole step for a hand-written loop. Returns the batch's loss
    /// (detached) and the outputs whose metrics can be counted now.
    pub fn step<M, B, T>(
        &mut self,
        model: &M,
        task: &T,
        batch: &B,
        optimizer: &mut dyn Optimizer,
        last: bool,
    ) -> Result<(Tensor, Vec<StepOutput>)>
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let micro = self.forward_backward(model, task, batch)?;
        let mut ready = micro.ready;
        if micro.window_full || last {
            ready.extend(self.optimizer_step(model.as_dyn(), optimizer)?.ready);
        }
        if last {
            ready.extend(self.settle(model.as_dyn(), optimizer)?);
        }
        Ok((micro.loss, ready))
    }
}

fn amp_kind(config: &StepConfig, device: Device) -> Kind {
    config.amp_dtype.unwrap_or(if device.is_cuda() { Kind::Half } else { Kind::BFloat16 })
}

fn clear_grads(model: &dyn Module) {
    for (_, p) in named_parameters(model) {
        let _ = set_grad_none(&p);
    }
}
