//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (`torch.optim.SGD`).

use crate::error::{OptimError, Result};
use crate::optimizer::{
    buckets, check_count, check_groups, check_unique, found_inf_is_set, unscale_grads, zero_grad_all,
    GroupConfig, GroupState, Optimizer, OptimizerMeta, OptimizerState, StateTensors,
};
use crate::param_group::ParamGroup;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

    /// PyTorch's checks, naming the group and field at fault.
    fn validate(&self, group: usize) -> Result<()> {
        let owner = || format!("SGD param group {group}");
        if self.lr.is_nan() || self.lr < 0.0 {
            return Err(OptimError::invalid(owner(), "lr", self.lr, "must be >= 0"));
        }
        if self.momentum.is_nan() || self.momentum < 0.0 {
            return Err(OptimError::invalid(owner(), "momentum", self.momentum, "must be >= 0"));
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return Err(OptimError::invalid(owner(), "weight_decay", self.weight_decay, "must be >= 0"));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(OptimError::invalid(
                owner(),
                "nesterov",
                1.0,
                "Nesterov momentum requires momentum > 0 and dampening = 0",
            ));
        }
        Ok(())
    }
}

/// `torch.optim.SGD` over named parameter groups.
///
/// For each parameter with a gradient `g` (negated when `maximize`):
/// `g += weight_decay * p`; with momentum, `buf = g` on the parameter's first step and
/// `buf = momentum * buf + (1 - dampening) * g` after, then `g = g + momentum * buf`
/// (Nesterov) or `g = buf`; finally `p -= lr * g`. The momentum buffer is the only state,
/// saved as `"<param>.momentum_buffer"`.
#[derive(Debug)]
pub struct Sgd {
    groups: Vec<ParamGroup<SgdConfig>>,
    momentum_buffers: HashMap<String, Tensor>,
}

impl Sgd {
    /// An SGD optimizer over `groups`; fails on an invalid hyperparameter or a repeated name.
    pub fn new(groups: Vec<ParamGroup<SgdConfig>>) -> Result<Self> {
        for (i, g) in groups.iter().enumerate() {
            g.config.validate(i)?;
        }
        check_unique(&groups)?;
        Ok(Sgd { groups, momentum_buffers: HashMap::new() })
    }

    /// The param groups.
    pub fn groups(&self) -> &[ParamGroup<SgdConfig>] {
        &self.groups
    }

