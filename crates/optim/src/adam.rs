//! Adam, with optional decoupled weight decay and AMSGrad (`torch.optim.Adam`); AdamW builds on it.

use crate::error::{OptimError, Result};
use crate::optimizer::{
    buckets, check_count, check_groups, check_unique, copy_to, found_inf_is_set, step_on, unscale_grads,
    zero_grad_all, GroupConfig, GroupState, Optimizer, OptimizerMeta, OptimizerState, StateTensors,
};
use crate::param_group::ParamGroup;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

    /// PyTorch's checks, naming the group and field at fault.
    pub(crate) fn validate(&self, owner: &str, group: usize) -> Result<()> {
        let owner = || format!("{owner} param group {group}");
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(OptimError::invalid(owner(), "lr", self.lr, "must be >= 0"));
        }
        if self.eps.is_nan() || self.eps < 0.0 {
            return Err(OptimError::invalid(owner(), "eps", self.eps, "must be >= 0"));
        }
        if !(0.0..1.0).contains(&self.betas.0) {
            return Err(OptimError::invalid(owner(), "betas.0", self.betas.0, "must be in [0, 1)"));
        }
        if !(0.0..1.0).contains(&self.betas.1) {
            return Err(OptimError::invalid(owner(), "betas.1", self.betas.1, "must be in [0, 1)"));
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return Err(OptimError::invalid(owner(), "weight_decay", self.weight_decay, "must be >= 0"));
        }
        Ok(())
    }
}

