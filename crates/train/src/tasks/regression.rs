//! Regression: predictions against real-valued targets of the same shape.

use crate::error::{Result, TrainError};
use crate::metrics::{MeanAbsoluteError, Metric, RootMeanSquaredError};
use crate::task::{Monitor, Stage, StepOutput, Task};
use tch::{Kind, Tensor};
use torchlight_nn::{HuberLoss, L1Loss, MSELoss, Module};

/// The loss of a [`Regression`] task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RegressionLoss {
    /// `nn.MSELoss` (the default).
    Mse,
    /// `nn.L1Loss`.
    L1,
    /// `nn.HuberLoss(delta=...)`.
    Huber {
        /// Where the loss turns from quadratic to linear.
        delta: f64,
    },
}

/// Regression: batches are `(inputs, targets)` with targets `[N]` or `[N, D]`; the model
/// returns predictions of the same shape (a `[N, 1]` output for `[N]` targets is flattened,
/// any other mismatch is an error naming both shapes, where PyTorch would broadcast silently).
/// Metrics: MAE and RMSE. The best checkpoint has the lowest `val_mae`.
#[derive(Debug, Clone, Copy)]
pub struct Regression {
    loss: RegressionLoss,
}

impl Default for Regression {
    fn default() -> Self {
        Regression { loss: RegressionLoss::Mse }
    }
}

impl Regression {
    /// Regression with `loss`.
    pub fn new(loss: RegressionLoss) -> Self {
        Regression { loss }
    }
}

impl<M: Module + ?Sized> Task<M, (Tensor, Tensor)> for Regression {
    fn step(&self, model: &M, (x, y): &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        let mut output = model.forward_t(x, stage.is_train()).to_kind(Kind::Float);
        let target = y.to_kind(Kind::Float);
        let (o, t) = (output.size(), target.size());
        if o != t {
            if o.len() == 2 && o[1] == 1 && t.len() == 1 && o[0] == t[0] {
                output = output.squeeze_dim(1);
            } else {
                return Err(TrainError::Task {
                    task: "regression".into(),
                    reason: format!("the model's output {o:?} does not match the targets {t:?}"),
                });
            }
        }
        let loss = match self.loss {
            RegressionLoss::Mse => MSELoss::default().forward(&output, &target)?,
            RegressionLoss::L1 => L1Loss::default().forward(&output, &target)?,
            RegressionLoss::Huber { delta } => HuberLoss::new(delta).forward(&output, &target)?,
        };
        Ok(StepOutput { loss, output, target })
    }

    fn metrics(&self, _stage: Stage) -> Vec<Box<dyn Metric>> {
        vec![Box::new(MeanAbsoluteError::new()), Box::new(RootMeanSquaredError::new())]
    }

    fn monitor(&self) -> Monitor {
        Monitor::min("val_mae")
    }
}
