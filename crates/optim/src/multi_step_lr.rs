//! MultiStepLR: decay the lr by `gamma` at each milestone (`torch.optim.lr_scheduler.MultiStepLR`).

use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::scheduler::{schedule_bookkeeping, start, LrScheduler};

/// `MultiStepLR(optimizer, milestones, gamma=0.1)`: `lr = base_lr * gamma^k` where `k` counts
/// the milestones `<= epoch` (a repeated milestone counts twice, as in PyTorch).
#[derive(Debug, Clone)]
pub struct MultiStepLR {
    milestones: Vec<u64>,
    gamma: f64,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl MultiStepLR {
    /// Builds the schedule over `optimizer`'s current lrs and applies epoch 0.
    pub fn new(optimizer: &mut dyn Optimizer, mut milestones: Vec<u64>, gamma: f64) -> Result<Self> {
        milestones.sort_unstable();
        let s = MultiStepLR { milestones, gamma, base_lrs: optimizer.lrs(), last_epoch: 0 };
        start(s, optimizer)
    }
}

impl LrScheduler for MultiStepLR {
    schedule_bookkeeping!("MultiStepLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let k = self.milestones.partition_point(|&m| m <= epoch) as f64;
        Ok(self.base_lrs.iter().map(|b| b * self.gamma.powf(k)).collect())
    }
}
