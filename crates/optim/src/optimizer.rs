//! The `Optimizer` trait (what schedulers, GradScaler and checkpoints use) and the saveable
//! optimizer state.

use crate::error::{OptimError, Result};
use serde::{Deserialize, Serialize};
use tch::Tensor;

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

    /// Undoes what a [`Optimizer::step_amp`] whose `found_inf` was set did to the state, once
    /// that is known on the host (the Trainer's deferred non-finite guard reads the flag a
    /// step late): the state that step created for parameters without one is dropped, so the
    /// optimizer is as PyTorch's after GradScaler skipped `optimizer.step()` (the fused
    /// kernels already left existing state and the parameters untouched), and the next step
    /// is those parameters' first: SGD's momentum buffer starts as the gradient, Adam counts
    /// from step 1, and the saved state holds nothing for them. Call it before the next step
    /// (or load); after a step whose flag was clear it would drop live state. The default
    /// does nothing, for an optimizer that creates no state on a skipped step.
    fn forget_skipped_step(&mut self) -> Result<()> {
        Ok(())
    }

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

    /// [`Optimizer::load_state_dict`] taking the state by value: each saved tensor becomes the
    /// parameter's state as it is where its device and dtype already fit (no copy), and is
    /// moved or converted otherwise; what a checkpoint restore does with the tensors it has
    /// just read. The tensors must be the state's alone: a state from
    /// [`Optimizer::state_dict`] aliases the live state, so load that one by reference. The
    /// default copies through [`Optimizer::load_state_dict`].
    fn load_state_dict_owned(&mut self, state: OptimizerState) -> Result<()> {
        self.load_state_dict(&state)
    }
}

/// The hyperparameters of one param group as saved: the config type's `kind` (`"SGD"`,
/// `"Adam"`, or an outside optimizer's own) and its fields as JSON `values`, so any optimizer
/// built on [`OptimizerCore`](crate::OptimizerCore) saves its groups the same way.
///
/// In `meta.json`: `{"kind": "Adam", "values": {"lr": 0.001, "betas": [0.9, 0.999], ...}}`.
/// The first form of checkpoint format 1, `{"optimizer": "Adam", "lr": 0.001, ...}`, still
/// reads (as kind `Adam` with the other fields as values).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupConfig {
    /// The config type's [`Hyperparameters::KIND`](crate::Hyperparameters::KIND).
    pub kind: String,
    /// The config's fields, as serde writes them.
    pub values: serde_json::Value,
}

impl<'de> Deserialize<'de> for GroupConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        use serde_json::Value;
        let mut map = serde_json::Map::<String, Value>::deserialize(deserializer)?;
        if map.len() == 2 {
            if let (Some(Value::String(kind)), Some(values)) = (map.get("kind"), map.get("values")) {
                return Ok(GroupConfig { kind: kind.clone(), values: values.clone() });
            }
        }
        match map.remove("optimizer") {
            Some(Value::String(kind)) => Ok(GroupConfig { kind, values: Value::Object(map) }),
            _ => Err(D::Error::custom(
                "a param group config needs a string `kind` and `values` (or, in the first form of \
                 checkpoint format 1, a string `optimizer` beside the fields)",
            )),
        }
    }
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
    /// The optimizer's name (`SGD`, `Adam`, `AdamW`, or an outside optimizer's).
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

/// Checks a per-group list's length.
pub(crate) fn check_count(what: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(OptimError::GroupCount { what, expected, found })
    }
}
