//! The learning-rate range test (Leslie Smith, "Cyclical Learning Rates for Training Neural
//! Networks", 2017) as PyTorch Lightning's `Tuner.lr_find` runs it: the sweep's settings
//! ([`LrFindConfig`]), its lr ladder, the smoothed loss with the divergence stop
//! ([`LossSmoother`]), the suggestion at the steepest descent ([`suggest`]) and the result
//! ([`LrFinder`]). Pure `f64` functions: the loop that drives them through the real training
//! step is `Trainer::lr_find` (`trainer/lr_find.rs`).
//!
//! Where it departs from Lightning 2.x, on purpose (each a reported Lightning bug):
//! - The ladder is evenly spaced, `min_lr` at the first step and `max_lr` at the last
//!   (Lightning's first step jumps two rungs: PR #21931).
//! - The smoothed loss is debiased by `1 - beta^(k+1)` for the `k`-th point counted from 0
//!   (Lightning divides by `1 - beta^(global_step + 1)` after the step is counted, so its first
//!   point is about half the loss).
//! - A non-finite loss ends the sweep as a divergence (a NaN never compares greater than the
//!   threshold, so Lightning sweeps on through NaNs).
//! - In exponential mode the steepest descent is taken against `log10(lr)`, the axis the lrs
//!   are evenly spaced on and the plot's (Lightning differentiates against the raw lr, which
//!   favours the smallest lrs: issue #21141, PR #21171); in linear mode against the lr.

use crate::error::{Result, TrainError};
use std::path::Path;

/// How the lr grows from step to step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LrFindMode {
    /// `min_lr * (max_lr / min_lr)^(k / (n - 1))`: evenly spaced on a log axis (the default).
    #[default]
    Exponential,
    /// `min_lr + (max_lr - min_lr) * k / (n - 1)`.
    Linear,
}

impl LrFindMode {
    /// `exponential` or `linear`.
    pub fn name(self) -> &'static str {
        match self {
            LrFindMode::Exponential => "exponential",
            LrFindMode::Linear => "linear",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "exponential" | "exp" => Some(LrFindMode::Exponential),
            "linear" => Some(LrFindMode::Linear),
            _ => None,
        }
    }
}

/// The range test's settings, with Lightning's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LrFindConfig {
    /// The first lr; 1e-8.
    pub min_lr: f64,
    /// The last lr; 1.
    pub max_lr: f64,
    /// Optimizer steps (lrs tried); 100. With gradient accumulation each step takes
    /// `accumulation` batches, as in Lightning.
    pub num_training: usize,
    /// How the lr grows; exponential.
    pub mode: LrFindMode,
    /// Stop once the smoothed loss exceeds this times the best smoothed loss so far; 4.
    /// `None` sweeps to `max_lr` whatever the loss does (a non-finite loss still stops it).
    pub early_stop_threshold: Option<f64>,
    /// The smoothing of the loss: `avg = beta * avg + (1 - beta) * loss`; 0.98.
    pub beta: f64,
    /// Points left out at the start of the suggestion's search (too naive); 10.
    pub skip_begin: usize,
    /// Points left out at its end (too optimistic; the diverging point); 1.
    pub skip_end: usize,
}

impl Default for LrFindConfig {
    fn default() -> Self {
        LrFindConfig {
            min_lr: 1e-8,
            max_lr: 1.0,
            num_training: 100,
            mode: LrFindMode::Exponential,
            early_stop_threshold: Some(4.0),
            beta: 0.98,
            skip_begin: 10,
            skip_end: 1,
        }
    }
}

