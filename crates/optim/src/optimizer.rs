//! The `Optimizer` trait and the saveable optimizer state shared by SGD and Adam/AdamW.

use crate::adam::AdamConfig;
use crate::error::{OptimError, Result};
use crate::param_group::ParamGroup;
use crate::sgd::SgdConfig;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use tch::{Device, Kind, Tensor};

/// What every Torchlight optimizer can do: step, clear gradients, expose per-group lr and
/// momentum to schedulers, and save / restore its state by parameter name.
pub trait Optimizer {
    /// One optimisation step over every parameter with a defined gradient, in place and
    /// under no-grad (`optimizer.step()`). Parameters without a gradient are skipped.
    fn step(&mut self) -> Result<()>;

    /// A step for GradScaler: `grad_scale` (if given) divides the gradients, and the step is
    /// skipped where `found_inf` (a one-element float32 tensor) is non-zero. Fused groups hand
    /// both to the kernel, with no host sync; other groups read `found_inf` once.
    fn step_amp(&mut self, grad_scale: Option<&Tensor>, found_inf: &Tensor) -> Result<()>;

    /// Whether every group runs the fused kernels, so that [`Optimizer::step_amp`] needs no
    /// host sync (PyTorch's `_step_supports_amp_scaling`).
    fn supports_amp_scaling(&self) -> bool;

    /// Sets every parameter's gradient to none (`zero_grad(set_to_none=True)`, PyTorch's default).
    fn zero_grad(&mut self) -> Result<()>;

    /// Every parameter of every group, with its name, in group order.
    fn named_parameters(&self) -> Vec<(&str, &Tensor)>;

    /// The lr of each param group.
    fn lrs(&self) -> Vec<f64>;

    /// Sets the lr of each param group (what a scheduler does).
    fn set_lrs(&mut self, lrs: &[f64]) -> Result<()>;

    /// The momentum of each group: SGD's `momentum`, Adam's `betas.0`.
    fn momenta(&self) -> Vec<f64>;

    /// Sets the momentum of each group (OneCycleLR's `cycle_momentum`).
    fn set_momenta(&mut self, momenta: &[f64]) -> Result<()>;

    /// The optimizer's state: hyperparameters and steps as a serde struct, per-parameter
    /// tensors named `"<param>.<field>"` (`fc.weight.exp_avg`). As in PyTorch the tensors alias
    /// the live state: save or copy them before the next step.
    fn state_dict(&self) -> OptimizerState;

    /// Restores a state saved by [`Optimizer::state_dict`] of an optimizer with the same
    /// groups and parameter names: the hyperparameters (lr, ...) and every parameter's state,
    /// copied and moved to its parameter's device and dtype, so that a resumed run continues
    /// exactly.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()>;
}

/// The hyperparameters of one param group, tagged with the optimizer they belong to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "optimizer")]
pub enum GroupConfig {
    /// [`crate::Sgd`]'s.
    #[serde(rename = "SGD")]
    Sgd(SgdConfig),
    /// [`crate::Adam`]'s (and AdamW's).
    Adam(AdamConfig),
}

/// One param group in a saved state: its parameter names and hyperparameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupState {
    /// The group's parameter names, in order.
    pub params: Vec<String>,
    /// The group's hyperparameters.
    pub config: GroupConfig,
}

/// The serde-serializable part of an optimizer's state (what PyTorch keeps in `param_groups`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizerMeta {
    /// `SGD` or `Adam`.
    pub optimizer: String,
    /// The param groups.
    pub groups: Vec<GroupState>,
}

/// An optimizer's saveable state: [`OptimizerMeta`] plus named state tensors
/// (`"<param>.step"`, `"<param>.exp_avg"`, `"<param>.momentum_buffer"`, ...), ready for a
/// safetensors file.
#[derive(Debug)]
pub struct OptimizerState {
    /// Hyperparameters and parameter names.
    pub meta: OptimizerMeta,
    /// Per-parameter state tensors, named `"<param>.<field>"`.
    pub tensors: Vec<(String, Tensor)>,
}

/// Checks that parameter names are unique across groups.
pub(crate) fn check_unique<C>(groups: &[ParamGroup<C>]) -> Result<()> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (gi, group) in groups.iter().enumerate() {
        for (name, _) in &group.params {
            if let Some(first) = seen.insert(name, gi) {
                return Err(OptimError::DuplicateParameter { name: name.clone(), first, second: gi });
            }
        }
    }
    Ok(())
}

/// Checks a per-group list's length.
pub(crate) fn check_count(what: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(OptimError::GroupCount { what, expected, found })
    }
}

