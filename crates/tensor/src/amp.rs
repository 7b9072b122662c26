//! The fused kernel behind `GradScaler.unscale_`, which tch does not generate.

use crate::error::Result;
use crate::ffi;
use tch::Tensor;

/// `torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`.
///
/// Multiplies every gradient in place by `inv_scale` (a one-element float32 tensor) and sets
/// `found_inf` (a one-element float32 tensor on the same device) to 1.0 if any gradient holds
/// NaN or Inf, all without a host sync. Gradients must share a device and be floating point.
pub fn non_finite_check_and_unscale(grads: &[Tensor], found_inf: &Tensor, inv_scale: &Tensor) -> Result<()> {
    let raw: Vec<ffi::RawTensor> = grads.iter().map(|g| g.as_ptr() as ffi::RawTensor).collect();
    // SAFETY: every pointer is a live at::Tensor borrowed for the duration of the call; the
    // kernel mutates tensor data in place, never the handles.
    ffi::check("non_finite_check_and_unscale", unsafe {
        ffi::tl_amp_non_finite_check_and_unscale(
            raw.as_ptr(),
            raw.len(),
            found_inf.as_ptr() as ffi::RawTensor,
            inv_scale.as_ptr() as ffi::RawTensor,
        )
    })
}
