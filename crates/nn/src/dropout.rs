//! `Dropout` (`torch.nn.Dropout`).

use crate::module::Module;
use std::any::Any;
use tch::Tensor;

/// Zeroes each element with probability `p` in training and scales the rest by `1/(1-p)`;
/// the identity in evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    /// Drop probability (PyTorch's default 0.5).
    pub p: f64,
}

impl Default for Dropout {
    fn default() -> Self {
        Dropout { p: 0.5 }
    }
}

impl tch::nn::ModuleT for Dropout {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        xs.dropout(self.p, train)
    }
}

impl Module for Dropout {
    fn kind(&self) -> &'static str {
        "Dropout"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