/// Checks that a saved state has the same groups of parameter names as `groups`.
pub(crate) fn check_groups<C>(groups: &[ParamGroup<C>], meta: &OptimizerMeta, kind: &str) -> Result<()> {
    if meta.optimizer != kind {
        return Err(OptimError::KindMismatch { expected: kind.to_string(), found: meta.optimizer.clone() });
    }
    check_count("state dict groups", groups.len(), meta.groups.len())?;
    for (gi, (group, saved)) in groups.iter().zip(&meta.groups).enumerate() {
        let names: Vec<String> = group.params.iter().map(|(n, _)| n.clone()).collect();
        if names != saved.params {
            return Err(OptimError::GroupMismatch {
                group: gi,
                expected: names,
                found: saved.params.clone(),
            });
        }
    }
    Ok(())
}

/// The state tensors of a state dict, looked up by parameter and field; reports unused ones.
pub(crate) struct StateTensors<'a> {
    map: HashMap<&'a str, &'a Tensor>,
    used: HashSet<&'a str>,
}

impl<'a> StateTensors<'a> {
    pub(crate) fn new(tensors: &'a [(String, Tensor)]) -> Self {
        StateTensors { map: tensors.iter().map(|(k, t)| (k.as_str(), t)).collect(), used: HashSet::new() }
    }

    /// The tensor `"<param>.<field>"`, if present.
    pub(crate) fn get(&mut self, param: &str, field: &str) -> Option<&'a Tensor> {
        let key = format!("{param}.{field}");
        let (k, t) = self.map.get_key_value(key.as_str())?;
        self.used.insert(k);
        Some(t)
    }

    /// The tensor `"<param>.<field>"` copied to `like`'s device and dtype, checking its shape.
    pub(crate) fn required_like(&mut self, param: &str, field: &str, like: &Tensor) -> Result<Tensor> {
        let key = format!("{param}.{field}");
        let t = self.get(param, field).ok_or_else(|| OptimError::MissingState { key: key.clone() })?;
        if t.size() != like.size() {
            return Err(OptimError::StateShape { key, expected: like.size(), found: t.size() });
        }
        Ok(copy_to(t, like.device(), like.kind()))
    }

    /// Errors on the first tensor no parameter claimed.
    pub(crate) fn finish(self) -> Result<()> {
        let mut unused: Vec<&&str> = self.map.keys().filter(|k| !self.used.contains(**k)).collect();
        unused.sort();
        match unused.first() {
            Some(key) => Err(OptimError::UnexpectedState { key: key.to_string() }),
            None => Ok(()),
        }
    }
}

/// A fresh copy of `t` on `device` in `kind`, sharing nothing with the caller's tensor.
pub(crate) fn copy_to(t: &Tensor, device: Device, kind: Kind) -> Tensor {
    let _guard = torchlight_tensor::no_grad();
    t.to_device(device).to_kind(kind).copy().detach()
}

/// The step counter of a parameter: a float32 scalar, on the CPU for the plain path (read
/// there without a device sync) and on the parameter's device for the fused kernels, as in
/// PyTorch. Moves it where needed (once, after a load or a switch of path).
pub(crate) fn step_on(step: &mut Tensor, device: Device) {
    if step.device() != device {
        *step = step.to_device(device);
    }
}

/// Groups indices by (device, kind), keeping first-seen order: each fused kernel call takes
/// tensors of one device and dtype.
pub(crate) fn buckets(keys: &[(Device, Kind)]) -> Vec<Vec<usize>> {
    let mut order: Vec<(Device, Kind)> = Vec::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match order.iter().position(|k| k == key) {
            Some(b) => out[b].push(i),
            None => {
                order.push(*key);
                out.push(vec![i]);
            }
        }
    }
    out
}

/// `zero_grad(set_to_none=True)` over named parameters.
pub(crate) fn zero_grad_all<'a>(params: impl Iterator<Item = &'a Tensor>) -> Result<()> {
    for p in params {
        torchlight_tensor::set_grad_none(p)?;
    }
    Ok(())
}

/// For non-fused groups under GradScaler: reads `found_inf` once per step (the one host sync
/// of the plain path, as PyTorch's `found_inf.item()`). Returns whether any gradient was
/// non-finite, i.e. whether to skip the step.
pub(crate) fn found_inf_is_set(found_inf: &Tensor) -> Result<bool> {
    let flat = found_inf.reshape([-1]);
    Ok(flat.f_double_value(&[0]).map_err(OptimError::torch("read found_inf"))? != 0.0)
}

/// Divides gradients in place by `grad_scale` (a one-element tensor), for non-fused groups
/// handed a scale by GradScaler.
pub(crate) fn unscale_grads<'a>(grads: impl Iterator<Item = &'a Tensor>, grad_scale: &Tensor) -> Result<()> {
    let _guard = torchlight_tensor::no_grad();
    for g in grads {
        let mut g = g.shallow_clone();
        let scale = grad_scale.to_device(g.device()).reshape(Vec::<i64>::new());
        let _ = g.f_div_(&scale).map_err(OptimError::torch("unscale gradient"))?;
    }
    Ok(())
}
