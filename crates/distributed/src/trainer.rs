//! The Trainer's [`Distributed`] world: implemented for [`DistributedDataParallel`], and
//! [`DataParallel`], which makes one for whatever model `fit` trains.

use crate::ddp::{DdpConfig, DistributedDataParallel};
use crate::error::DistributedError;
use crate::group::{ProcessGroup, ReduceOp};
use crate::sync_bn::convert_sync_batchnorm;
use tch::Tensor;
use torchlight_nn::Module;
use torchlight_train::{Distributed, TrainError};

fn train_error(e: DistributedError) -> TrainError {
    TrainError::Distributed(Box::new(e))
}

fn all_reduce_sum(group: &ProcessGroup, tensors: &[Tensor]) -> torchlight_train::Result<()> {
    if tensors.is_empty() {
        return Ok(());
    }
    let refs: Vec<&Tensor> = tensors.iter().collect();
    group.all_reduce_many(&refs, ReduceOp::Sum).map_err(train_error)
}

/// The Trainer's world for the model this `DistributedDataParallel` was built for: `fit`
/// fails at its start when given another model.
impl Distributed for DistributedDataParallel {
    fn rank(&self) -> usize {
        self.group().rank()
    }

    fn world_size(&self) -> usize {
        self.group().world_size()
    }

    fn broadcast_parameters(&mut self, model: &dyn Module) -> torchlight_train::Result<()> {
        if !self.is_for(model) {
            return Err(train_error(DistributedError::Mismatch {
                rank: self.group().rank(),
                detail: "the model given to the Trainer is not the one this DistributedDataParallel was \
                         built for (use DataParallel to let the Trainer build it)"
                    .into(),
            }));
        }
        self.broadcast_from_rank0().map_err(train_error)
    }

    fn sync_gradients(&mut self, _model: &dyn Module) -> torchlight_train::Result<()> {
        DistributedDataParallel::sync_gradients(self).map_err(train_error)
    }

    fn all_reduce_sum(&self, tensors: &[Tensor]) -> torchlight_train::Result<()> {
        all_reduce_sum(self.group(), tensors)
    }

    fn all_gather(&self, tensor: &Tensor) -> torchlight_train::Result<Vec<Tensor>> {
        self.group().all_gather(tensor).map_err(train_error)
    }

    fn barrier(&self) -> torchlight_train::Result<()> {
        self.group().barrier().map_err(train_error)
    }

    fn convert_sync_batch_norm(&self, model: &mut dyn Module) -> usize {
        convert_sync_batchnorm(model, self.group())
    }
}

/// The Trainer's data-parallel world over a process group: at the start of each `fit` it
/// builds a [`DistributedDataParallel`] for the model (which checks every rank holds the same
/// model and broadcasts rank 0's weights), and keeps it for later fits of the same model.
///
/// ```no_run
/// # use torchlight_distributed::*;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pg = ProcessGroup::init_from_env(&InitOptions::default())?;
/// let trainer = torchlight_train::Trainer::builder()
///     .distributed(Box::new(DataParallel::new(&pg, DdpConfig::default())))
///     .run_dir("runs/exp_001") // only rank 0 writes it
///     .build()?;
/// # Ok(()) }
/// ```
pub struct DataParallel {
    group: ProcessGroup,
    config: DdpConfig,
    ddp: Option<DistributedDataParallel>,
}

impl DataParallel {
    /// A world over `group`, with `config` for the `DistributedDataParallel` it builds.
    pub fn new(group: &ProcessGroup, config: DdpConfig) -> Self {
        DataParallel { group: group.clone(), config, ddp: None }
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The synchronizer built by the last `fit`'s start, if any.
    pub fn ddp(&self) -> Option<&DistributedDataParallel> {
        self.ddp.as_ref()
    }
}

impl Distributed for DataParallel {
    fn rank(&self) -> usize {
        self.group.rank()
    }

    fn world_size(&self) -> usize {
        self.group.world_size()
    }

    fn broadcast_parameters(&mut self, model: &dyn Module) -> torchlight_train::Result<()> {
        match self.ddp.as_mut() {
            Some(ddp) if ddp.is_for(model) => ddp.broadcast_from_rank0().map_err(train_error),
            _ => {
                let ddp = DistributedDataParallel::new(model, &self.group, self.config.clone())
                    .map_err(train_error)?;
                self.ddp = Some(ddp);
                Ok(())
            }
        }
    }

    fn sync_gradients(&mut self, model: &dyn Module) -> torchlight_train::Result<()> {
        match self.ddp.as_mut() {
            Some(ddp) if ddp.is_for(model) => {
                DistributedDataParallel::sync_gradients(ddp).map_err(train_error)
            }
            _ => Err(train_error(DistributedError::Mismatch {
                rank: self.group.rank(),
                detail: "sync_gradients before broadcast_parameters for this model (the Trainer calls \
                         broadcast_parameters when fit starts)"
                    .into(),
            })),
        }
    }

    fn all_reduce_sum(&self, tensors: &[Tensor]) -> torchlight_train::Result<()> {
        all_reduce_sum(&self.group, tensors)
    }

    fn all_gather(&self, tensor: &Tensor) -> torchlight_train::Result<Vec<Tensor>> {
        self.group.all_gather(tensor).map_err(train_error)
    }

    fn barrier(&self) -> torchlight_train::Result<()> {
        self.group.barrier().map_err(train_error)
    }

    fn convert_sync_batch_norm(&self, model: &mut dyn Module) -> usize {
        convert_sync_batchnorm(model, &self.group)
    }
}
