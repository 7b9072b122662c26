//! Adam, with optional decoupled weight decay and AMSGrad (`torch.optim.Adam`); AdamW builds on it.

use crate::core::{AmpArgs, Hyperparameters, OptimizerCore, SavedState, UpdateRule};
use crate::error::{OptimError, Result};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};
use torchlight_tensor::{fused_adam_, FusedAdamArgs};

/// Adam's hyperparameters, with `torch.optim.Adam`'s defaults: `lr = 1e-3`,
/// `betas = (0.9, 0.999)`, `eps = 1e-8`, `weight_decay = 0`, `amsgrad = false`,
/// `maximize = false`, `decoupled_weight_decay = false`. [`AdamConfig::adamw`] gives
/// `torch.optim.AdamW`'s (`weight_decay = 1e-2`, decoupled).
///
/// `fused` (default `true`) runs PyTorch's `_fused_adam_` / `_fused_adamw_` kernels, one call
/// per device and dtype; `false` runs the plain-op reference, which follows PyTorch's
/// single-tensor path op for op. PyTorch itself defaults to its foreach path on CUDA and the
/// single-tensor path on the CPU; the fused kernels compute the same update, faster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// Weight decay: an L2 penalty added to the gradient, or with `decoupled_weight_decay`
    /// AdamW's `p *= 1 - lr * weight_decay`.
    pub weight_decay: f64,
    /// AMSGrad: divide by the running maximum of the second moment.
    pub amsgrad: bool,
    /// Maximise the objective instead of minimising it.
    pub maximize: bool,
    /// AdamW's decoupled weight decay.
    pub decoupled_weight_decay: bool,
    /// Use the fused kernels.
    pub fused: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
            fused: true,
        }
    }
}

impl AdamConfig {
    /// Adam's defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        AdamConfig { lr, ..Self::default() }
    }
    /// `torch.optim.AdamW`'s defaults: Adam's with `weight_decay = 1e-2`, decoupled.
    pub fn adamw() -> Self {
        AdamConfig { weight_decay: 1e-2, decoupled_weight_decay: true, ..Self::default() }
    }
    /// Sets `lr`.
    pub fn with_lr(self, lr: f64) -> Self {
        AdamConfig { lr, ..self }
    }
    /// Sets `betas`.
    pub fn with_betas(self, beta1: f64, beta2: f64) -> Self {
        AdamConfig { betas: (beta1, beta2), ..self }
    }
    /// Sets `eps`.
    pub fn with_eps(self, eps: f64) -> Self {
        AdamConfig { eps, ..self }
    }
    /// Sets `weight_decay`.
    pub fn with_weight_decay(self, weight_decay: f64) -> Self {
        AdamConfig { weight_decay, ..self }
    }
    /// Sets `amsgrad`.
    pub fn with_amsgrad(self, amsgrad: bool) -> Self {
        AdamConfig { amsgrad, ..self }
    }
    /// Sets `maximize`.
    pub fn with_maximize(self, maximize: bool) -> Self {
        AdamConfig { maximize, ..self }
    }
    /// Sets `decoupled_weight_decay`.
    pub fn with_decoupled_weight_decay(self, decoupled_weight_decay: bool) -> Self {
        AdamConfig { decoupled_weight_decay, ..self }
    }
    /// Sets `fused`.
    pub fn with_fused(self, fused: bool) -> Self {
        AdamConfig { fused, ..self }
    }
}

impl Hyperparameters for AdamConfig {
    const KIND: &'static str = "Adam";

    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    /// `betas.0`.
    fn momentum(&self) -> f64 {
        self.betas.0
    }
    fn set_momentum(&mut self, momentum: f64) {
        self.betas.0 = momentum;
    }
    fn fused(&self) -> bool {
        self.fused
    }

    /// PyTorch's checks, naming the group and field at fault.
    fn validate(&self, owner: &str) -> Result<()> {
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(OptimError::invalid(owner, "lr", self.lr, "must be >= 0"));
        }
        if self.eps.is_nan() || self.eps < 0.0 {
            return Err(OptimError::invalid(owner, "eps", self.eps, "must be >= 0"));
        }
        if !(0.0..1.0).contains(&self.betas.0) {
            return Err(OptimError::invalid(owner, "betas.0", self.betas.0, "must be in [0, 1)"));
        }
        if !(0.0..1.0).contains(&self.betas.1) {
            return Err(OptimError::invalid(owner, "betas.1", self.betas.1, "must be in [0, 1)"));
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return Err(OptimError::invalid(owner, "weight_decay", self.weight_decay, "must be >= 0"));
        }
        Ok(())
    }
}

