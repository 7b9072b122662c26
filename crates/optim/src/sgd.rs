//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (`torch.optim.SGD`).

use crate::core::{AmpArgs, Hyperparameters, OptimizerCore, SavedState, UpdateRule};
use crate::error::{OptimError, Result};
use serde::{Deserialize, Serialize};
use tch::Tensor;
use torchlight_tensor::{add_scaled_, fused_sgd_, FusedSgdArgs};

/// SGD's hyperparameters, with `torch.optim.SGD`'s defaults: `lr = 1e-3`, `momentum = 0`,
/// `dampening = 0`, `weight_decay = 0`, `nesterov = false`, `maximize = false`.
///
/// `fused` (default `true`) runs PyTorch's `_fused_sgd_` kernel, one call per device and
/// dtype; `false` runs the plain-op reference, which follows `torch.optim.SGD`'s
/// single-tensor path op for op. PyTorch itself defaults to its foreach path on CUDA and the
/// single-tensor path on the CPU; the fused kernel computes the same update.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 keeps no state.
    pub momentum: f64,
    /// Dampening of the gradient added to the momentum buffer.
    pub dampening: f64,
    /// L2 penalty added to the gradient (`grad + weight_decay * param`).
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
    /// Maximise the objective instead of minimising it.
    pub maximize: bool,
    /// Use the fused kernel.
    pub fused: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
            fused: true,
        }
    }
}

impl SgdConfig {
    /// The defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        SgdConfig { lr, ..Self::default() }
    }
    /// Sets `lr`.
    pub fn with_lr(self, lr: f64) -> Self {
        SgdConfig { lr, ..self }
    }
    /// Sets `momentum`.
    pub fn with_momentum(self, momentum: f64) -> Self {
        SgdConfig { momentum, ..self }
    }
    /// Sets `dampening`.
    pub fn with_dampening(self, dampening: f64) -> Self {
        SgdConfig { dampening, ..self }
    }
    /// Sets `weight_decay`.
    pub fn with_weight_decay(self, weight_decay: f64) -> Self {
        SgdConfig { weight_decay, ..self }
    }
    /// Sets `nesterov`.
    pub fn with_nesterov(self, nesterov: bool) -> Self {
        SgdConfig { nesterov, ..self }
    }
    /// Sets `maximize`.
    pub fn with_maximize(self, maximize: bool) -> Self {
        SgdConfig { maximize, ..self }
    }
    /// Sets `fused`.
    pub fn with_fused(self, fused: bool) -> Self {
        SgdConfig { fused, ..self }
    }
}

impl Hyperparameters for SgdConfig {
    const KIND: &'static str = "SGD";

    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn momentum(&self) -> f64 {
        self.momentum
    }
    fn set_momentum(&mut self, momentum: f64) {
        self.momentum = momentum;
    }
    fn fused(&self) -> bool {
        self.fused
    }

    /// PyTorch's checks, naming the group and field at fault.
    fn validate(&self, owner: &str) -> Result<()> {
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(OptimError::invalid(owner, "lr", self.lr, "must be >= 0"));
        }
        if self.momentum.is_nan() || self.momentum < 0.0 {
            return Err(OptimError::invalid(owner, "momentum", self.momentum, "must be >= 0"));
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return Err(OptimError::invalid(owner, "weight_decay", self.weight_decay, "must be >= 0"));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(OptimError::invalid(
                owner,
                "nesterov",
                1.0,
                "Nesterov momentum requires momentum > 0 and dampening = 0",
            ));
        }
        Ok(())
    }
}

/// SGD's per-parameter math, for [`OptimizerCore`]; see [`Sgd`]. The state of a parameter is
/// its momentum buffer (none without momentum).
#[derive(Debug, Clone, Copy, Default)]
pub struct SgdRule;

/// `torch.optim.SGD` over named parameter groups.
///
/// For each parameter with a gradient `g` (negated when `maximize`):
/// `g += weight_decay * p`; with momentum, `buf = g` on the parameter's first step and
/// `buf = momentum * buf + (1 - dampening) * g` after, then `g = g + momentum * buf`
/// (Nesterov) or `g = buf`; finally `p -= lr * g`. The momentum buffer is the only state,
/// saved as `"<param>.momentum_buffer"`.
pub type Sgd = OptimizerCore<SgdRule>;