impl LrFindConfig {
    /// Checks the settings, naming the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting: &str, value: String, reason: &str| {
            Err(TrainError::InvalidSetting { setting: setting.into(), value, reason: reason.into() })
        };
        if !(self.min_lr.is_finite() && self.min_lr > 0.0) {
            return bad("min_lr", self.min_lr.to_string(), "must be a positive number");
        }
        if !(self.max_lr.is_finite() && self.max_lr > self.min_lr) {
            return bad(
                "max_lr",
                self.max_lr.to_string(),
                &format!("must be above min_lr ({})", self.min_lr),
            );
        }
        if self.num_training < 2 {
            return bad("num_training", self.num_training.to_string(), "must be at least 2 steps");
        }
        if let Some(t) = self.early_stop_threshold {
            if !(t.is_finite() && t > 1.0) {
                return bad("early_stop_threshold", t.to_string(), "must be a number above 1");
            }
        }
        if !(0.0..1.0).contains(&self.beta) {
            return bad("beta", self.beta.to_string(), "must be in [0, 1)");
        }
        Ok(())
    }

    /// The lr of step `k` (0-based) of the ladder: `min_lr` at 0, `max_lr` at `num_training - 1`.
    pub fn lr_at(&self, k: usize) -> f64 {
        let n = self.num_training.max(2);
        if k + 1 >= n {
            return self.max_lr;
        }
        let r = k as f64 / (n - 1) as f64;
        match self.mode {
            LrFindMode::Exponential => self.min_lr * (self.max_lr / self.min_lr).powf(r),
            LrFindMode::Linear => self.min_lr + (self.max_lr - self.min_lr) * r,
        }
    }
}

/// The exponentially smoothed, debiased loss and the divergence check.
#[derive(Debug, Clone)]
pub struct LossSmoother {
    beta: f64,
    threshold: Option<f64>,
    avg: f64,
    count: i32,
    best: f64,
}

impl LossSmoother {
    /// A smoother with `beta` and the divergence `threshold` (times the best smoothed loss).
    pub fn new(beta: f64, threshold: Option<f64>) -> Self {
        LossSmoother { beta, threshold, avg: 0.0, count: 0, best: f64::INFINITY }
    }

    /// Adds a step's loss; returns the smoothed loss and whether the sweep diverged: the
    /// smoothed loss is not finite, or (from the second point on) above the threshold times
    /// the best smoothed loss before it.
    pub fn push(&mut self, loss: f64) -> (f64, bool) {
        self.avg = self.beta * self.avg + (1.0 - self.beta) * loss;
        self.count += 1;
        let smoothed = self.avg / (1.0 - self.beta.powi(self.count));
        if !smoothed.is_finite() {
            return (smoothed, true);
        }
        let diverged = self.count > 1 && self.threshold.is_some_and(|t| smoothed > t * self.best);
        self.best = self.best.min(smoothed);
        (smoothed, diverged)
    }

    /// The best smoothed loss so far (infinite before the first point).
    pub fn best(&self) -> f64 {
        self.best
    }
}

/// `torch.gradient(ys, spacing=[xs])` with `edge_order=1`: second-order central differences
/// at the interior points (for uneven spacing too), one-sided at the two ends. Needs two
/// points or more.
pub fn gradient(ys: &[f64], xs: &[f64]) -> Vec<f64> {
    let n = ys.len();
    assert_eq!(n, xs.len(), "gradient: as many coordinates as values");
    assert!(n >= 2, "gradient: needs two points or more");
    let mut g = vec![0.0; n];
    g[0] = (ys[1] - ys[0]) / (xs[1] - xs[0]);
    g[n - 1] = (ys[n - 1] - ys[n - 2]) / (xs[n - 1] - xs[n - 2]);
    for i in 1..n - 1 {
        let (hl, hr) = (xs[i] - xs[i - 1], xs[i + 1] - xs[i]);
        g[i] =
            (hl * hl * ys[i + 1] - hr * hr * ys[i - 1] + (hr * hr - hl * hl) * ys[i]) / (hl * hr * (hl + hr));
    }
    g
}

/// The index of the suggested lr: the steepest descent of the smoothed `losses` over the
/// points left after skipping `skip_begin` at the start and `skip_end` at the end (as
/// Lightning's `suggestion(skip_begin=10, skip_end=1)`), non-finite losses left out, the
/// slope taken against `log10(lr)` in exponential mode and against the lr in linear mode.
/// `None` when fewer than two points remain.
pub fn suggest(
    lrs: &[f64],
    losses: &[f64],
    mode: LrFindMode,
    skip_begin: usize,
    skip_end: usize,
) -> Option<usize> {
    let n = lrs.len().min(losses.len());
    let end = n.saturating_sub(skip_end);
    let kept: Vec<usize> = (skip_begin..end).filter(|&i| losses[i].is_finite() && lrs[i] > 0.0).collect();
    if kept.len() < 2 {
        return None;
    }
    let xs: Vec<f64> = kept
        .iter()
        .map(|&i| match mode {
            LrFindMode::Exponential => lrs[i].log10(),
            LrFindMode::Linear => lrs[i],
        })
        .collect();
    let ys: Vec<f64> = kept.iter().map(|&i| losses[i]).collect();
    let g = gradient(&ys, &xs);
    let mut best = 0;
    for (j, v) in g.iter().enumerate() {
        // The first of equal slopes, as torch.argmin.
        if *v < g[best] {
            best = j;
        }
    }
    Some(kept[best])
}

