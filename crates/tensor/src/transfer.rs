//! Host/device transfer: pinned (page-locked) host memory and non-blocking copies.
//!
//! Pinned memory only exists with an accelerator. On CPU-only machines these functions take
//! a no-op path (plain host memory, synchronous copies) so the same code runs everywhere.

use crate::cuda::cuda_is_available;
use crate::error::Result;
use crate::ffi;
use tch::{Device, Kind, Tensor};

/// Whether this process can allocate pinned host memory (true exactly when CUDA is usable).
pub fn pinning_supported() -> bool {
    cuda_is_available()
}

/// `tensor.pin_memory()`: a pinned copy of a CPU tensor where CUDA is available, else a
/// shallow clone of the tensor itself (the no-op path).
pub fn pin_memory(tensor: &Tensor) -> Tensor {
    if pinning_supported() && tensor.device() == Device::Cpu && !is_pinned(tensor) {
        tensor.pin_memory(Device::Cuda(0))
    } else {
        tensor.shallow_clone()
    }
}

/// An uninitialised host tensor of `shape`, pinned where CUDA is available; meant to be
/// allocated once and reused (the DataLoader keeps a pool of these).
pub fn empty_pinned(shape: &[i64], kind: Kind) -> Result<Tensor> {
    if !pinning_supported() {
        return Ok(Tensor::empty(shape, (kind, Device::Cpu)));
    }
    let mut raw: ffi::RawTensor = std::ptr::null_mut();
    // SAFETY: shape points at shape.len() sizes; on success the shim hands over a new tensor.
    ffi::check("empty_pinned", unsafe {
        ffi::tl_empty_pinned(shape.as_ptr(), shape.len(), ffi::scalar_type_code(kind), &mut raw)
    })?;
    // SAFETY: raw is a freshly allocated at::Tensor owned by nobody else.
    Ok(unsafe { Tensor::from_ptr(raw) })
}

/// Whether `tensor` lives in pinned host memory (always false without CUDA).
pub fn is_pinned(tensor: &Tensor) -> bool {
    pinning_supported() && tensor.device() == Device::Cpu && tensor.is_pinned(Device::Cuda(0))
}

/// `tensor.to(device, non_blocking=True)`: asynchronous from pinned memory to a GPU, a plain
/// copy otherwise. The result must not be read on the host before the stream is synchronised,
/// which any read back (`to_device(Cpu)`, `double_value`, ...) does.
pub fn to_device_non_blocking(tensor: &Tensor, device: Device) -> Tensor {
    tensor.to_device_(device, tensor.kind(), true, false)
}
