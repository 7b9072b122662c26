//! Synchronised BatchNorm (`torch.nn.SyncBatchNorm`): nn's BatchNorm hook over a process group.

use crate::ffi;
use crate::group::ProcessGroup;
use std::sync::Arc;
use tch::Tensor;
use torchlight_nn::{set_batch_norm_sync, BatchNormSync, Module};

/// The synchronised batch normalisation of one process group: nn's [`BatchNormSync`] over
/// c10d's collectives (`csrc/sync_bn.cpp`, a C++ autograd function as PyTorch's
/// `torch/nn/modules/_functions.py` `SyncBatchNorm`).
///
/// The forward pass all-gathers every rank's per-channel mean, M2 and count (so uneven and
/// empty per-rank batches work), normalises with the world's mean and biased variance and
/// updates the running statistics with the world's unbiased variance; the backward pass
/// all-reduces `sum_dy` and `sum_dy_xmu`, so the input gradients are those of one process on
/// the concatenated batch. Weight and bias gradients stay this rank's share, summed or averaged
/// by [`DistributedDataParallel`](crate::DistributedDataParallel) as PyTorch's DDP does. CUDA
/// tensors use ATen's sync-BN kernels (`batch_norm_stats`, `batch_norm_gather_stats_with_counts`,
/// `batch_norm_elemt`, `batch_norm_backward_reduce`, `batch_norm_backward_elemt`), which are
/// CUDA-only; other devices use plain ATen ops with the same collectives.
///
/// Every rank must run the same synchronised layers in the same order, with and without
/// gradients alike, as in PyTorch.
#[derive(Debug, Clone)]
pub struct SyncBatchNorm {
    group: ProcessGroup,
}

impl SyncBatchNorm {
    /// Synchronises over `group`.
    pub fn new(group: &ProcessGroup) -> Self {
        SyncBatchNorm { group: group.clone() }
    }

    /// The group the statistics are synchronised over.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }
}

fn raw_or_null(t: Option<&Tensor>) -> ffi::RawTensor {
    t.map_or(std::ptr::null_mut(), ffi::raw)
}

impl BatchNormSync for SyncBatchNorm {
    fn batch_norm(
        &self,
        xs: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        momentum: f64,
        eps: f64,
    ) -> Tensor {
        let mut out: ffi::RawTensor = std::ptr::null_mut();
        // SAFETY: the group and every tensor are live for the call; the shim writes `out` (a
        // new heap `at::Tensor`, as tch's own C_tensor) on success, and changes only the
        // running statistics' data in place, as tch's in-place ops do through `&Tensor`.
        let rc = unsafe {
            ffi::tl_dist_sync_batch_norm(
                self.group.raw(),
                ffi::millis(self.group.timeout()),
                ffi::raw(xs),
                raw_or_null(weight),
                raw_or_null(bias),
                raw_or_null(running_mean),
                raw_or_null(running_var),
                momentum,
                eps,
                &mut out,
            )
        };
        if let Err(e) = ffi::check(Some(self.group.rank()), || "sync_batch_norm".to_string(), rc) {
            panic!("{e}");
        }
        // SAFETY: on success `out` is a tensor the shim allocated for us to own.
        unsafe { Tensor::from_ptr(out) }
    }
}

/// `torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)`: every
/// [`BatchNorm2d`](torchlight_nn::BatchNorm2d) of `module` synchronises its batch statistics
/// over `group` in training forwards. Parameters, buffers, keys and evaluation are unchanged,
/// so checkpoints and exports are those of plain BatchNorm; frozen layers
/// (`freeze_batch_norm`, the recipes' `model.freeze_bn`) stay plain while frozen. Returns how
/// many layers it converted. [`revert_sync_batchnorm`] undoes it.
pub fn convert_sync_batchnorm(module: &mut dyn Module, group: &ProcessGroup) -> usize {
    set_batch_norm_sync(module, Some(Arc::new(SyncBatchNorm::new(group))))
}

/// Makes every BatchNorm of `module` plain again; returns how many layers it visited.
pub fn revert_sync_batchnorm(module: &mut dyn Module) -> usize {
    set_batch_norm_sync(module, None)
}
