//! Gradient accumulation over micro-batches, with the loss scaled so the effective lr is unchanged.

use crate::error::{OptimError, Result};
use tch::Tensor;

/// Accumulates gradients over `steps` micro-batches before each optimizer step.
///
/// Backward passes add into `.grad`, so `steps` micro-batches of a mean loss would give
/// `steps` times the gradient of one batch of `steps` times the size; [`GradAccumulation::scale_loss`]
/// divides each micro-batch loss by `steps`, so the accumulated gradient (and thus the step
/// with an unchanged lr) equals the big batch's. The usual loop:
///
/// ```no_run
/// # fn demo(opt: &mut dyn torchlight_optim::Optimizer, batches: Vec<tch::Tensor>) -> torchlight_optim::Result<()> {
/// let mut acc = torchlight_optim::GradAccumulation::new(4)?;
/// for loss in batches {
///     acc.scale_loss(&loss).backward();
///     if acc.micro_step() {
///         opt.step()?;
///         opt.zero_grad()?;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradAccumulation {
    steps: u64,
    done: u64,
}

impl GradAccumulation {
    /// Accumulation over `steps` micro-batches (1 = none); 0 is an error.
    pub fn new(steps: u64) -> Result<Self> {
        if steps == 0 {
            return Err(OptimError::invalid("GradAccumulation", "steps", 0.0, "must be >= 1"));
        }
        Ok(GradAccumulation { steps, done: 0 })
    }

    /// Micro-batches per optimizer step.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// `loss / steps`, to call `backward` on.
    pub fn scale_loss(&self, loss: &Tensor) -> Tensor {
        if self.steps == 1 {
            loss.shallow_clone()
        } else {
            loss / self.steps as f64
        }
    }

    /// Records one micro-batch's backward; returns `true` when `steps` have accumulated and
    /// the optimizer should step (and the gradients be cleared).
    pub fn micro_step(&mut self) -> bool {
        self.done += 1;
        if self.done == self.steps {
            self.done = 0;
            true
        } else {
            false
        }
    }

    /// Micro-batches accumulated since the last optimizer step (to flush a partial group at
    /// the end of an epoch, or to save with a checkpoint).
    pub fn pending(&self) -> u64 {
        self.done
    }
}
