//! LinearLR: linear warmup (or decay) of the lr by a factor (`torch.optim.lr_scheduler.LinearLR`).

use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::scheduler::{require, schedule_bookkeeping, start, LrScheduler};
use serde::{Deserialize, Serialize};

/// LinearLR's settings, with PyTorch's defaults: `start_factor = 1/3`, `end_factor = 1.0`,
/// `total_iters = 5`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinearLRConfig {
    /// Factor of the base lr at step 0, in (0, 1].
    pub start_factor: f64,
    /// Factor of the base lr from `total_iters` on, in [0, 1].
    pub end_factor: f64,
    /// Steps over which the factor moves linearly.
    pub total_iters: u64,
}

impl Default for LinearLRConfig {
    fn default() -> Self {
        LinearLRConfig { start_factor: 1.0 / 3.0, end_factor: 1.0, total_iters: 5 }
    }
}

impl LinearLRConfig {
    /// A warmup from `start_factor` to the full lr over `total_iters` steps.
    pub fn warmup(start_factor: f64, total_iters: u64) -> Self {
        LinearLRConfig { start_factor, end_factor: 1.0, total_iters }
    }
    /// Sets `start_factor`.
    pub fn with_start_factor(self, start_factor: f64) -> Self {
        LinearLRConfig { start_factor, ..self }
    }
    /// Sets `end_factor`.
    pub fn with_end_factor(self, end_factor: f64) -> Self {
        LinearLRConfig { end_factor, ..self }
    }
    /// Sets `total_iters`.
    pub fn with_total_iters(self, total_iters: u64) -> Self {
        LinearLRConfig { total_iters, ..self }
    }
}

/// `LinearLR`: `lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters)`,
/// the usual linear warmup.
#[derive(Debug, Clone)]
pub struct LinearLR {
    config: LinearLRConfig,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl LinearLR {
    /// Builds the schedule over `optimizer`'s current lrs and applies epoch 0.
    pub fn new(optimizer: &mut dyn Optimizer, config: LinearLRConfig) -> Result<Self> {
        let c = config;
        require(
            "LinearLR",
            "start_factor",
            c.start_factor,
            c.start_factor > 0.0 && c.start_factor <= 1.0,
            "must be in (0, 1]",
        )?;
        require(
            "LinearLR",
            "end_factor",
            c.end_factor,
            (0.0..=1.0).contains(&c.end_factor),
            "must be in [0, 1]",
        )?;
        require("LinearLR", "total_iters", c.total_iters as f64, c.total_iters > 0, "must be > 0")?;
        let s = LinearLR { config, base_lrs: optimizer.lrs(), last_epoch: 0 };
        start(s, optimizer)
    }
}

impl LrScheduler for LinearLR {
    schedule_bookkeeping!("LinearLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let c = &self.config;
        let done = epoch.min(c.total_iters) as f64;
        let factor = c.start_factor + (c.end_factor - c.start_factor) * done / c.total_iters as f64;
        Ok(self.base_lrs.iter().map(|b| b * factor).collect())
    }
}
