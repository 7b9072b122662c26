//! Bindings to the C++ shim in `csrc/shim.cpp` (the libtorch entry points tch lacks).

use crate::error::{Result, TensorError};
use std::ffi::{c_char, c_int, CStr};

/// tch's `C_tensor` pointer: a heap-allocated `at::Tensor`.
pub(crate) type RawTensor = *mut torch_sys::C_tensor;

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub(crate) struct AutocastPrev {
    pub enabled: bool,
    pub dtype: c_int,
    pub cache_enabled: bool,
}

extern "C" {
    fn tl_last_error() -> *const c_char;
    pub(crate) fn tl_autocast_enter(
        device_type: c_int,
        dtype: c_int,
        enabled: bool,
        cache_enabled: bool,
        prev: *mut AutocastPrev,
    ) -> c_int;
    pub(crate) fn tl_autocast_exit(device_type: c_int, prev: *const AutocastPrev) -> c_int;
    pub(crate) fn tl_autocast_state(device_type: c_int, enabled: *mut bool, dtype: *mut c_int) -> c_int;
    pub(crate) fn tl_amp_non_finite_check_and_unscale(
        grads: *const RawTensor,
        n: usize,
        found_inf: RawTensor,
        inv_scale: RawTensor,
    ) -> c_int;
    pub(crate) fn tl_empty_pinned(sizes: *const i64, ndim: usize, dtype: c_int, out: *mut RawTensor)
        -> c_int;
    pub(crate) fn tl_set_deterministic(on: bool, warn_only: bool) -> c_int;
    pub(crate) fn tl_fused_adam(
        params: *const RawTensor,
        grads: *const RawTensor,
        exp_avgs: *const RawTensor,
        exp_avg_sqs: *const RawTensor,
        max_exp_avg_sqs: *const RawTensor,
        n_max: usize,
        state_steps: *const RawTensor,
        n: usize,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        amsgrad: bool,
        maximize: bool,
        decoupled: bool,
        grad_scale: RawTensor,
        found_inf: RawTensor,
    ) -> c_int;
    pub(crate) fn tl_fused_sgd(
        params: *const RawTensor,
        grads: *const RawTensor,
        momentum_buffers: *const RawTensor,
        n_buf: usize,
        n: usize,
        weight_decay: f64,
        momentum: f64,
        lr: f64,
        dampening: f64,
        nesterov: bool,
        maximize: bool,
        is_first_step: bool,
        grad_scale: RawTensor,
        found_inf: RawTensor,
    ) -> c_int;
    pub(crate) fn tl_add_scaled_(this: RawTensor, other: RawTensor, alpha: f64) -> c_int;
    pub(crate) fn tl_set_grad_none(param: RawTensor) -> c_int;
    pub(crate) fn tl_foreach_lerp_(
        selfs: *const RawTensor,
        ends: *const RawTensor,
        n: usize,
        weight: f64,
    ) -> c_int;
    pub(crate) fn tl_foreach_copy_(selfs: *const RawTensor, srcs: *const RawTensor, n: usize) -> c_int;
    pub(crate) fn tl_cuda_empty_cache() -> c_int;
    pub(crate) fn tl_cuda_memory_stats(
        device_index: c_int,
        allocated: *mut i64,
        reserved: *mut i64,
        peak_allocated: *mut i64,
    ) -> c_int;
    pub(crate) fn tl_cuda_reset_peak_memory_stats(device_index: c_int) -> c_int;
}

/// Turns a shim return code into a `Result`, fetching libtorch's message on failure.
pub(crate) fn check(op: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: the shim returns a pointer to a thread-local, NUL-terminated string that lives
    // until the next failing call on this thread; we copy it out at once.
    let message = unsafe { CStr::from_ptr(tl_last_error()) }.to_string_lossy().into_owned();
    Err(TensorError::Torch { op, message })
}

/// libtorch's `c10::DeviceType` code for a device.
pub(crate) fn device_type_code(device: tch::Device) -> c_int {
    match device {
        tch::Device::Cpu => 0,
        tch::Device::Cuda(_) => 1,
        tch::Device::Mps => 13,
        tch::Device::Vulkan => 10,
    }
}

/// libtorch's `c10::ScalarType` code for a kind (the table in c10/core/ScalarType.h, which
/// tch keeps private).
pub(crate) fn scalar_type_code(kind: tch::Kind) -> c_int {
    use tch::Kind::*;
    match kind {
        Uint8 => 0,
        Int8 => 1,
        Int16 => 2,
        Int => 3,
        Int64 => 4,
        Half => 5,
        Float => 6,
        Double => 7,
        ComplexHalf => 8,
        ComplexFloat => 9,
        ComplexDouble => 10,
        Bool => 11,
        QInt8 => 12,
        QUInt8 => 13,
        QInt32 => 14,
        BFloat16 => 15,
        Float8e5m2 => 23,
        Float8e4m3fn => 24,
        Float8e5m2fnuz => 25,
        Float8e4m3fnuz => 26,
    }
}

/// The inverse of [`scalar_type_code`], for the codes autocast can hold.
pub(crate) fn kind_from_code(code: c_int) -> Option<tch::Kind> {
    use tch::Kind::*;
    [Uint8, Int8, Int16, Int, Int64, Half, Float, Double, Bool, BFloat16]
        .into_iter()
        .find(|k| scalar_type_code(*k) == code)
}
