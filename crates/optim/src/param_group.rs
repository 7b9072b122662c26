//! Parameter groups: named tensors sharing one set of hyperparameters.

use tch::Tensor;

/// Named tensors as the nn crate exposes them: `(state_dict name, tensor)`.
pub type NamedTensors = Vec<(String, Tensor)>;

/// A group of named parameters with its own hyperparameters (`{"params": [...], "lr": ...}`
/// in `torch.optim`), e.g. a lower lr for a pretrained backbone than for a new head.
///
/// Names are PyTorch `state_dict` keys (`layer1.0.conv1.weight`, `fc.bias`); optimizer state is
/// keyed by them, so they must be unique across an optimizer's groups. Frozen parameters may
/// be included: a parameter whose gradient is undefined is skipped by `step`, and starts being
/// updated as soon as it has one (after `set_requires_grad(true)` and a backward pass).
#[derive(Debug)]
pub struct ParamGroup<C> {
    /// The group's parameters, each with its `state_dict` name. The tensors share storage
    /// with the model's, so updating them in place updates the model.
    pub params: NamedTensors,
    /// The group's hyperparameters (`SgdConfig`, `AdamConfig`).
    pub config: C,
}

impl<C> ParamGroup<C> {
    /// A group of `params` with hyperparameters `config`.
    pub fn new(params: NamedTensors, config: C) -> Self {
        ParamGroup { params, config }
    }
}
