//! OneCycleLR: the 1cycle policy, lr up to `max_lr` then annealed far below the start, with momentum cycled inversely.

use crate::error::{OptimError, Result};
use crate::optimizer::{check_count, Optimizer};
use crate::scheduler::{require, schedule_bookkeeping, start, LrScheduler};
use serde::{Deserialize, Serialize};

/// How OneCycleLR interpolates within a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnealStrategy {
    /// Half a cosine (PyTorch's default, `"cos"`).
    Cos,
    /// A straight line (`"linear"`).
    Linear,
}

/// OneCycleLR's settings, with PyTorch's defaults: `pct_start = 0.3`, cosine annealing,
/// `cycle_momentum = true` (between `base_momentum = 0.85` and `max_momentum = 0.95`),
/// `div_factor = 25`, `final_div_factor = 1e4`, `three_phase = false`. `max_lrs` holds one
/// lr per group, or one for all; `total_steps` is `epochs * steps_per_epoch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneCycleLRConfig {
    /// Peak lr of each group (or one for all).
    pub max_lrs: Vec<f64>,
    /// Steps in the cycle; stepping past it is an error, as in PyTorch.
    pub total_steps: u64,
    /// Fraction of the cycle spent increasing the lr.
    pub pct_start: f64,
    /// Interpolation within each phase.
    pub anneal_strategy: AnnealStrategy,
    /// Cycle the optimizer's momentum (SGD's `momentum`, Adam's `betas.0`) inversely to the lr.
    pub cycle_momentum: bool,
    /// Momentum at the lr's peak.
    pub base_momentum: f64,
    /// Momentum at the start and end.
    pub max_momentum: f64,
    /// Initial lr = `max_lr / div_factor`.
    pub div_factor: f64,
    /// Final lr = initial lr / `final_div_factor`.
    pub final_div_factor: f64,
    /// Use a third phase that anneals to the final lr after going back down to the initial lr.
    pub three_phase: bool,
}

impl OneCycleLRConfig {
    /// PyTorch's defaults with these peak lrs and cycle length.
    pub fn new(max_lrs: Vec<f64>, total_steps: u64) -> Self {
        OneCycleLRConfig {
            max_lrs,
            total_steps,
            pct_start: 0.3,
            anneal_strategy: AnnealStrategy::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
        }
    }
    /// Sets `pct_start`.
    pub fn with_pct_start(self, pct_start: f64) -> Self {
        OneCycleLRConfig { pct_start, ..self }
    }
    /// Sets `anneal_strategy`.
    pub fn with_anneal_strategy(self, anneal_strategy: AnnealStrategy) -> Self {
        OneCycleLRConfig { anneal_strategy, ..self }
    }
    /// Sets `cycle_momentum`.
    pub fn with_cycle_momentum(self, cycle_momentum: bool) -> Self {
        OneCycleLRConfig { cycle_momentum, ..self }
    }
    /// Sets `base_momentum` and `max_momentum`.
    pub fn with_momentum_range(self, base_momentum: f64, max_momentum: f64) -> Self {
        OneCycleLRConfig { base_momentum, max_momentum, ..self }
    }
    /// Sets `div_factor`.
    pub fn with_div_factor(self, div_factor: f64) -> Self {
        OneCycleLRConfig { div_factor, ..self }
    }
    /// Sets `final_div_factor`.
    pub fn with_final_div_factor(self, final_div_factor: f64) -> Self {
        OneCycleLRConfig { final_div_factor, ..self }
    }
    /// Sets `three_phase`.
    pub fn with_three_phase(self, three_phase: bool) -> Self {
        OneCycleLRConfig { three_phase, ..self }
    }
}

/// One phase: it ends at `end_step`, going from one (lr, momentum) corner to another.
#[derive(Debug, Clone, Copy)]
struct Phase {
    end_step: f64,
    start_lr: Corner,
    end_lr: Corner,
    start_momentum: f64,
    end_momentum: f64,
}

#[derive(Debug, Clone, Copy)]
enum Corner {
    Initial,
    Max,
    Min,
}

/// `torch.optim.lr_scheduler.OneCycleLR`, stepped once per batch.
#[derive(Debug, Clone)]
pub struct OneCycleLR {
    config: OneCycleLRConfig,
    max_lrs: Vec<f64>,
    phases: Vec<Phase>,
    base_lrs: Vec<f64>,
    last_epoch: u64,
}