    /// The config of group `group`, for changing a hyperparameter mid-run
    /// (`optimizer.param_groups[i]["weight_decay"] = ...`).
    ///
    /// # Panics
    /// If `group` is out of range.
    pub fn config_mut(&mut self, group: usize) -> &mut SgdConfig {
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
                self.plain_group(gi, &live)?;
            }
        }
        Ok(())
    }

    /// The readable reference: `torch.optim.sgd._single_tensor_sgd`, op for op.
    fn plain_group(&mut self, gi: usize, live: &[(usize, Tensor)]) -> Result<()> {
        let cfg = self.groups[gi].config;
        for (i, grad) in live {
            let (name, p) = &self.groups[gi].params[*i];
            let mut d_p = if cfg.maximize { -grad } else { grad.shallow_clone() };
            if cfg.weight_decay != 0.0 {
                // grad.add(param, alpha=weight_decay): out of place.
                d_p = d_p.copy();
                add_scaled_(&d_p, p, cfg.weight_decay)?;
            }
            if cfg.momentum != 0.0 {
                let buf = match self.momentum_buffers.get_mut(name) {
                    None => {
                        let buf = d_p.detach().copy();
                        self.momentum_buffers.insert(name.clone(), buf.shallow_clone());
                        buf
                    }
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
        }
        Ok(())
    }

    /// `torch.optim.sgd._fused_sgd`: one kernel call per device and dtype and per
    /// first-step / later-step split (a parameter unfrozen later starts its buffer then).
    fn fused_group(
        &mut self,
        gi: usize,
        live: &[(usize, Tensor)],
        amp: Option<(Option<&Tensor>, &Tensor)>,
    ) -> Result<()> {
        let cfg = self.groups[gi].config;
        let args = FusedSgdArgs {
            lr: cfg.lr,
            momentum: cfg.momentum,
            dampening: cfg.dampening,
            weight_decay: cfg.weight_decay,
            nesterov: cfg.nesterov,
            maximize: cfg.maximize,
        };
        let params = &self.groups[gi].params;
        let keys: Vec<_> = live.iter().map(|(i, _)| (params[*i].1.device(), params[*i].1.kind())).collect();
        let (grad_scale, found_inf) = match amp {
            Some((s, f)) => (s, Some(f)),
            None => (None, None),
        };
        for bucket in buckets(&keys) {
            let device = keys[bucket[0]].0;
            let scale = grad_scale.map(|s| s.to_device(device));
            let inf = found_inf.map(|f| f.to_device(device));
            if cfg.momentum == 0.0 {
                let ps: Vec<&Tensor> = bucket.iter().map(|&b| &params[live[b].0].1).collect();
                let gs: Vec<&Tensor> = bucket.iter().map(|&b| &live[b].1).collect();
                fused_sgd_(&ps, &gs, &[], &args, false, scale.as_ref(), inf.as_ref())?;
                continue;
            }
            let (old, new): (Vec<usize>, Vec<usize>) =
                bucket.iter().partition(|&&b| self.momentum_buffers.contains_key(&params[live[b].0].0));
            for (part, first) in [(old, false), (new, true)] {
                if part.is_empty() {
                    continue;
                }
                if first {
                    for &b in &part {
                        let (name, p) = &params[live[b].0];
                        self.momentum_buffers.insert(name.clone(), p.empty_like());
                    }
                }
                let ps: Vec<&Tensor> = part.iter().map(|&b| &params[live[b].0].1).collect();
                let gs: Vec<&Tensor> = part.iter().map(|&b| &live[b].1).collect();
                let bufs: Vec<&Tensor> =
                    part.iter().map(|&b| &self.momentum_buffers[&params[live[b].0].0]).collect();
                fused_sgd_(&ps, &gs, &bufs, &args, first, scale.as_ref(), inf.as_ref())?;
            }
        }
        Ok(())
    }
}

impl Optimizer for Sgd {
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
        self.groups.iter().map(|g| g.config.momentum).collect()
    }

    fn set_momenta(&mut self, momenta: &[f64]) -> Result<()> {
        check_count("momenta", self.groups.len(), momenta.len())?;
        self.groups.iter_mut().zip(momenta).for_each(|(g, m)| g.config.momentum = *m);
        Ok(())
    }

    fn state_dict(&self) -> OptimizerState {
        let groups = self
            .groups
            .iter()
            .map(|g| GroupState {
                params: g.params.iter().map(|(n, _)| n.clone()).collect(),
                config: GroupConfig::Sgd(g.config),
            })
            .collect();
        let mut tensors = Vec::new();
        for (name, _) in self.groups.iter().flat_map(|g| &g.params) {
            if let Some(buf) = self.momentum_buffers.get(name) {
                tensors.push((format!("{name}.momentum_buffer"), buf.shallow_clone()));
            }
        }
        OptimizerState { meta: OptimizerMeta { optimizer: "SGD".to_string(), groups }, tensors }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        check_groups(&self.groups, &state.meta, "SGD")?;
        let mut configs = Vec::new();
        for (gi, saved) in state.meta.groups.iter().enumerate() {
            match &saved.config {
                GroupConfig::Sgd(c) => {
                    c.validate(gi)?;
                    configs.push(*c);
                }
                other => {
                    return Err(OptimError::KindMismatch {
                        expected: "SGD".to_string(),
                        found: format!("{other:?}"),
                    })
                }
            }
        }
        let mut tensors = StateTensors::new(&state.tensors);
        let mut buffers = HashMap::new();
        for (name, p) in self.groups.iter().flat_map(|g| &g.params) {
            if tensors.get(name, "momentum_buffer").is_some() {
                buffers.insert(name.clone(), tensors.required_like(name, "momentum_buffer", p)?);
            }
        }
        tensors.finish()?;
        self.groups.iter_mut().zip(configs).for_each(|(g, c)| g.config = c);
        self.momentum_buffers = buffers;
        Ok(())
    }
}
