//! Bindings to the c10d shim in `csrc/dist.cpp` (and `csrc/nccl.cpp` with the `nccl` feature).

use crate::error::{DistributedError, Result};
use std::ffi::{c_char, c_int, CStr};

/// tch's `C_tensor` pointer: a heap-allocated `at::Tensor`.
pub(crate) type RawTensor = *mut torch_sys::C_tensor;

/// `tl_dist_store`: a `c10d::TCPStore`.
#[repr(C)]
pub(crate) struct RawStore {
    _private: [u8; 0],
}

/// `tl_dist_group`: a `c10d::Backend` (ProcessGroupGloo or ProcessGroupNCCL).
#[repr(C)]
pub(crate) struct RawGroup {
    _private: [u8; 0],
}

/// `tl_dist_work`: a `c10d::Work`.
#[repr(C)]
pub(crate) struct RawWork {
    _private: [u8; 0],
}

extern "C" {
    /// torchlight-tensor's error store (`csrc/guard.h`), which this shim writes too.
    fn tl_last_error() -> *const c_char;

    pub(crate) fn tl_dist_store_open(
        host: *const c_char,
        port: c_int,
        world_size: c_int,
        is_server: bool,
        wait_workers: bool,
        multi_tenant: bool,
        timeout_ms: i64,
        out: *mut *mut RawStore,
    ) -> c_int;
    pub(crate) fn tl_dist_store_port(store: *const RawStore, port: *mut c_int) -> c_int;
    pub(crate) fn tl_dist_store_free(store: *mut RawStore);

    pub(crate) fn tl_dist_gloo_new(
        store: *mut RawStore,
        prefix: *const c_char,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        interfaces: *const c_char,
        threads: c_int,
        out: *mut *mut RawGroup,
    ) -> c_int;
    #[cfg(feature = "nccl")]
    pub(crate) fn tl_dist_nccl_new(
        store: *mut RawStore,
        prefix: *const c_char,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        out: *mut *mut RawGroup,
    ) -> c_int;
    pub(crate) fn tl_dist_group_set_timeout(group: *mut RawGroup, timeout_ms: i64) -> c_int;
    pub(crate) fn tl_dist_group_free(group: *mut RawGroup);

    pub(crate) fn tl_dist_all_reduce(
        group: *mut RawGroup,
        tensor: RawTensor,
        op: c_int,
        out: *mut *mut RawWork,
    ) -> c_int;
    pub(crate) fn tl_dist_broadcast(
        group: *mut RawGroup,
        tensor: RawTensor,
        root: c_int,
        out: *mut *mut RawWork,
    ) -> c_int;
    pub(crate) fn tl_dist_all_gather(
        group: *mut RawGroup,
        outputs: *const RawTensor,
        n_outputs: usize,
        input: RawTensor,
        out: *mut *mut RawWork,
    ) -> c_int;
    pub(crate) fn tl_dist_barrier(group: *mut RawGroup, out: *mut *mut RawWork) -> c_int;
    pub(crate) fn tl_dist_set_grad(param: RawTensor, grad: RawTensor) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tl_dist_sync_batch_norm(
        group: *mut RawGroup,
        timeout_ms: i64,
        input: RawTensor,
        weight: RawTensor,
        bias: RawTensor,
        running_mean: RawTensor,
        running_var: RawTensor,
        momentum: f64,
        eps: f64,
        out: *mut RawTensor,
    ) -> c_int;
    pub(crate) fn tl_dist_work_wait(work: *mut RawWork, timeout_ms: i64) -> c_int;
    pub(crate) fn tl_dist_work_free(work: *mut RawWork);
}

/// Turns a shim return code into a `Result`, fetching c10d's message on failure; `rank` is
/// `None` for the launcher.
pub(crate) fn check(rank: Option<usize>, op: impl FnOnce() -> String, rc: c_int) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: the shim returns a pointer to a thread-local, NUL-terminated string that lives
    // until the next failing call on this thread; we copy it out at once.
    let mut message = unsafe { CStr::from_ptr(tl_last_error()) }.to_string_lossy().into_owned();
    message.push_str(hint(&message));
    Err(DistributedError::Torch { rank, op: op(), message })
}

/// What a c10d message usually means, for the two failures every user meets.
fn hint(message: &str) -> &'static str {
    let lower = message.to_lowercase();
    if lower.contains("closed by peer") || lower.contains("reset by peer") || lower.contains("broken pipe") {
        " (a peer rank exited or lost its connection; its own output says why)"
    } else if lower.contains("timed out") || lower.contains("timeout") {
        " (a peer rank did not take part within the timeout: it may have stopped, be stuck or slower, \
         or call collectives in another order)"
    } else {
        ""
    }
}

/// The raw pointer tch keeps for a tensor, for passing to the shim. The shim writes through
/// it only into the tensor's data (collectives are in place), as tch's own in-place ops do
/// through `&Tensor`.
pub(crate) fn raw(tensor: &tch::Tensor) -> RawTensor {
    tensor.as_ptr() as RawTensor
}

/// Milliseconds for the shim, saturating.
pub(crate) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
