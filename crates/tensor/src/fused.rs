//! PyTorch's fused optimizer kernels (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`) and the
//! other optimizer entry points tch does not generate (`add_` with `alpha`, `grad = None`, the
//! multi-tensor `_foreach_lerp_` and `_foreach_copy_` of a weight EMA).

use crate::error::{Result, TensorError};
use crate::ffi::{self, RawTensor};
use tch::Tensor;

/// Hyperparameters of one [`fused_adam_`] call, as `torch.optim.Adam(fused=True)` passes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedAdamArgs {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// L2 penalty (Adam) or decoupled weight decay (AdamW, when `decoupled`).
    pub weight_decay: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Keep the running maximum of the second moment (needs `max_exp_avg_sqs`).
    pub amsgrad: bool,
    /// Maximise the objective instead of minimising it.
    pub maximize: bool,
    /// AdamW's decoupled weight decay (`_fused_adamw_`) instead of Adam's L2 penalty.
    pub decoupled: bool,
}

/// Hyperparameters of one [`fused_sgd_`] call, as `torch.optim.SGD(fused=True)` passes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedSgdArgs {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 for plain SGD, then no buffers are passed).
    pub momentum: f64,
    /// Dampening of the momentum.
    pub dampening: f64,
    /// L2 penalty.
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// Maximise the objective instead of minimising it.
    pub maximize: bool,
}

fn raw(ts: &[&Tensor]) -> Vec<RawTensor> {
    ts.iter().map(|t| t.as_ptr() as RawTensor).collect()
}

fn raw_opt(t: Option<&Tensor>) -> RawTensor {
    t.map_or(std::ptr::null_mut(), |t| t.as_ptr() as RawTensor)
}

fn check_len(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(TensorError::torch(op, format!("{what} has {got} tensors, expected {want}")))
    }
}

/// One step of `torch.optim.adam._fused_adam` over tensors that share a device and dtype.
///
/// Adds 1 to every `state_steps` tensor (float32 scalars on the parameters' device), runs
/// `_fused_adam_` (or `_fused_adamw_` when `args.decoupled`), which updates `params`,
/// `exp_avgs`, `exp_avg_sqs` and (with amsgrad) `max_exp_avg_sqs` in place, and when
/// `found_inf` is given subtracts it from the steps, so that a step the kernel skipped
/// (`found_inf == 1`) does not count. `grad_scale`, when given, divides the gradients inside
/// the kernel (GradScaler's unscale). Nothing is read back to the host. Runs under no-grad.
/// `max_exp_avg_sqs` must have one tensor per parameter with amsgrad and may be empty without.
// The kernel's own argument lists; grouping them would only rename PyTorch's signature.
#[allow(clippy::too_many_arguments)]
pub fn fused_adam_(
    params: &[&Tensor],
    grads: &[&Tensor],
    exp_avgs: &[&Tensor],
    exp_avg_sqs: &[&Tensor],
    max_exp_avg_sqs: &[&Tensor],
    state_steps: &[&Tensor],
    args: &FusedAdamArgs,
    grad_scale: Option<&Tensor>,
    found_inf: Option<&Tensor>,
) -> Result<()> {
    const OP: &str = "fused_adam_";
    let n = params.len();
    check_len(OP, "grads", grads.len(), n)?;
    check_len(OP, "exp_avgs", exp_avgs.len(), n)?;
    check_len(OP, "exp_avg_sqs", exp_avg_sqs.len(), n)?;
    check_len(OP, "state_steps", state_steps.len(), n)?;
    if args.amsgrad || !max_exp_avg_sqs.is_empty() {
        check_len(OP, "max_exp_avg_sqs", max_exp_avg_sqs.len(), n)?;
    }
    let (p, g, m, v, vmax, s) =
        (raw(params), raw(grads), raw(exp_avgs), raw(exp_avg_sqs), raw(max_exp_avg_sqs), raw(state_steps));
    // SAFETY: every pointer is a live at::Tensor borrowed for the duration of the call and the
    // list lengths were checked above; the kernels mutate tensor data in place, never handles.
    ffi::check(OP, unsafe {
        ffi::tl_fused_adam(
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            vmax.as_ptr(),
            vmax.len(),
            s.as_ptr(),
            n,
            args.lr,
            args.beta1,
            args.beta2,
            args.weight_decay,
            args.eps,
            args.amsgrad,
            args.maximize,
            args.decoupled,
            raw_opt(grad_scale),
            raw_opt(found_inf),
        )
    })
}

