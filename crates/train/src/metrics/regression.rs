//! Regression metrics over predictions and targets of the same shape: mean absolute error and
//! root mean squared error, averaged over every element.

use super::{same_batch, Metric, Sums};
use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Kind, Tensor};

fn check(metric: &str, output: &Tensor, target: &Tensor) -> Result<()> {
    same_batch(metric, output, target)?;
    if output.size() != target.size() {
        return Err(TrainError::Metric {
            metric: metric.to_string(),
            reason: format!("output {:?} and target {:?} differ in shape", output.size(), target.size()),
        });
    }
    Ok(())
}

fn ratio(v: Option<Vec<Vec<f64>>>, f: impl Fn(f64) -> f64) -> f64 {
    match v {
        Some(v) if v[1][0] > 0.0 => f(v[0][0] / v[1][0]),
        _ => f64::NAN,
    }
}

/// Mean absolute error over all elements (`mae`), as `torchmetrics.MeanAbsoluteError` and
/// `sklearn.metrics.mean_absolute_error` (on flattened outputs).
#[derive(Debug)]
pub struct MeanAbsoluteError {
    sums: Sums,
}

impl Default for MeanAbsoluteError {
    fn default() -> Self {
        MeanAbsoluteError { sums: Sums::new(&["abs_error", "count"]) }
    }
}

impl MeanAbsoluteError {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Metric for MeanAbsoluteError {
    fn update(&mut self, output: &Tensor, target: &Tensor) -> Result<()> {
        check("mean absolute error", output, target)?;
        let err = (output.to_kind(Kind::Double) - target.to_kind(Kind::Double)).abs().sum(Kind::Double);
        let sums = self.sums.get(&[], Kind::Double, output.device());
        sums[0] += err;
        sums[1] += output.numel() as f64;
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        vec![("mae".into(), ratio(self.sums.read(), |x| x))]
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("mean absolute error", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Root mean squared error over all elements (`rmse`): `sqrt(mean((output - target)^2))`, as
/// `torchmetrics.MeanSquaredError(squared=False)`.
#[derive(Debug)]
pub struct RootMeanSquaredError {
    sums: Sums,
}

impl Default for RootMeanSquaredError {
    fn default() -> Self {
        RootMeanSquaredError { sums: Sums::new(&["squared_error", "count"]) }
    }
}

impl RootMeanSquaredError {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Metric for RootMeanSquaredError {
    fn update(&mut self, output: &Tensor, target: &Tensor) -> Result<()> {
        check("root mean squared error", output, target)?;
        let err = (output.to_kind(Kind::Double) - target.to_kind(Kind::Double)).square().sum(Kind::Double);
        let sums = self.sums.get(&[], Kind::Double, output.device());
        sums[0] += err;
        sums[1] += output.numel() as f64;
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        vec![("rmse".into(), ratio(self.sums.read(), f64::sqrt))]
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("root mean squared error", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
