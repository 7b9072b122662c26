//! SequentialLR: run schedulers one after another, switching at milestones (e.g. warmup then cosine).

use crate::error::{OptimError, Result};
use crate::optimizer::{check_count, Optimizer};
use crate::scheduler::{check_kind, LrScheduler, SchedulerState};

/// `torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers, milestones)`.
///
/// Scheduler `i` runs from milestone `i - 1` (0 for the first) and restarts at its own step
/// 0 there, so `LinearLR` warmup for 5 epochs then `CosineAnnealingLR` is
/// `SequentialLR::new(opt, vec![warmup, cosine], vec![5])`. As in PyTorch every child uses the
/// first child's base lrs (the optimizer's lrs before any scheduler touched them).
pub struct SequentialLR {
    schedulers: Vec<Box<dyn LrScheduler>>,
    milestones: Vec<u64>,
    last_epoch: u64,
}

impl std::fmt::Debug for SequentialLR {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.schedulers.iter().map(|s| s.name()).collect();
        f.debug_struct("SequentialLR")
            .field("schedulers", &names)
            .field("milestones", &self.milestones)
            .field("last_epoch", &self.last_epoch)
            .finish()
    }
}

impl SequentialLR {
    /// Composes `schedulers` (built over the same `optimizer`) with `milestones` (one fewer,
    /// increasing), resets the optimizer to the first scheduler's step 0.
    pub fn new(
        optimizer: &mut dyn Optimizer,
        mut schedulers: Vec<Box<dyn LrScheduler>>,
        milestones: Vec<u64>,
    ) -> Result<Self> {
        if schedulers.is_empty() {
            return Err(OptimError::invalid(
                "SequentialLR",
                "schedulers",
                0.0,
                "needs at least one scheduler",
            ));
        }
        check_count("SequentialLR milestones (schedulers - 1)", schedulers.len() - 1, milestones.len())?;
        if milestones.windows(2).any(|w| w[0] >= w[1]) {
            return Err(OptimError::invalid(
                "SequentialLR",
                "milestones",
                0.0,
                "must be strictly increasing",
            ));
        }
        let base = schedulers[0].base_lrs();
        for s in &mut schedulers {
            s.set_base_lrs(base.clone());
            s.set_last_epoch(0);
        }
        schedulers[0].step_to(0, optimizer)?;
        Ok(SequentialLR { schedulers, milestones, last_epoch: 0 })
    }

    /// The child running at `epoch` and its own step there.
    fn locate(&self, epoch: u64) -> (usize, u64) {
        let idx = self.milestones.partition_point(|&m| m <= epoch);
        let start = if idx == 0 { 0 } else { self.milestones[idx - 1] };
        (idx, epoch - start)
    }
}

impl LrScheduler for SequentialLR {
    fn name(&self) -> &'static str {
        "SequentialLR"
    }

    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>> {
        let (idx, local) = self.locate(epoch);
        self.schedulers[idx].lrs_at(local)
    }

    fn momenta_at(&self, epoch: u64) -> Option<Vec<f64>> {
        let (idx, local) = self.locate(epoch);
        self.schedulers[idx].momenta_at(local)
    }

    fn last_epoch(&self) -> u64 {
        self.last_epoch
    }

    fn set_last_epoch(&mut self, epoch: u64) {
        self.last_epoch = epoch;
        let (idx, local) = self.locate(epoch);
        self.schedulers[idx].set_last_epoch(local);
    }

    fn base_lrs(&self) -> Vec<f64> {
        self.schedulers[0].base_lrs()
    }

    fn set_base_lrs(&mut self, lrs: Vec<f64>) {
        for s in &mut self.schedulers {
            s.set_base_lrs(lrs.clone());
        }
    }

    fn state_dict(&self) -> SchedulerState {
        SchedulerState {
            scheduler: self.name().to_string(),
            last_epoch: self.last_epoch,
            base_lrs: self.base_lrs(),
            children: self.schedulers.iter().map(|s| s.state_dict()).collect(),
        }
    }

    fn load_state_dict(&mut self, state: &SchedulerState) -> Result<()> {
        check_kind(self.name(), state)?;
        check_count("SequentialLR state children", self.schedulers.len(), state.children.len())?;
        for (s, child) in self.schedulers.iter_mut().zip(&state.children) {
            s.load_state_dict(child)?;
        }
        self.last_epoch = state.last_epoch;
        Ok(())
    }
}