/// What a range test measured: the lr and the smoothed loss of every step taken, and the
/// suggestion.
#[derive(Debug, Clone, PartialEq)]
pub struct LrFinder {
    /// The settings it ran with.
    pub config: LrFindConfig,
    /// The lr of each step (of the reference group: see `Trainer::lr_find`).
    pub lrs: Vec<f64>,
    /// The smoothed, debiased loss after each step.
    pub losses: Vec<f64>,
    /// Each step's own loss (the mean over its accumulation window).
    pub raw_losses: Vec<f64>,
    /// Whether the loss diverged before `num_training` steps.
    pub stopped_early: bool,
    /// The index of the suggested lr in `lrs` (see [`suggest`]), if enough points remain.
    pub suggestion_index: Option<usize>,
}

impl LrFinder {
    /// The result of the steps recorded, with its suggestion.
    pub fn new(
        config: LrFindConfig,
        lrs: Vec<f64>,
        losses: Vec<f64>,
        raw_losses: Vec<f64>,
        stopped_early: bool,
    ) -> Self {
        let suggestion_index = suggest(&lrs, &losses, config.mode, config.skip_begin, config.skip_end);
        LrFinder { config, lrs, losses, raw_losses, stopped_early, suggestion_index }
    }

    /// The suggested lr: where the smoothed loss falls fastest.
    pub fn suggestion(&self) -> Option<f64> {
        self.suggestion_index.map(|i| self.lrs[i])
    }