impl UpdateRule for SgdRule {
    type Config = SgdConfig;
    type State = Tensor;

    fn name(&self) -> &str {
        "SGD"
    }

    /// The readable reference: `torch.optim.sgd._single_tensor_sgd`, op for op.
    fn step(&self, cfg: &SgdConfig, p: &Tensor, grad: &Tensor, buffer: &mut Option<Tensor>) -> Result<()> {
        let mut d_p = if cfg.maximize { -grad } else { grad.shallow_clone() };
        if cfg.weight_decay != 0.0 {
            // grad.add(param, alpha=weight_decay): out of place.
            d_p = d_p.copy();
            add_scaled_(&d_p, p, cfg.weight_decay)?;
        }
        if cfg.momentum != 0.0 {
            let buf = match buffer {
                None => buffer.insert(d_p.detach().copy()).shallow_clone(),
                Some(buf) => {
                    let _ = buf.g_mul_scalar_(cfg.momentum);
                    add_scaled_(buf, &d_p, 1.0 - cfg.dampening)?;
                    buf.shallow_clone()
                }
            };
            d_p = if cfg.nesterov {
                let nesterov = d_p.copy();
                add_scaled_(&nesterov, &buf, cfg.momentum)?;
                nesterov
            } else {
                buf
            };
        }
        add_scaled_(p, &d_p, -cfg.lr)?;
        Ok(())
    }

    /// `torch.optim.sgd._fused_sgd` for one device and dtype: one kernel call per
    /// first-step / later-step split (a parameter unfrozen later starts its buffer then).
    fn fused_step(
        &self,
        cfg: &SgdConfig,
        params: &[&Tensor],
        grads: &[&Tensor],
        buffers: &mut [&mut Option<Tensor>],
        amp: AmpArgs<'_>,
    ) -> Result<()> {
        let args = FusedSgdArgs {
            lr: cfg.lr,
            momentum: cfg.momentum,
            dampening: cfg.dampening,
            weight_decay: cfg.weight_decay,
            nesterov: cfg.nesterov,
            maximize: cfg.maximize,
        };
        if cfg.momentum == 0.0 {
            return Ok(fused_sgd_(params, grads, &[], &args, false, amp.grad_scale, amp.found_inf)?);
        }
        let (old, new): (Vec<usize>, Vec<usize>) = (0..params.len()).partition(|&i| buffers[i].is_some());
        for &i in &new {
            // The kernel sets a first step's buffer to the gradient; zeros (not `empty_like`,
            // as PyTorch) keep a first step skipped on the device through `found_inf` from
            // leaving garbage behind: the next step then starts from a zero buffer.
            *buffers[i] = Some(params[i].zeros_like());
        }
        for (part, first) in [(old, false), (new, true)] {
            if part.is_empty() {
                continue;
            }
            let ps: Vec<&Tensor> = part.iter().map(|&i| params[i]).collect();
            let gs: Vec<&Tensor> = part.iter().map(|&i| grads[i]).collect();
            let bufs: Vec<&Tensor> = part.iter().filter_map(|&i| buffers[i].as_ref()).collect();
            fused_sgd_(&ps, &gs, &bufs, &args, first, amp.grad_scale, amp.found_inf)?;
        }
        Ok(())
    }

    fn save_state(&self, buffer: &Tensor, out: &mut Vec<(&'static str, Tensor)>) {
        out.push(("momentum_buffer", buffer.shallow_clone()));
    }

    fn load_state(
        &self,
        _: &SgdConfig,
        p: &Tensor,
        saved: &mut SavedState<'_, '_>,
    ) -> Result<Option<Tensor>> {
        match saved.get("momentum_buffer") {
            Some(_) => Ok(Some(saved.like("momentum_buffer", p)?)),
            None => Ok(None),
        }
    }
}
