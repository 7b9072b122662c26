//! CosineAnnealingLR: half a cosine from the base lr down to `eta_min` over `t_max` steps.

use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::scheduler::{require, schedule_bookkeeping, start, LrScheduler};

/// `torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max, eta_min=0)`:
/// `lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2`. Past `t_max` the
/// cosine continues (the lr rises again), as in PyTorch.
#[derive(Debug, Clone)]
pub struct CosineAnnealingLR {
    t_max: u64,
    eta_min: f64,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl CosineAnnealingLR {
    /// Builds the schedule over `optimizer`'s current lrs and applies epoch 0.
    pub fn new(optimizer: &mut dyn Optimizer, t_max: u64, eta_min: f64) -> Result<Self> {
        require("CosineAnnealingLR", "t_max", t_max as f64, t_max > 0, "must be > 0")?;
        let s = CosineAnnealingLR { t_max, eta_min, base_lrs: optimizer.lrs(), last_epoch: 0 };
        start(s, optimizer)
    }
}

impl LrScheduler for CosineAnnealingLR {
    schedule_bookkeeping!("CosineAnnealingLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let c = (std::f64::consts::PI * epoch as f64 / self.t_max as f64).cos();
        Ok(self.base_lrs.iter().map(|b| self.eta_min + (b - self.eta_min) * (1.0 + c) / 2.0).collect())
    }
}
