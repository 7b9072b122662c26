//! StepLR: decay the lr by `gamma` every `step_size` epochs (`torch.optim.lr_scheduler.StepLR`).

use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::scheduler::{require, schedule_bookkeeping, start, LrScheduler};

/// `StepLR(optimizer, step_size, gamma=0.1)`: `lr = base_lr * gamma^(epoch / step_size)`
/// (integer division).
#[derive(Debug, Clone)]
pub struct StepLR {
    step_size: u64,
    gamma: f64,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl StepLR {
    /// Builds the schedule over `optimizer`'s current lrs and applies epoch 0.
    /// `gamma` is PyTorch's default 0.1 unless given.
    pub fn new(optimizer: &mut dyn Optimizer, step_size: u64, gamma: f64) -> Result<Self> {
        require("StepLR", "step_size", step_size as f64, step_size > 0, "must be > 0")?;
        let s = StepLR { step_size, gamma, base_lrs: optimizer.lrs(), last_epoch: 0 };
        start(s, optimizer)
    }
}

impl LrScheduler for StepLR {
    schedule_bookkeeping!("StepLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let k = (epoch / self.step_size) as f64;
        Ok(self.base_lrs.iter().map(|b| b * self.gamma.powf(k)).collect())
    }
}