/// A parameter's Adam state, as in PyTorch: `step` (float32 scalar), `exp_avg`,
/// `exp_avg_sq` and with AMSGrad `max_exp_avg_sq`.
#[derive(Debug)]
pub struct AdamState {
    /// Steps taken, a float32 scalar: on the CPU for the plain path (read there without a
    /// device sync), on the parameter's device for the fused kernels, as in PyTorch.
    pub step: Tensor,
    /// First moment estimate.
    pub exp_avg: Tensor,
    /// Second moment estimate.
    pub exp_avg_sq: Tensor,
    /// Running maximum of the second moment, with AMSGrad.
    pub max_exp_avg_sq: Option<Tensor>,
}

impl AdamState {
    fn zeros(p: &Tensor, step_device: Device, amsgrad: bool) -> Self {
        AdamState {
            step: Tensor::zeros([], (Kind::Float, step_device)),
            exp_avg: p.zeros_like(),
            exp_avg_sq: p.zeros_like(),
            max_exp_avg_sq: amsgrad.then(|| p.zeros_like()),
        }
    }
}

/// Moves a step counter where it is needed (once, after a load or a switch of path).
fn step_on(step: &mut Tensor, device: Device) {
    if step.device() != device {
        *step = step.to_device(device);
    }
}

/// Adam's per-parameter math, for [`OptimizerCore`]: [`Adam`] is `AdamRule<false>`,
/// [`AdamW`](crate::AdamW) `AdamRule<true>`, which forces decoupled weight decay on and saves
/// its state as `AdamW`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdamRule<const ADAMW: bool>;

