//! The `LrScheduler` trait shared by the epoch/step lr schedulers, and their saveable state.

use crate::error::{OptimError, Result};
use crate::optimizer::{check_count, Optimizer};
use serde::{Deserialize, Serialize};

/// An lr schedule that is a function of the step count (`torch.optim.lr_scheduler`), stepped
/// per epoch or per batch as the caller chooses.
///
/// As in PyTorch, building a scheduler writes its epoch-0 lr into the optimizer, and each
/// [`LrScheduler::step`] (called after `optimizer.step()`) advances one epoch or batch and
/// writes the new lr of each param group. The base lrs are the optimizer's lrs when the
/// scheduler was built (PyTorch's `initial_lr`). Torchlight computes each lr from the base lr
/// in closed form; PyTorch's chainable forms give the same values (to about 1e-15), but
/// unlike them an lr set by hand between steps is overwritten at the next step.
pub trait LrScheduler {
    /// The scheduler's PyTorch name (`StepLR`).
    fn name(&self) -> &'static str;

    /// The lr of each group at `epoch` (0 = as built).
    fn lrs_at(&self, epoch: u64) -> Result<Vec<f64>>;

    /// The momentum of each group at `epoch`, for schedulers that cycle it (OneCycleLR).
    fn momenta_at(&self, _epoch: u64) -> Option<Vec<f64>> {
        None
    }

    /// How many times [`LrScheduler::step`] has been called (PyTorch's `last_epoch`).
    fn last_epoch(&self) -> u64;

    /// Sets the step count without touching an optimizer (used when loading or composing).
    fn set_last_epoch(&mut self, epoch: u64);

    /// The base lr of each group.
    fn base_lrs(&self) -> Vec<f64>;

    /// Replaces the base lrs (SequentialLR gives its children the first one's).
    fn set_base_lrs(&mut self, lrs: Vec<f64>);

    /// Advances one step and writes the new lrs (and momenta) into `optimizer`.
    fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        let epoch = self.last_epoch() + 1;
        self.step_to(epoch, optimizer)
    }

    /// Jumps to `epoch` and writes its lrs (and momenta) into `optimizer`.
    fn step_to(&mut self, epoch: u64, optimizer: &mut dyn Optimizer) -> Result<()> {
        let lrs = self.lrs_at(epoch)?;
        optimizer.set_lrs(&lrs)?;
        if let Some(momenta) = self.momenta_at(epoch) {
            optimizer.set_momenta(&momenta)?;
        }
        self.set_last_epoch(epoch);
        Ok(())
    }

    /// The lrs of the current step (`get_last_lr()`).
    fn last_lr(&self) -> Vec<f64> {
        self.lrs_at(self.last_epoch()).unwrap_or_else(|_| self.base_lrs())
    }

    /// The scheduler's state; its configuration comes from the code that builds it.
    fn state_dict(&self) -> SchedulerState {
        SchedulerState {
            scheduler: self.name().to_string(),
            last_epoch: self.last_epoch(),
            base_lrs: self.base_lrs(),
            children: Vec::new(),
        }
    }

    /// Restores a state saved by a scheduler of the same kind over as many param groups. The
    /// optimizer's lrs come back with the optimizer's own state.
    fn load_state_dict(&mut self, state: &SchedulerState) -> Result<()> {
        check_kind(self.name(), state)?;
        check_count("scheduler state base_lrs", self.base_lrs().len(), state.base_lrs.len())?;
        self.set_base_lrs(state.base_lrs.clone());
        self.set_last_epoch(state.last_epoch);
        Ok(())
    }
}

/// A scheduler's saveable state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerState {
    /// The scheduler's name (`StepLR`, `SequentialLR`, ...).
    pub scheduler: String,
    /// Steps taken.
    pub last_epoch: u64,
    /// Base lr of each group.
    pub base_lrs: Vec<f64>,
    /// SequentialLR's children, in order; empty otherwise.
    #[serde(default)]
    pub children: Vec<SchedulerState>,
}

pub(crate) fn check_kind(name: &str, state: &SchedulerState) -> Result<()> {
    if state.scheduler == name {
        Ok(())
    } else {
        Err(OptimError::KindMismatch { expected: name.to_string(), found: state.scheduler.clone() })
    }
}

/// Builds a scheduler's state from `optimizer` and applies its epoch 0, as PyTorch's
/// constructors do.
pub(crate) fn start<S: LrScheduler>(mut scheduler: S, optimizer: &mut dyn Optimizer) -> Result<S> {
    scheduler.step_to(0, optimizer)?;
    Ok(scheduler)
}

/// Implements the bookkeeping methods of [`LrScheduler`] for a struct with `base_lrs: Vec<f64>`
/// and `last_epoch: u64` fields.
macro_rules! schedule_bookkeeping {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn last_epoch(&self) -> u64 {
            self.last_epoch
        }
        fn set_last_epoch(&mut self, epoch: u64) {
            self.last_epoch = epoch;
        }
        fn base_lrs(&self) -> Vec<f64> {
            self.base_lrs.clone()
        }
        fn set_base_lrs(&mut self, lrs: Vec<f64>) {
            self.base_lrs = lrs;
        }
    };
}
pub(crate) use schedule_bookkeeping;

/// Checks a scheduler hyperparameter, naming it on failure.
pub(crate) fn require(
    owner: &'static str,
    field: &'static str,
    value: f64,
    ok: bool,
    reason: &'static str,
) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(OptimError::invalid(owner, field, value, reason))
    }
}