/// `torch._fused_sgd_` over tensors that share a device and dtype.
///
/// Updates `params` (and `momentum_buffers`, one per parameter when `args.momentum != 0`,
/// else empty) in place. With `is_first_step` the kernel initialises each buffer to the
/// gradient, as `torch.optim.SGD` does on a parameter's first step; the buffers' previous
/// contents are then ignored. `grad_scale` and `found_inf` work as in [`fused_adam_`]. Runs
/// under no-grad.
pub fn fused_sgd_(
    params: &[&Tensor],
    grads: &[&Tensor],
    momentum_buffers: &[&Tensor],
    args: &FusedSgdArgs,
    is_first_step: bool,
    grad_scale: Option<&Tensor>,
    found_inf: Option<&Tensor>,
) -> Result<()> {
    const OP: &str = "fused_sgd_";
    let n = params.len();
    check_len(OP, "grads", grads.len(), n)?;
    if args.momentum != 0.0 || !momentum_buffers.is_empty() {
        check_len(OP, "momentum_buffers", momentum_buffers.len(), n)?;
    }
    let (p, g, b) = (raw(params), raw(grads), raw(momentum_buffers));
    // SAFETY: as in fused_adam_: live tensors, checked lengths, data mutated in place only.
    ffi::check(OP, unsafe {
        ffi::tl_fused_sgd(
            p.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            b.len(),
            n,
            args.weight_decay,
            args.momentum,
            args.lr,
            args.dampening,
            args.nesterov,
            args.maximize,
            is_first_step,
            raw_opt(grad_scale),
            raw_opt(found_inf),
        )
    })
}

/// `tensor.add_(other, alpha=alpha)`: `tensor += alpha * other` in one kernel, rounding as
/// PyTorch does (tch's `add_` has no `alpha`, and a separate multiply rounds twice). Used by
/// the plain-op optimizers to follow `torch.optim` bit for bit.
pub fn add_scaled_(tensor: &Tensor, other: &Tensor, alpha: f64) -> Result<()> {
    // SAFETY: two live at::Tensors borrowed for the call; only `tensor`'s data is mutated.
    ffi::check("add_scaled_", unsafe {
        ffi::tl_add_scaled_(tensor.as_ptr() as RawTensor, other.as_ptr() as RawTensor, alpha)
    })
}

/// `param.grad = None`: drops the gradient so that the next backward allocates a fresh one
/// and optimizers skip the parameter until then (`zero_grad(set_to_none=True)`).
pub fn set_grad_none(param: &Tensor) -> Result<()> {
    // SAFETY: a live at::Tensor; only its autograd metadata's grad slot is reset.
    ffi::check("set_grad_none", unsafe { ffi::tl_set_grad_none(param.as_ptr() as RawTensor) })
}

/// `torch._foreach_lerp_(selfs, ends, weight)`: every `selfs[i] += weight * (ends[i] -
/// selfs[i])` in PyTorch's multi-tensor kernels (a few launches for the whole list on CUDA),
/// under no-grad: the update of torch's `get_ema_multi_avg_fn` and timm's `ModelEmaV3`. The
/// tensors must be floating point, and each pair of one dtype, device and shape.
pub fn foreach_lerp_(selfs: &[&Tensor], ends: &[&Tensor], weight: f64) -> Result<()> {
    const OP: &str = "foreach_lerp_";
    check_len(OP, "ends", ends.len(), selfs.len())?;
    if selfs.is_empty() {
        return Ok(());
    }
    let (s, e) = (raw(selfs), raw(ends));
    // SAFETY: live tensors, checked lengths, `selfs` mutated in place only.
    ffi::check(OP, unsafe { ffi::tl_foreach_lerp_(s.as_ptr(), e.as_ptr(), s.len(), weight) })
}

/// `torch._foreach_copy_(selfs, srcs)`: every `selfs[i].copy_(srcs[i])` in one multi-tensor
/// call, under no-grad.
pub fn foreach_copy_(selfs: &[&Tensor], srcs: &[&Tensor]) -> Result<()> {
    const OP: &str = "foreach_copy_";
    check_len(OP, "srcs", srcs.len(), selfs.len())?;
    if selfs.is_empty() {
        return Ok(());
    }
    let (s, e) = (raw(selfs), raw(srcs));
    // SAFETY: live tensors, checked lengths, `selfs` mutated in place only.
    ffi::check(OP, unsafe { ffi::tl_foreach_copy_(s.as_ptr(), e.as_ptr(), s.len()) })
}