    /// Draws the smoothed loss against the lr (log x axis in exponential mode) with the
    /// suggestion marked, as `lr_finder.png`.
    pub fn plot(&self, path: impl AsRef<Path>) -> Result<()> {
        let log_x = self.config.mode == LrFindMode::Exponential;
        let range = (self.config.min_lr, self.config.max_lr);
        crate::plot::plot_lr_finder(
            &self.lrs,
            &self.losses,
            self.suggestion_index,
            range,
            log_x,
            path.as_ref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_runs_evenly_from_min_to_max() {
        let c = LrFindConfig { min_lr: 1e-4, max_lr: 1.0, num_training: 5, ..Default::default() };
        let lrs: Vec<f64> = (0..5).map(|k| c.lr_at(k)).collect();
        for (got, want) in lrs.iter().zip([1e-4, 1e-3, 1e-2, 1e-1, 1.0]) {
            assert!((got / want - 1.0).abs() < 1e-12, "{lrs:?}");
        }
        let c = LrFindConfig { mode: LrFindMode::Linear, min_lr: 0.1, max_lr: 0.5, num_training: 5, ..c };
        let lrs: Vec<f64> = (0..5).map(|k| c.lr_at(k)).collect();
        for (got, want) in lrs.iter().zip([0.1, 0.2, 0.3, 0.4, 0.5]) {
            assert!((got - want).abs() < 1e-12, "{lrs:?}");
        }
    }

    #[test]
    fn the_smoothed_loss_is_debiased_and_follows_a_constant_exactly() {
        let mut s = LossSmoother::new(0.98, Some(4.0));
        for _ in 0..50 {
            let (v, diverged) = s.push(2.5);
            assert!((v - 2.5).abs() < 1e-12, "a constant loss smooths to itself, got {v}");
            assert!(!diverged);
        }
        // By hand: beta 0.5, losses 4 then 2: avg 2 then 2; debiased 2/0.5 = 4, 2/0.75.
        let mut s = LossSmoother::new(0.5, None);
        assert_eq!(s.push(4.0).0, 4.0);
        assert!((s.push(2.0).0 - 2.0 / 0.75).abs() < 1e-12);
    }

    #[test]
    fn divergence_stops_past_the_threshold_and_on_nan() {
        let mut s = LossSmoother::new(0.0, Some(4.0));
        assert!(!s.push(1.0).1);
        assert!(!s.push(0.5).1);
        assert!(!s.push(1.9).1, "3.8x the best: not yet");
        assert!(s.push(2.1).1, "4.2x the best");
        let mut s = LossSmoother::new(0.98, Some(4.0));
        s.push(1.0);
        assert!(s.push(f64::NAN).1);
        let mut s = LossSmoother::new(0.0, None);
        s.push(1.0);
        assert!(!s.push(100.0).1, "no threshold: only a non-finite loss stops");
        assert!(s.push(f64::INFINITY).1);
    }

    #[test]
    fn gradient_matches_torch_gradient_on_uneven_spacing() {
        // torch.gradient(torch.tensor([1., 4., 9., 25.]), spacing=[torch.tensor([1., 2., 3., 5.])])
        // = [3., 4., 6., 8.] (float64, torch 2.11).
        let g = gradient(&[1.0, 4.0, 9.0, 25.0], &[1.0, 2.0, 3.0, 5.0]);
        for (got, want) in g.iter().zip([3.0, 4.0, 6.0, 8.0]) {
            assert!((got - want).abs() < 1e-12, "{g:?}");
        }
    }

    /// A loss that is flat, falls as a logistic in log10(lr) centred on `centre`, then blows up.
    fn curve(lrs: &[f64], centre: f64) -> Vec<f64> {
        lrs.iter()
            .map(|lr| {
                let x = lr.log10();
                let fall = 2.0 / (1.0 + (-(x - centre.log10()) * 3.0).exp());
                3.0 - fall + if x > -0.5 { (x + 0.5) * 20.0 } else { 0.0 }
            })
            .collect()
    }

    #[test]
    fn the_suggestion_is_the_steepest_fall_on_the_log_axis() {
        let c = LrFindConfig::default();
        let lrs: Vec<f64> = (0..c.num_training).map(|k| c.lr_at(k)).collect();
        let losses = curve(&lrs, 1e-3);
        let i = suggest(&lrs, &losses, c.mode, c.skip_begin, c.skip_end).unwrap();
        let ratio = lrs[i] / 1e-3;
        assert!((0.8..1.25).contains(&ratio), "suggested {} for a fall centred on 1e-3", lrs[i]);
        // Against the raw lr (Lightning 2.x) the same curve gives a several times smaller lr,
        // before the fall has properly begun.
        let raw = gradient(&losses[10..99], &lrs[10..99]);
        let j = (0..raw.len()).min_by(|&a, &b| raw[a].total_cmp(&raw[b])).unwrap() + 10;
        assert!(lrs[j] < lrs[i] / 3.0, "raw-lr slope picks {} vs {}", lrs[j], lrs[i]);
    }

    #[test]
    fn the_suggestion_skips_the_ends_and_non_finite_points() {
        let lrs: Vec<f64> = (0..20).map(|k| 10f64.powi(k - 10)).collect();
        let mut losses: Vec<f64> = (0..20).map(|k| 5.0 - 0.1 * k as f64).collect();
        losses[2] = 0.0; // a steep drop inside the skipped start
        losses[12] = f64::NAN;
        losses[19] = -100.0; // the skipped end
        losses[15] = 1.0; // the steepest fall left: into 15
        let i = suggest(&lrs, &losses, LrFindMode::Exponential, 10, 1).unwrap();
        assert!(i == 14 || i == 15, "{i}");
        assert!(losses[i].is_finite());
        assert_eq!(
            suggest(&lrs[..12], &losses[..12], LrFindMode::Exponential, 10, 1),
            None,
            "one point left"
        );
    }

    #[test]
    fn settings_are_checked_by_name() {
        let bad = [
            LrFindConfig { min_lr: 0.0, ..Default::default() },
            LrFindConfig { max_lr: 1e-9, ..Default::default() },
            LrFindConfig { num_training: 1, ..Default::default() },
            LrFindConfig { early_stop_threshold: Some(0.5), ..Default::default() },
            LrFindConfig { beta: 1.0, ..Default::default() },
        ];
        for (c, name) in bad.iter().zip(["min_lr", "max_lr", "num_training", "early_stop_threshold", "beta"])
        {
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
        LrFindConfig::default().validate().unwrap();
    }
}
