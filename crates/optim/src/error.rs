//! The optim crate's error type.

use torchlight_tensor::TensorError;

/// What can go wrong in `torchlight-optim`. Every variant names the parameter, group, key or
/// field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptimError {
    /// A hyperparameter outside the range PyTorch accepts (e.g. a negative lr, a beta >= 1).
    #[error("invalid {field} = {value} in {owner}: {reason}")]
    InvalidHyperparameter {
        /// Where it was given: `param group 1`, `StepLR`, `GradScaler`, ...
        owner: String,
        /// The field's name (`lr`, `betas.0`, `momentum`, ...).
        field: &'static str,
        /// The value given.
        value: f64,
        /// What is required, in words.
        reason: &'static str,
    },
    /// The same parameter name appears twice across an optimizer's groups.
    #[error("parameter `{name}` appears in more than one place (groups {first} and {second})")]
    DuplicateParameter {
        /// The repeated name.
        name: String,
        /// The group it appeared in first.
        first: usize,
        /// The group it appeared in again.
        second: usize,
    },
    /// A parameter-group rule that cannot apply (`ParamGroupBuilder`): an empty or repeated
    /// custom key or lr prefix.
    #[error("param group rule: {rule} `{value}` {reason}")]
    GroupRule {
        /// The kind of rule (`custom key`, `lr prefix`).
        rule: &'static str,
        /// The key or prefix given.
        value: String,
        /// What is wrong, in words.
        reason: &'static str,
    },
    /// A per-group list (lrs, momenta, scheduler values) whose length is not the number of groups.
    #[error("{what} has {found} entries but the optimizer has {expected} param groups")]
    GroupCount {
        /// Which list.
        what: &'static str,
        /// The number of param groups.
        expected: usize,
        /// The number of entries given.
        found: usize,
    },
    /// A state dict whose groups do not hold the same parameter names as this optimizer's.
    #[error(
        "state dict group {group} holds parameters {found:?}, this optimizer's group holds {expected:?}"
    )]
    GroupMismatch {
        /// The group index.
        group: usize,
        /// This optimizer's parameter names in that group.
        expected: Vec<String>,
        /// The state dict's parameter names in that group.
        found: Vec<String>,
    },
    /// A state dict made by another kind of optimizer or scheduler.
    #[error("state dict was saved by {found}, cannot load it into {expected}")]
    KindMismatch {
        /// What this object is.
        expected: String,
        /// What the state dict says it came from.
        found: String,
    },
    /// A saved param group config whose values do not fit its config type.
    #[error("state dict param group {group}: config of kind {kind} does not fit: {reason}")]
    GroupConfig {
        /// The group index.
        group: usize,
        /// The config's kind (`Adam`, `SGD`).
        kind: String,
        /// What serde reported (the field and what it expected).
        reason: String,
    },
    /// A state tensor the state dict lacks (e.g. `fc.weight.exp_avg` when `fc.weight.step` is present).
    #[error("state dict lacks tensor `{key}`")]
    MissingState {
        /// The missing key.
        key: String,
    },
    /// A state tensor whose name matches no parameter of this optimizer, or an unknown suffix.
    #[error("state dict tensor `{key}` matches no parameter state of this optimizer")]
    UnexpectedState {
        /// The key.
        key: String,
    },
    /// A state tensor whose shape differs from its parameter's.
    #[error("state tensor `{key}` has shape {found:?}, its parameter has shape {expected:?}")]
    StateShape {
        /// The key.
        key: String,
        /// The parameter's shape.
        expected: Vec<i64>,
        /// The state tensor's shape.
        found: Vec<i64>,
    },
    /// A total gradient norm that is NaN or Inf, with `error_if_nonfinite` set.
    #[error("the total norm of order {norm_type} of the gradients is non-finite ({norm}), so it cannot be clipped")]
    NonFiniteNorm {
        /// The norm's order.
        norm_type: f64,
        /// The norm computed.
        norm: f64,
    },
    /// A scheduler stepped past its last step (OneCycleLR's `total_steps`).
    #[error("{scheduler} was stepped {step} times, more than its total_steps = {total_steps}")]
    SchedulerFinished {
        /// The scheduler.
        scheduler: &'static str,
        /// The step asked for.
        step: u64,
        /// Its number of steps.
        total_steps: u64,
    },
    /// GradScaler methods called out of order (e.g. `unscale_` twice before `update`).
    #[error("GradScaler: {0}")]
    ScalerOrder(&'static str),
    /// Gradients of a kind GradScaler cannot unscale (float16 gradients, as in PyTorch).
    #[error("GradScaler cannot unscale the {kind:?} gradient of `{name}`: gradients must be float32 (parameters in float32, autocast for fp16)")]
    ScalerGradKind {
        /// The parameter's name.
        name: String,
        /// The gradient's kind.
        kind: tch::Kind,
    },
    /// Parameters on more than one device where one is required (GradScaler, clip_grad_norm).
    #[error("parameter `{name}` is on {found:?}, the others on {expected:?}: {what} needs one device")]
    MixedDevices {
        /// What needs one device.
        what: &'static str,
        /// The first parameter's device.
        expected: tch::Device,
        /// The offending parameter.
        name: String,
        /// Its device.
        found: tch::Device,
    },
    /// An error from the tensor layer (the fused kernels, clearing a gradient).
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// An error from tch (a libtorch exception in an op).
    #[error("libtorch error in {op}: {error}")]
    Torch {
        /// The operation.
        op: &'static str,
        /// tch's error (in the message, so not also a `source()`).
        error: tch::TchError,
    },
}

impl OptimError {
    pub(crate) fn torch(op: &'static str) -> impl FnOnce(tch::TchError) -> Self {
        move |error| OptimError::Torch { op, error }
    }

    pub(crate) fn rule(rule: &'static str, value: &str, reason: &'static str) -> Self {
        OptimError::GroupRule { rule, value: value.to_string(), reason }
    }

    pub(crate) fn invalid(
        owner: impl Into<String>,
        field: &'static str,
        value: f64,
        reason: &'static str,
    ) -> Self {
        OptimError::InvalidHyperparameter { owner: owner.into(), field, value, reason }
    }
}

/// `Result` with [`OptimError`].
pub type Result<T, E = OptimError> = std::result::Result<T, E>;
