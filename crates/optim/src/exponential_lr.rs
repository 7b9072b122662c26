//! ExponentialLR: decay the lr by `gamma` every epoch (`torch.optim.lr_scheduler.ExponentialLR`).

use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::scheduler::{schedule_bookkeeping, start, LrScheduler};

/// `ExponentialLR(optimizer, gamma)`: `lr = base_lr * gamma^epoch`.
#[derive(Debug, Clone)]
pub struct ExponentialLR {
    gamma: f64,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl ExponentialLR {
    /// Builds the schedule over `optimizer`'s current lrs and applies epoch 0.
    pub fn new(optimizer: &mut dyn Optimizer, gamma: f64) -> Result<Self> {
        let s = ExponentialLR { gamma, base_lrs: optimizer.lrs(), last_epoch: 0 };
        start(s, optimizer)
    }
}

impl LrScheduler for ExponentialLR {
    schedule_bookkeeping!("ExponentialLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        Ok(self.base_lrs.iter().map(|b| b * self.gamma.powf(epoch as f64)).collect())
    }
}
