//! ReduceLROnPlateau: cut the lr when a validation metric stops improving.

use crate::error::{OptimError, Result};
use crate::optimizer::{check_count, Optimizer};
use serde::{Deserialize, Serialize};

/// Whether a lower or a higher metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlateauMode {
    /// Lower is better (a loss; PyTorch's default).
    Min,
    /// Higher is better (an accuracy).
    Max,
}

/// How `threshold` defines a significant improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdMode {
    /// Relative: better than `best * (1 -/+ threshold)` (PyTorch's default).
    Rel,
    /// Absolute: better than `best -/+ threshold`.
    Abs,
}

/// ReduceLROnPlateau's settings, with PyTorch's defaults: `mode = min`, `factor = 0.1`,
/// `patience = 10`, `threshold = 1e-4`, `threshold_mode = rel`, `cooldown = 0`,
/// `min_lrs = [0]` (one per group, or one for all), `eps = 1e-8`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReduceLROnPlateauConfig {
    /// Lower or higher is better.
    pub mode: PlateauMode,
    /// Factor the lr is multiplied by (< 1).
    pub factor: f64,
    /// Epochs without improvement tolerated before cutting.
    pub patience: u64,
    /// Size of a significant improvement.
    pub threshold: f64,
    /// Relative or absolute threshold.
    pub threshold_mode: ThresholdMode,
    /// Epochs to wait after a cut before counting bad epochs again.
    pub cooldown: u64,
    /// Lower bound of each group's lr (or one for all).
    pub min_lrs: Vec<f64>,
    /// A cut smaller than this is not applied.
    pub eps: f64,
}

impl Default for ReduceLROnPlateauConfig {
    fn default() -> Self {
        ReduceLROnPlateauConfig {
            mode: PlateauMode::Min,
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            threshold_mode: ThresholdMode::Rel,
            cooldown: 0,
            min_lrs: vec![0.0],
            eps: 1e-8,
        }
    }
}

impl ReduceLROnPlateauConfig {
    /// Sets `mode`.
    pub fn with_mode(self, mode: PlateauMode) -> Self {
        ReduceLROnPlateauConfig { mode, ..self }
    }
    /// Sets `factor`.
    pub fn with_factor(self, factor: f64) -> Self {
        ReduceLROnPlateauConfig { factor, ..self }
    }
    /// Sets `patience`.
    pub fn with_patience(self, patience: u64) -> Self {
        ReduceLROnPlateauConfig { patience, ..self }
    }
    /// Sets `threshold` and its mode.
    pub fn with_threshold(self, threshold: f64, threshold_mode: ThresholdMode) -> Self {
        ReduceLROnPlateauConfig { threshold, threshold_mode, ..self }
    }
    /// Sets `cooldown`.
    pub fn with_cooldown(self, cooldown: u64) -> Self {
        ReduceLROnPlateauConfig { cooldown, ..self }
    }
    /// Sets `min_lrs`.
    pub fn with_min_lrs(self, min_lrs: Vec<f64>) -> Self {
        ReduceLROnPlateauConfig { min_lrs, ..self }
    }
    /// Sets `eps`.
    pub fn with_eps(self, eps: f64) -> Self {
        ReduceLROnPlateauConfig { eps, ..self }
    }
}

/// ReduceLROnPlateau's saveable state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReduceLROnPlateauState {
    /// Best metric so far (±infinity before the first; JSON writes that as null).
    pub best: Option<f64>,
    /// Consecutive epochs without significant improvement.
    pub num_bad_epochs: u64,
    /// Epochs of cooldown left.
    pub cooldown_counter: u64,
    /// Steps taken.
    pub last_epoch: u64,
}

/// `torch.optim.lr_scheduler.ReduceLROnPlateau`, stepped with the monitored metric once per
/// epoch. Unlike the other schedulers it reads and changes the optimizer's current lrs.
#[derive(Debug, Clone)]
pub struct ReduceLROnPlateau {
    config: ReduceLROnPlateauConfig,
    min_lrs: Vec<f64>,
    best: f64,
    num_bad_epochs: u64,
    cooldown_counter: u64,
    last_epoch: u64,
}

impl ReduceLROnPlateau {
    /// A plateau scheduler for `optimizer`'s groups.
    pub fn new(optimizer: &dyn Optimizer, config: ReduceLROnPlateauConfig) -> Result<Self> {
        if config.factor.is_nan() || config.factor >= 1.0 {
            return Err(OptimError::invalid("ReduceLROnPlateau", "factor", config.factor, "must be < 1"));
        }
        let groups = optimizer.lrs().len();
        let min_lrs =
            if config.min_lrs.len() == 1 { vec![config.min_lrs[0]; groups] } else { config.min_lrs.clone() };
        check_count("ReduceLROnPlateau min_lrs", groups, min_lrs.len())?;
        let best = Self::worst(config.mode);
        Ok(ReduceLROnPlateau { config, min_lrs, best, num_bad_epochs: 0, cooldown_counter: 0, last_epoch: 0 })
    }

    fn worst(mode: PlateauMode) -> f64 {
        match mode {
            PlateauMode::Min => f64::INFINITY,
            PlateauMode::Max => f64::NEG_INFINITY,
        }
    }

    fn is_better(&self, a: f64) -> bool {
        let (best, t) = (self.best, self.config.threshold);
        match (self.config.mode, self.config.threshold_mode) {
            (PlateauMode::Min, ThresholdMode::Rel) => a < best * (1.0 - t),
            (PlateauMode::Min, ThresholdMode::Abs) => a < best - t,
            (PlateauMode::Max, ThresholdMode::Rel) => a > best * (t + 1.0),
            (PlateauMode::Max, ThresholdMode::Abs) => a > best + t,
        }
    }

    /// Records this epoch's `metric` and cuts each group's lr by `factor` (not below its
    /// `min_lr`) once more than `patience` epochs in a row have not improved on the best.
    pub fn step(&mut self, metric: f64, optimizer: &mut dyn Optimizer) -> Result<()> {
        self.last_epoch += 1;
        if self.is_better(metric) {
            self.best = metric;
            self.num_bad_epochs = 0;
        } else {
            self.num_bad_epochs += 1;
        }
        if self.cooldown_counter > 0 {
            self.cooldown_counter -= 1;
            self.num_bad_epochs = 0;
        }
        if self.num_bad_epochs > self.config.patience {
            let lrs: Vec<f64> = optimizer
                .lrs()
                .iter()
                .zip(&self.min_lrs)
                .map(|(&old, &min)| {
                    let new = (old * self.config.factor).max(min);
                    if old - new > self.config.eps {
                        new
                    } else {
                        old
                    }
                })
                .collect();
            optimizer.set_lrs(&lrs)?;
            self.cooldown_counter = self.config.cooldown;
            self.num_bad_epochs = 0;
        }
        Ok(())
    }

    /// The best metric seen so far.
    pub fn best(&self) -> f64 {
        self.best
    }

    /// The scheduler's state.
    pub fn state_dict(&self) -> ReduceLROnPlateauState {
        ReduceLROnPlateauState {
            best: self.best.is_finite().then_some(self.best),
            num_bad_epochs: self.num_bad_epochs,
            cooldown_counter: self.cooldown_counter,
            last_epoch: self.last_epoch,
        }
    }

    /// Restores a saved state.
    pub fn load_state_dict(&mut self, state: &ReduceLROnPlateauState) {
        self.best = state.best.unwrap_or_else(|| Self::worst(self.config.mode));
        self.num_bad_epochs = state.num_bad_epochs;
        self.cooldown_counter = state.cooldown_counter;
        self.last_epoch = state.last_epoch;
    }
}
