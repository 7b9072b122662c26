//! The CUDA caching allocator from Rust: `torch.cuda.empty_cache()` and the memory counters
//! (`memory_allocated`, `memory_reserved`, `max_memory_allocated`, `reset_peak_memory_stats`),
//! reached through the shim as `c10::getDeviceAllocator(CUDA)` (libtorch's generic device
//! allocator interface, in `libc10`, which the CUDA backend registers when it loads).
//!
//! Dropping a tensor gives its block back to libtorch's cache, not to the driver: the next
//! allocations of the process reuse it, but `nvidia-smi` and other processes still see it
//! taken. [`cuda_empty_cache`] hands the unused cached blocks back, as PyTorch Lightning's
//! batch-size finder does between its tries (`garbage_collection_cuda`).

use crate::cuda::cuda_status;
use crate::error::{Result, TensorError};
use crate::ffi;
use std::ffi::c_int;

/// What libtorch's CUDA caching allocator holds on one device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaMemory {
    /// Bytes held by live tensors (`torch.cuda.memory_allocated`).
    pub allocated: u64,
    /// Bytes the allocator holds from the driver, in use or cached
    /// (`torch.cuda.memory_reserved`).
    pub reserved: u64,
    /// The largest `allocated` since the process started or since the last
    /// [`cuda_reset_peak_memory_stats`] (`torch.cuda.max_memory_allocated`).
    pub peak_allocated: u64,
}

/// `torch.cuda.empty_cache()`: gives the caching allocator's unused blocks back to the driver
/// (live tensors keep theirs). Does nothing where CUDA is not available, so it is safe to call
/// on any machine.
pub fn cuda_empty_cache() -> Result<()> {
    if !cuda_status().available {
        return Ok(());
    }
    // SAFETY: takes and returns nothing; libtorch's CUDA backend is loaded (checked above).
    ffi::check("cuda_empty_cache", unsafe { ffi::tl_cuda_empty_cache() })
}

/// The caching allocator's counters for CUDA device `index`. An error where CUDA is not
/// available or the device does not exist; a device the process has not used yet may report an
/// error too, as libtorch sets up its allocator state on the first allocation there.
pub fn cuda_memory(index: usize) -> Result<CudaMemory> {
    check_device(index)?;
    let (mut allocated, mut reserved, mut peak) = (0i64, 0i64, 0i64);
    // SAFETY: three valid out-pointers; the index was checked against the device count.
    ffi::check("cuda_memory", unsafe {
        ffi::tl_cuda_memory_stats(index as c_int, &mut allocated, &mut reserved, &mut peak)
    })?;
    let bytes = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(CudaMemory { allocated: bytes(allocated), reserved: bytes(reserved), peak_allocated: bytes(peak) })
}

/// `torch.cuda.reset_peak_memory_stats(index)`: the peak of [`cuda_memory`] restarts from what
/// is allocated now.
pub fn cuda_reset_peak_memory_stats(index: usize) -> Result<()> {
    check_device(index)?;
    // SAFETY: the index was checked against the device count.
    ffi::check("cuda_reset_peak_memory_stats", unsafe {
        ffi::tl_cuda_reset_peak_memory_stats(index as c_int)
    })
}

fn check_device(index: usize) -> Result<()> {
    let status = cuda_status();
    if !status.available {
        return Err(TensorError::CudaUnavailable {
            requested: format!("cuda:{index}"),
            reason: status.reason.clone().unwrap_or_else(|| "no CUDA device".into()),
        });
    }
    if index >= status.device_count || index > i32::MAX as usize {
        return Err(TensorError::DeviceOutOfRange { index, count: status.device_count });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptying_the_cache_is_a_no_op_without_cuda_and_the_counters_say_why_they_are_missing() {
        if cuda_status().available {
            cuda_empty_cache().unwrap();
            let m = cuda_memory(0).unwrap();
            assert!(m.reserved >= m.allocated && m.peak_allocated >= m.allocated, "{m:?}");
            return;
        }
        cuda_empty_cache().unwrap();
        let err = cuda_memory(0).unwrap_err().to_string();
        assert!(err.contains("cuda:0") && err.contains("CUDA is not available"), "{err}");
        assert!(cuda_reset_peak_memory_stats(0).is_err());
    }
}
