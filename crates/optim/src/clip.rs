//! Gradient clipping: by global norm (`clip_grad_norm_`) and by value (`clip_grad_value_`).

use crate::error::{OptimError, Result};
use tch::{Kind, Tensor};

/// `torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)`.
///
/// Computes the norm of order `norm_type` (2.0 usually; `f64::INFINITY` for the max norm) of
/// all gradients together, as if concatenated, and multiplies every gradient in place by
/// `min(1, max_norm / (total_norm + 1e-6))`. Parameters without a gradient are skipped.
/// Returns the total norm before clipping as a scalar tensor on the first gradient's device
/// (0 when there is no gradient), without a host sync; with `error_if_nonfinite` the norm is
/// read once and a NaN or Inf norm is an error, leaving the gradients untouched. Call it after
/// `GradScaler::unscale_` under mixed precision.
pub fn clip_grad_norm<'a>(
    params: impl IntoIterator<Item = &'a Tensor>,
    max_norm: f64,
    norm_type: f64,
    error_if_nonfinite: bool,
) -> Result<Tensor> {
    let grads: Vec<Tensor> = params.into_iter().map(Tensor::grad).filter(Tensor::defined).collect();
    let _guard = torchlight_tensor::no_grad();
    let Some(first) = grads.first() else {
        return Ok(Tensor::from(0.0f32));
    };
    let device = first.device();
    let empty: &[i64] = &[];
    let norms = grads
        .iter()
        .map(|g| g.f_norm_scalaropt_dim(norm_type, empty, false).map(|n| n.to_device(device)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(OptimError::torch("clip_grad_norm"))?;
    let total = Tensor::f_stack(&norms, 0)
        .and_then(|s| s.f_norm_scalaropt_dim(norm_type, empty, false))
        .map_err(OptimError::torch("clip_grad_norm"))?;
    if error_if_nonfinite {
        let norm = total.double_value(&[]);
        if !norm.is_finite() {
            return Err(OptimError::NonFiniteNorm { norm_type, norm });
        }
    }
    // As PyTorch: `max_norm / (total + 1e-6)` is `reciprocal(total + 1e-6) * max_norm`.
    let coef = ((&total + 1e-6).reciprocal() * max_norm).clamp_max(1.0);
    for g in &grads {
        let mut g = g.shallow_clone();
        let c = if g.device() == device { coef.shallow_clone() } else { coef.to_device(g.device()) };
        let c = if g.kind() == Kind::Float { c } else { c.to_kind(g.kind()) };
        let _ = g.f_mul_(&c).map_err(OptimError::torch("clip_grad_norm"))?;
    }
    Ok(total)
}

/// `torch.nn.utils.clip_grad_value_(parameters, clip_value)`: clamps every gradient in place
/// to `[-clip_value, clip_value]`. Parameters without a gradient are skipped.
pub fn clip_grad_value<'a>(params: impl IntoIterator<Item = &'a Tensor>, clip_value: f64) -> Result<()> {
    let _guard = torchlight_tensor::no_grad();
    for p in params {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.f_clamp_(-clip_value, clip_value).map_err(OptimError::torch("clip_grad_value"))?;
        }
    }
    Ok(())
}