/// A parameter's Adam state, as in PyTorch: `step` (float32 scalar), `exp_avg`,
/// `exp_avg_sq` and with AMSGrad `max_exp_avg_sq`.
#[derive(Debug)]
struct AdamState {
    step: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Option<Tensor>,
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

/// `torch.optim.Adam` over named parameter groups.
///
/// For each parameter with a gradient `g` (negated when `maximize`), at step `t`:
/// weight decay (`g += wd * p`, or decoupled `p *= 1 - lr * wd`), `m = lerp(m, g, 1 - beta1)`,
/// `v = beta2 * v + (1 - beta2) * g * g`, with AMSGrad `v_max = max(v_max, v)`, then
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`. Each parameter counts
/// its own steps, so one unfrozen late starts its bias correction afresh, as in PyTorch.
/// State tensors: `"<param>.step"`, `"<param>.exp_avg"`, `"<param>.exp_avg_sq"`,
/// `"<param>.max_exp_avg_sq"`.
#[derive(Debug)]
pub struct Adam {
    name: &'static str,
    groups: Vec<ParamGroup<AdamConfig>>,
    state: HashMap<String, AdamState>,
}

impl Adam {
    /// An Adam optimizer over `groups`; fails on an invalid hyperparameter or a repeated name.
    pub fn new(groups: Vec<ParamGroup<AdamConfig>>) -> Result<Self> {
        Self::named("Adam", groups)
    }

    pub(crate) fn named(name: &'static str, groups: Vec<ParamGroup<AdamConfig>>) -> Result<Self> {
        for (i, g) in groups.iter().enumerate() {
            g.config.validate(name, i)?;
        }
        check_unique(&groups)?;
        Ok(Adam { name, groups, state: HashMap::new() })
    }

    /// The param groups.
    pub fn groups(&self) -> &[ParamGroup<AdamConfig>] {
        &self.groups
    }

    /// The config of group `group`, for changing a hyperparameter mid-run.
    ///
    /// # Panics
    /// If `group` is out of range.
    pub fn config_mut(&mut self, group: usize) -> &mut AdamConfig {
        &mut self.groups[group].config
    }

    fn step_impl(&mut self, amp: Option<(Option<&Tensor>, &Tensor)>) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let mut skip_plain: Option<bool> = None;
        for gi in 0..self.groups.len() {
            let cfg = self.groups[gi].config;
            let live: Vec<(usize, Tensor)> = self.groups[gi]
                .params
                .iter()
                .enumerate()
                .map(|(i, (_, p))| (i, p.grad()))
                .filter(|(_, g)| g.defined())
                .collect();
            if live.is_empty() {
                continue;
            }
            if cfg.fused {
                self.fused_group(gi, &live, amp)?;
            } else {
                if let Some((scale, found_inf)) = amp {
                    let skip = match skip_plain {
                        Some(skip) => skip,
                        None => *skip_plain.insert(found_inf_is_set(found_inf)?),
                    };
                    if skip {
                        continue;
                    }
                    if let Some(scale) = scale {
                        unscale_grads(live.iter().map(|(_, g)| g), scale)?;
                    }
                }
                self.plain_group(gi, &live);
            }
        }
        Ok(())
    }

    /// The readable reference: `torch.optim.adam._single_tensor_adam`, op for op.
    fn plain_group(&mut self, gi: usize, live: &[(usize, Tensor)]) {
        let cfg = self.groups[gi].config;
        let (beta1, beta2) = cfg.betas;
        for (i, grad) in live {
            let (name, p) = &self.groups[gi].params[*i];
            let st = self
                .state
                .entry(name.clone())
                .or_insert_with(|| AdamState::zeros(p, Device::Cpu, cfg.amsgrad));
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
        }
    }

    /// `torch.optim.adam._fused_adam`: one kernel call per device and dtype.
    fn fused_group(
        &mut self,
        gi: usize,
        live: &[(usize, Tensor)],
        amp: Option<(Option<&Tensor>, &Tensor)>,
    ) -> Result<()> {
        let cfg = self.groups[gi].config;
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
        let params = &self.groups[gi].params;
        for (i, _) in live {
            let (name, p) = &params[*i];
            let st = self
                .state
                .entry(name.clone())
                .or_insert_with(|| AdamState::zeros(p, p.device(), cfg.amsgrad));
            step_on(&mut st.step, p.device());
            if cfg.amsgrad && st.max_exp_avg_sq.is_none() {
                st.max_exp_avg_sq = Some(p.zeros_like());
            }
        }
        let keys: Vec<_> = live.iter().map(|(i, _)| (params[*i].1.device(), params[*i].1.kind())).collect();
        let (grad_scale, found_inf) = match amp {
            Some((s, f)) => (s, Some(f)),
            None => (None, None),
        };
        for bucket in buckets(&keys) {
            let device = keys[bucket[0]].0;
            let scale = grad_scale.map(|s| s.to_device(device));
            let inf = found_inf.map(|f| f.to_device(device));
            let names: Vec<&String> = bucket.iter().map(|&b| &params[live[b].0].0).collect();
            let states: Vec<&AdamState> = names.iter().map(|n| &self.state[*n]).collect();
            let ps: Vec<&Tensor> = bucket.iter().map(|&b| &params[live[b].0].1).collect();
            let gs: Vec<&Tensor> = bucket.iter().map(|&b| &live[b].1).collect();
            let ms: Vec<&Tensor> = states.iter().map(|s| &s.exp_avg).collect();
            let vs: Vec<&Tensor> = states.iter().map(|s| &s.exp_avg_sq).collect();
            let vmaxs: Vec<&Tensor> = if cfg.amsgrad {
                states.iter().filter_map(|s| s.max_exp_avg_sq.as_ref()).collect()
            } else {
                Vec::new()
            };
            let steps: Vec<&Tensor> = states.iter().map(|s| &s.step).collect();
            fused_adam_(&ps, &gs, &ms, &vs, &vmaxs, &steps, &args, scale.as_ref(), inf.as_ref())?;
        }
        Ok(())
    }

    pub(crate) fn kind_name(&self) -> &'static str {
        self.name
    }
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        self.step_impl(None)
    }

    fn step_amp(&mut self, grad_scale: Option<&Tensor>, found_inf: &Tensor) -> Result<()> {
        self.step_impl(Some((grad_scale, found_inf)))
    }

    fn supports_amp_scaling(&self) -> bool {
        self.groups.iter().all(|g| g.config.fused)
    }

    fn zero_grad(&mut self) -> Result<()> {
        zero_grad_all(self.groups.iter().flat_map(|g| g.params.iter().map(|(_, p)| p)))
    }

    fn named_parameters(&self) -> Vec<(&str, &Tensor)> {
        self.groups.iter().flat_map(|g| g.params.iter().map(|(n, p)| (n.as_str(), p))).collect()
    }

    fn lrs(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.config.lr).collect()
    }

    fn set_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        check_count("lrs", self.groups.len(), lrs.len())?;
        self.groups.iter_mut().zip(lrs).for_each(|(g, lr)| g.config.lr = *lr);
        Ok(())
    }

    fn momenta(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.config.betas.0).collect()
    }

    fn set_momenta(&mut self, momenta: &[f64]) -> Result<()> {
        check_count("momenta", self.groups.len(), momenta.len())?;
        self.groups.iter_mut().zip(momenta).for_each(|(g, m)| g.config.betas.0 = *m);
        Ok(())
    }

    fn state_dict(&self) -> OptimizerState {
        let groups = self
            .groups
            .iter()
            .map(|g| GroupState {
                params: g.params.iter().map(|(n, _)| n.clone()).collect(),
                config: GroupConfig::Adam(g.config),
            })
            .collect();
        let mut tensors = Vec::new();
        for (name, _) in self.groups.iter().flat_map(|g| &g.params) {
            if let Some(st) = self.state.get(name) {
                tensors.push((format!("{name}.step"), st.step.shallow_clone()));
                tensors.push((format!("{name}.exp_avg"), st.exp_avg.shallow_clone()));
                tensors.push((format!("{name}.exp_avg_sq"), st.exp_avg_sq.shallow_clone()));
                if let Some(v) = &st.max_exp_avg_sq {
                    tensors.push((format!("{name}.max_exp_avg_sq"), v.shallow_clone()));
                }
            }
        }
        OptimizerState { meta: OptimizerMeta { optimizer: self.name.to_string(), groups }, tensors }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        check_groups(&self.groups, &state.meta, self.name)?;
        let mut configs = Vec::new();
        for (gi, saved) in state.meta.groups.iter().enumerate() {
            match &saved.config {
                GroupConfig::Adam(c) => {
                    c.validate(self.name, gi)?;
                    configs.push(*c);
                }
                other => {
                    return Err(OptimError::KindMismatch {
                        expected: self.name.to_string(),
                        found: format!("{other:?}"),
                    })
                }
            }
        }
        let mut tensors = StateTensors::new(&state.tensors);
        let mut loaded = HashMap::new();
        for (group, cfg) in self.groups.iter().zip(&configs) {
            for (name, p) in &group.params {
                let Some(step) = tensors.get(name, "step") else { continue };
                // Steps stay float32; on the CPU for the plain path, on the device for fused.
                let step_device = if cfg.fused { p.device() } else { Device::Cpu };
                let st = AdamState {
                    step: copy_to(&step.reshape(Vec::<i64>::new()), step_device, Kind::Float),
                    exp_avg: tensors.required_like(name, "exp_avg", p)?,
                    exp_avg_sq: tensors.required_like(name, "exp_avg_sq", p)?,
                    max_exp_avg_sq: match tensors.get(name, "max_exp_avg_sq") {
                        Some(_) => Some(tensors.required_like(name, "max_exp_avg_sq", p)?),
                        None => None,
                    },
                };
                loaded.insert(name.clone(), st);
            }
        }
        tensors.finish()?;
        self.groups.iter_mut().zip(configs).for_each(|(g, c)| g.config = c);
        self.state = loaded;
        Ok(())
    }
}
