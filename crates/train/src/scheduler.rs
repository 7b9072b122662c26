//! When the Trainer steps its learning-rate scheduler.

/// When an lr scheduler steps (Lightning's `interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// After every epoch (after validation), like `StepLR` or `CosineAnnealingLR` per epoch.
    Epoch,
    /// After every optimizer step, like `OneCycleLR`.
    Step,
}
