//! Saving and restoring torch's default random generators (`torch.get_rng_state()`,
//! `torch.cuda.get_rng_state_all()`), so a resumed run draws the same numbers; and drawing
//! from them under a seed of one's own without disturbing them (`torch.random.fork_rng`).

use crate::cuda::cuda_status;
use crate::error::Result;
use crate::ffi;
use std::ffi::{c_int, c_void};
use tch::Tensor;

extern "C" {
    fn tl_rng_get_state(device_type: c_int, index: c_int, out: *mut *mut c_void) -> c_int;
    fn tl_rng_set_state(device_type: c_int, index: c_int, state: *mut c_void) -> c_int;
}

fn get(device_type: c_int, index: c_int) -> Result<Tensor> {
    let mut raw: *mut c_void = std::ptr::null_mut();
    // SAFETY: raw is a valid out-pointer; on success it holds a new at::Tensor we now own.
    ffi::check("get_rng_state", unsafe { tl_rng_get_state(device_type, index, &mut raw) })?;
    // SAFETY: as above.
    Ok(unsafe { Tensor::from_ptr(raw as *mut torch_sys::C_tensor) })
}

fn set(device_type: c_int, index: c_int, state: &Tensor) -> Result<()> {
    // SAFETY: state is a live at::Tensor borrowed for the call; the generator copies it.
    ffi::check("set_rng_state", unsafe {
        tl_rng_set_state(device_type, index, state.as_ptr() as *mut c_void)
    })
}

/// The random state of torch's generators: the CPU one and one per visible CUDA device.
#[derive(Debug)]
pub struct TorchRngState {
    /// `torch.get_rng_state()`: a uint8 tensor.
    pub cpu: Tensor,
    /// `torch.cuda.get_rng_state_all()`, empty without CUDA.
    pub cuda: Vec<Tensor>,
}

/// Reads the state of every default generator.
pub fn torch_rng_state() -> Result<TorchRngState> {
    let count = cuda_status().device_count;
    let cuda = (0..count).map(|i| get(1, i as c_int)).collect::<Result<_>>()?;
    Ok(TorchRngState { cpu: get(0, -1)?, cuda })
}

/// Restores a state read by [`torch_rng_state`]. CUDA states beyond the visible devices are
/// ignored (a run resumed on fewer GPUs), as `torch.cuda.set_rng_state_all` would fail on them.
pub fn set_torch_rng_state(state: &TorchRngState) -> Result<()> {
    set(0, -1, &state.cpu)?;
    let count = cuda_status().device_count;
    for (i, s) in state.cuda.iter().enumerate().take(count) {
        set(1, i as c_int, s)?;
    }
    Ok(())
}

/// Runs `f` with torch's default generators (the CPU one and every visible CUDA device's)
/// seeded with `seed`, as `with torch.random.fork_rng(): torch.manual_seed(seed); f()` does,
/// and restores their previous states after, so the draws of everything else (dropout, a
/// model's initialisation) are as if `f` had not run. The states are restored even when `f`
/// panics.
pub fn with_torch_seed<R>(seed: u64, f: impl FnOnce() -> R) -> Result<R> {
    let saved = torch_rng_state()?;
    // libtorch takes the seed as u64 internally; tch's signature is i64, so pass the bits.
    tch::manual_seed(seed as i64);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    set_torch_rng_state(&saved)?;
    out.map_err(|payload| std::panic::resume_unwind(payload))
}
