//! RAII guards for gradient tracking and automatic mixed precision.

use crate::cuda::cuda_status;
use crate::error::{Result, TensorError};
use crate::ffi;
use std::marker::PhantomData;
use tch::{Device, Kind};

/// Gradient tracking stays off while this guard lives (`with torch.no_grad():`).
#[must_use = "gradients are re-enabled as soon as the guard is dropped: bind it, `let _guard = no_grad();`"]
pub struct NoGradGuard {
    _inner: tch::NoGradGuard,
}

/// Turns gradient tracking off until the returned guard is dropped.
///
/// ```
/// use torchlight_tensor::no_grad;
/// let w = tch::Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
/// let y = {
///     let _guard = no_grad();
///     &w * 2
/// };
/// assert!(!y.requires_grad());
/// ```
pub fn no_grad() -> NoGradGuard {
    NoGradGuard { _inner: tch::no_grad_guard() }
}

/// Autocast stays on while this guard lives (`with torch.autocast(device_type, dtype):`).
///
/// Eligible ops (convolutions, matmuls, linear layers) run in the reduced type; ops that need
/// range (softmax, losses, reductions) run in float32, following PyTorch's autocast op lists.
/// The state is per thread, as in PyTorch, so the guard is neither `Send` nor `Sync`. Guards
/// nest: dropping one restores exactly the state it found.
#[must_use = "autocast ends as soon as the guard is dropped: bind it, `let _amp = autocast(..)?;`"]
pub struct AutocastGuard {
    device_type: i32,
    prev: ffi::AutocastPrev,
    _not_send: PhantomData<*const ()>,
}

/// Enters autocast for `device` with the reduced type `kind`.
///
/// CUDA supports `Half` and `BFloat16`; the CPU supports `BFloat16` and `Half` (PyTorch's
/// CPU default is `BFloat16`). Asking for CUDA autocast where CUDA is unavailable is an
/// error rather than PyTorch's warning, since it would silently train in float32.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
/// let _amp = torchlight_tensor::autocast(Device::Cpu, Kind::BFloat16).unwrap();
/// assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
/// ```
pub fn autocast(device: Device, kind: Kind) -> Result<AutocastGuard> {
    autocast_if(true, device, kind)
}

/// [`autocast`] with an on/off switch, for code where AMP is a config option:
/// `autocast_if(config.amp, device, Kind::Half)` gives a guard that does nothing when off.
pub fn autocast_if(enabled: bool, device: Device, kind: Kind) -> Result<AutocastGuard> {
    if enabled {
        check_supported(device, kind)?;
    }
    let device_type = ffi::device_type_code(device);
    let mut prev = ffi::AutocastPrev::default();
    // SAFETY: prev is a valid out-pointer; the shim catches every C++ exception.
    ffi::check("autocast enter", unsafe {
        ffi::tl_autocast_enter(device_type, ffi::scalar_type_code(kind), enabled, true, &mut prev)
    })?;
    Ok(AutocastGuard { device_type, prev, _not_send: PhantomData })
}

fn check_supported(device: Device, kind: Kind) -> Result<()> {
    match (device, kind) {
        (Device::Cpu, Kind::BFloat16 | Kind::Half) => Ok(()),
        (Device::Cuda(_), Kind::Half | Kind::BFloat16) => {
            let status = cuda_status();
            if status.available {
                Ok(())
            } else {
                Err(TensorError::CudaUnavailable {
                    requested: "autocast on cuda".to_string(),
                    reason: status.reason.clone().unwrap_or_default(),
                })
            }
        }
        _ => Err(TensorError::UnsupportedAutocast { device, kind }),
    }
}

/// Whether autocast is on for `device` in this thread, and its reduced type.
pub fn autocast_state(device: Device) -> Result<(bool, Kind)> {
    let (mut enabled, mut code) = (false, 0);
    // SAFETY: valid out-pointers; the shim catches every C++ exception.
    ffi::check("autocast state", unsafe {
        ffi::tl_autocast_state(ffi::device_type_code(device), &mut enabled, &mut code)
    })?;
    let kind = ffi::kind_from_code(code)
        .ok_or_else(|| TensorError::torch("autocast state", format!("unknown dtype code {code}")))?;
    Ok((enabled, kind))
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // SAFETY: restores the state saved on entry; cannot fail for a device type that entry
        // accepted, and a failure could not be reported from drop anyway.
        let _ = unsafe { ffi::tl_autocast_exit(self.device_type, &self.prev) };
    }
}
