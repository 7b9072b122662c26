//! What the workloads of `workloads.rs` and `allreduce.rs` share: the [`Workload`] trait and a
//! training step's inputs and optimizer.

use anyhow::Result;
use tch::{Kind, Tensor};
use torchlight_nn::{named_parameters, Module};
use torchlight_optim::{AdamConfig, AdamW, ParamGroup};

/// One workload: built once (models, data, optimizer state), then timed by [`Workload::run`].
pub trait Workload {
    /// One timed repetition.
    fn run(&mut self) -> Result<()>;
}

/// Deterministic inputs for a model workload.
pub(crate) fn inputs(batch: i64, size: i64) -> (Tensor, Tensor) {
    tch::manual_seed(0);
    let x = Tensor::randn([batch, 3, size, size], (Kind::Float, tch::Device::Cpu));
    let y = Tensor::randint(10, [batch], (Kind::Int64, tch::Device::Cpu));
    (x, y)
}

/// AdamW at lr 1e-3 over every parameter of `model` (as `torch.optim.AdamW(model.parameters(), lr=1e-3)`).
pub(crate) fn adamw(model: &dyn Module) -> Result<AdamW> {
    Ok(AdamW::new(vec![ParamGroup::new(named_parameters(model), AdamConfig::adamw().with_lr(1e-3))])?)
}
