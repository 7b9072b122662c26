//! `Distributed`: what the Trainer needs of a data-parallel world, as a trait, so that
//! torchlight-train builds without the collectives (torchlight-distributed implements it).

use crate::error::Result;
use tch::Tensor;
use torchlight_nn::Module;

/// A data-parallel world the [`Trainer`](crate::Trainer) trains in, one process per rank,
/// each holding a replica of the model and a shard of the data (a `DistributedSampler`).
///
/// torchlight-distributed implements it for its `DistributedDataParallel` and for
/// `DataParallel` (which builds one for the model `fit` gets). The Trainer calls, on every
/// rank at the same points:
/// - [`broadcast_parameters`](Self::broadcast_parameters) when `fit` starts (after a resume
///   loaded the checkpoint), so every replica starts from rank 0's weights;
/// - [`sync_gradients`](Self::sync_gradients) once per optimizer step, after the last
///   micro-batch's backward and before the non-finite guard, the unscale and the clip; earlier
///   micro-batches only accumulate (torch's `no_sync()`);
/// - [`all_reduce_sum`](Self::all_reduce_sum) and [`all_gather`](Self::all_gather) on the
///   metrics' state tensors before an epoch's metrics are read, so every rank sees the same
///   figures and takes the same early-stopping and best-checkpoint decisions;
/// - [`barrier`](Self::barrier) at the end of `fit`, so rank 0's last writes are done before
///   any rank goes on (e.g. to load the best checkpoint).
pub trait Distributed {
    /// This process's rank, `0..world_size`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn world_size(&self) -> usize;

    /// Whether this is rank 0, the one that writes run folders, logs and checkpoints.
    fn is_main(&self) -> bool {
        self.rank() == 0
    }

    /// Copies rank 0's parameters and buffers of `model` to every rank.
    fn broadcast_parameters(&mut self, model: &dyn Module) -> Result<()>;

    /// Averages the gradients of `model`'s trainable parameters over the ranks, in place.
    fn sync_gradients(&mut self, model: &dyn Module) -> Result<()>;

    /// Sums each tensor over the ranks, in place (every rank passes the same shapes and dtypes
    /// in the same order).
    fn all_reduce_sum(&self, tensors: &[Tensor]) -> Result<()>;

    /// Every rank's `tensor` (the same shape and dtype on every rank), in rank order.
    fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>>;

    /// Returns once every rank has reached it.
    fn barrier(&self) -> Result<()>;

    /// `torch.nn.SyncBatchNorm.convert_sync_batchnorm`: makes every BatchNorm of `model`
    /// normalise its training batches with the statistics of every rank's batch (nn's
    /// `BatchNorm2d::sync` hook), leaving its parameters, buffers and evaluation unchanged.
    /// Every rank calls it for the same model. Returns how many layers now synchronise; the
    /// default, for a world that cannot, converts none.
    fn convert_sync_batch_norm(&self, model: &mut dyn Module) -> usize {
        let _ = model;
        0
    }
}