impl OneCycleLR {
    /// Builds the schedule and applies step 0: lr = `max_lr / div_factor` and, with
    /// `cycle_momentum`, momentum = `max_momentum`.
    pub fn new(optimizer: &mut dyn Optimizer, config: OneCycleLRConfig) -> Result<Self> {
        const NAME: &str = "OneCycleLR";
        let c = &config;
        require(NAME, "total_steps", c.total_steps as f64, c.total_steps > 0, "must be > 0")?;
        require(NAME, "pct_start", c.pct_start, (0.0..=1.0).contains(&c.pct_start), "must be in [0, 1]")?;
        let groups = optimizer.lrs().len();
        let max_lrs = if c.max_lrs.len() == 1 { vec![c.max_lrs[0]; groups] } else { c.max_lrs.clone() };
        check_count("OneCycleLR max_lrs", groups, max_lrs.len())?;
        let t = c.total_steps as f64;
        let (lo, hi) = (c.base_momentum, c.max_momentum);
        let phase = |end_step, start_lr, end_lr, start_momentum, end_momentum| Phase {
            end_step,
            start_lr,
            end_lr,
            start_momentum,
            end_momentum,
        };
        let phases = if c.three_phase {
            vec![
                phase(c.pct_start * t - 1.0, Corner::Initial, Corner::Max, hi, lo),
                phase(2.0 * c.pct_start * t - 2.0, Corner::Max, Corner::Initial, lo, hi),
                phase(t - 1.0, Corner::Initial, Corner::Min, hi, hi),
            ]
        } else {
            vec![
                phase(c.pct_start * t - 1.0, Corner::Initial, Corner::Max, hi, lo),
                phase(t - 1.0, Corner::Max, Corner::Min, lo, hi),
            ]
        };
        if c.cycle_momentum && !(c.base_momentum >= 0.0 && c.max_momentum < 1.0) {
            return Err(OptimError::invalid(
                NAME,
                "max_momentum",
                c.max_momentum,
                "momenta must be in [0, 1)",
            ));
        }
        let s = OneCycleLR { max_lrs, phases, base_lrs: optimizer.lrs(), last_epoch: 0, config };
        start(s, optimizer)
    }

    fn corner(&self, corner: Corner, group: usize) -> f64 {
        let initial = self.max_lrs[group] / self.config.div_factor;
        match corner {
            Corner::Initial => initial,
            Corner::Max => self.max_lrs[group],
            Corner::Min => initial / self.config.final_div_factor,
        }
    }

    fn anneal(&self, start: f64, end: f64, pct: f64) -> f64 {
        match self.config.anneal_strategy {
            AnnealStrategy::Cos => end + (start - end) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0),
            AnnealStrategy::Linear => (end - start) * pct + start,
        }
    }

    /// The phase of `step` and how far into it (PyTorch's loop in `get_lr`).
    fn locate(&self, step: u64) -> Result<(Phase, f64)> {
        if step > self.config.total_steps {
            return Err(OptimError::SchedulerFinished {
                scheduler: "OneCycleLR",
                step,
                total_steps: self.config.total_steps,
            });
        }
        let step = step as f64;
        let mut start_step = 0.0;
        for (i, phase) in self.phases.iter().enumerate() {
            if step <= phase.end_step || i == self.phases.len() - 1 {
                return Ok((*phase, (step - start_step) / (phase.end_step - start_step)));
            }
            start_step = phase.end_step;
        }
        unreachable!("the last phase always matches")
    }
}

impl LrScheduler for OneCycleLR {
    schedule_bookkeeping!("OneCycleLR");

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let (phase, pct) = self.locate(epoch)?;
        Ok((0..self.max_lrs.len())
            .map(|g| self.anneal(self.corner(phase.start_lr, g), self.corner(phase.end_lr, g), pct))
            .collect())
    }

    fn momenta_at(&self, epoch: u64) -> Option<Vec<f64>> {
        if !self.config.cycle_momentum {
            return None;
        }
        let (phase, pct) = self.locate(epoch).ok()?;
        Some(vec![self.anneal(phase.start_momentum, phase.end_momentum, pct); self.max_lrs.len()])
    }
}
