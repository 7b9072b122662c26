//! AdamW: Adam with decoupled weight decay (`torch.optim.AdamW`).

use crate::adam::{Adam, AdamConfig};
use crate::error::Result;
use crate::optimizer::{Optimizer, OptimizerState};
use crate::param_group::ParamGroup;
use tch::Tensor;

/// `torch.optim.AdamW`: [`Adam`] with `decoupled_weight_decay` forced on in every group, so
/// weight decay shrinks the parameters (`p *= 1 - lr * weight_decay`) instead of entering
/// the moments. Build groups with [`AdamConfig::adamw`] for PyTorch's AdamW defaults
/// (`lr = 1e-3`, `betas = (0.9, 0.999)`, `eps = 1e-8`, `weight_decay = 1e-2`); the saved
/// state says `AdamW`.
#[derive(Debug)]
pub struct AdamW {
    inner: Adam,
}

impl AdamW {
    /// An AdamW optimizer over `groups` (their `decoupled_weight_decay` is set to `true`).
    pub fn new(groups: Vec<ParamGroup<AdamConfig>>) -> Result<Self> {
        let groups = groups
            .into_iter()
            .map(|g| ParamGroup::new(g.params, AdamConfig { decoupled_weight_decay: true, ..g.config }))
            .collect();
        Ok(AdamW { inner: Adam::named("AdamW", groups)? })
    }

    /// The param groups.
    pub fn groups(&self) -> &[ParamGroup<AdamConfig>] {
        self.inner.groups()
    }

    /// The config of group `group`, for changing a hyperparameter mid-run.
    ///
    /// # Panics
    /// If `group` is out of range.
    pub fn config_mut(&mut self, group: usize) -> &mut AdamConfig {
        self.inner.config_mut(group)
    }
}

impl Optimizer for AdamW {
    fn step(&mut self) -> Result<()> {
        self.inner.step()
    }
    fn step_amp(&mut self, grad_scale: Option<&Tensor>, found_inf: &Tensor) -> Result<()> {
        self.inner.step_amp(grad_scale, found_inf)
    }
    fn supports_amp_scaling(&self) -> bool {
        self.inner.supports_amp_scaling()
    }
    fn zero_grad(&mut self) -> Result<()> {
        self.inner.zero_grad()
    }
    fn named_parameters(&self) -> Vec<(&str, &Tensor)> {
        self.inner.named_parameters()
    }
    fn lrs(&self) -> Vec<f64> {
        self.inner.lrs()
    }
    fn set_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        self.inner.set_lrs(lrs)
    }
    fn momenta(&self) -> Vec<f64> {
        self.inner.momenta()
    }
    fn set_momenta(&mut self, momenta: &[f64]) -> Result<()> {
        self.inner.set_momenta(momenta)
    }
    fn state_dict(&self) -> OptimizerState {
        debug_assert_eq!(self.inner.kind_name(), "AdamW");
        self.inner.state_dict()
    }
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        self.inner.load_state_dict(state)
    }
}