/// `torch.optim.Adam` over named parameter groups.
///
/// For each parameter with a gradient `g` (negated when `maximize`), at step `t`:
/// weight decay (`g += wd * p`, or decoupled `p *= 1 - lr * wd`), `m = lerp(m, g, 1 - beta1)`,
/// `v = beta2 * v + (1 - beta2) * g * g`, with AMSGrad `v_max = max(v_max, v)`, then
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`. Each parameter counts
/// its own steps, so one unfrozen late starts its bias correction afresh, as in PyTorch.
/// State tensors: `"<param>.step"`, `"<param>.exp_avg"`, `"<param>.exp_avg_sq"`,
/// `"<param>.max_exp_avg_sq"`.
pub type Adam = OptimizerCore<AdamRule<false>>;

impl<const ADAMW: bool> UpdateRule for AdamRule<ADAMW> {
    type Config = AdamConfig;
    type State = AdamState;

    fn name(&self) -> &str {
        if ADAMW {
            "AdamW"
        } else {
            "Adam"
        }
    }

    fn prepare(&self, config: AdamConfig) -> AdamConfig {
        if ADAMW {
            AdamConfig { decoupled_weight_decay: true, ..config }
        } else {
            config
        }
    }

    /// The readable reference: `torch.optim.adam._single_tensor_adam`, op for op.
    fn step(&self, cfg: &AdamConfig, p: &Tensor, grad: &Tensor, state: &mut Option<AdamState>) -> Result<()> {
        let (beta1, beta2) = cfg.betas;
        let st = state.get_or_insert_with(|| AdamState::zeros(p, Device::Cpu, cfg.amsgrad));
        step_on(&mut st.step, Device::Cpu);
        let _ = st.step.g_add_scalar_(1.0);
        // A CPU scalar: reading it is no device sync.
        let step = st.step.double_value(&[]);
        let mut p = p.shallow_clone();
        let mut grad = if cfg.maximize { -grad } else { grad.shallow_clone() };
        if cfg.weight_decay != 0.0 {
            if cfg.decoupled_weight_decay {
                let _ = p.g_mul_scalar_(1.0 - cfg.lr * cfg.weight_decay);
            } else {
                grad = &grad + &p * cfg.weight_decay;
            }
        }
        let _ = st.exp_avg.lerp_(&grad, 1.0 - beta1);
        let _ = st.exp_avg_sq.g_mul_scalar_(beta2).g_add_(&(&grad * (1.0 - beta2) * &grad));
        let bias_correction1 = 1.0 - beta1.powf(step);
        let bias_correction2 = 1.0 - beta2.powf(step);
        let step_size = cfg.lr / bias_correction1;
        let bias_correction2_sqrt = bias_correction2.sqrt();
        let second = if cfg.amsgrad {
            let v = &st.exp_avg_sq;
            let vmax = st.max_exp_avg_sq.get_or_insert_with(|| v.zeros_like());
            let _ = vmax.maximum_out(vmax, v);
            vmax.shallow_clone()
        } else {
            st.exp_avg_sq.shallow_clone()
        };
        let denom = second.sqrt() / bias_correction2_sqrt + cfg.eps;
        let _ = p.g_add_(&(&st.exp_avg * -step_size / denom));
        Ok(())
    }

    /// `torch.optim.adam._fused_adam` for one device and dtype: one kernel call.
    fn fused_step(
        &self,
        cfg: &AdamConfig,
        params: &[&Tensor],
        grads: &[&Tensor],
        states: &mut [&mut Option<AdamState>],
        amp: AmpArgs<'_>,
    ) -> Result<()> {
        let args = FusedAdamArgs {
            lr: cfg.lr,
            beta1: cfg.betas.0,
            beta2: cfg.betas.1,
            weight_decay: cfg.weight_decay,
            eps: cfg.eps,
            amsgrad: cfg.amsgrad,
            maximize: cfg.maximize,
            decoupled: cfg.decoupled_weight_decay,
        };
        for (p, slot) in params.iter().zip(states.iter_mut()) {
            let st = slot.get_or_insert_with(|| AdamState::zeros(p, p.device(), cfg.amsgrad));
            step_on(&mut st.step, p.device());
            if cfg.amsgrad && st.max_exp_avg_sq.is_none() {
                st.max_exp_avg_sq = Some(p.zeros_like());
            }
        }
        let states: Vec<&AdamState> = states.iter().filter_map(|s| s.as_ref()).collect();
        let ms: Vec<&Tensor> = states.iter().map(|s| &s.exp_avg).collect();
        let vs: Vec<&Tensor> = states.iter().map(|s| &s.exp_avg_sq).collect();
        let vmaxs: Vec<&Tensor> = if cfg.amsgrad {
            states.iter().filter_map(|s| s.max_exp_avg_sq.as_ref()).collect()
        } else {
            Vec::new()
        };
        let steps: Vec<&Tensor> = states.iter().map(|s| &s.step).collect();
        fused_adam_(params, grads, &ms, &vs, &vmaxs, &steps, &args, amp.grad_scale, amp.found_inf)?;
        Ok(())
    }

    fn save_state(&self, st: &AdamState, out: &mut Vec<(&'static str, Tensor)>) {
        out.push(("step", st.step.shallow_clone()));
        out.push(("exp_avg", st.exp_avg.shallow_clone()));
        out.push(("exp_avg_sq", st.exp_avg_sq.shallow_clone()));
        if let Some(v) = &st.max_exp_avg_sq {
            out.push(("max_exp_avg_sq", v.shallow_clone()));
        }
    }

    fn load_state(
        &self,
        cfg: &AdamConfig,
        p: &Tensor,
        saved: &mut SavedState<'_, '_>,
    ) -> Result<Option<AdamState>> {
        // Steps stay float32; on the CPU for the plain path, on the device for fused.
        let step_device = if cfg.fused { p.device() } else { Device::Cpu };
        let Some(step) = saved.copy("step", step_device, Kind::Float) else { return Ok(None) };
        Ok(Some(AdamState {
            step: step.reshape(Vec::<i64>::new()),
            exp_avg: saved.like("exp_avg", p)?,
            exp_avg_sq: saved.like("exp_avg_sq", p)?,
            max_exp_avg_sq: match saved.get("max_exp_avg_sq") {
                Some(_) => Some(saved.like("max_exp_avg_sq", p)?),
                None => None,
            },
        }))
    }
}
