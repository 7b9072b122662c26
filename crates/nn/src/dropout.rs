//! `Dropout` (`torch.nn.Dropout`).

use crate::module::Module;
use tch::Tensor;

/// Zeroes each element with probability `p` in training and scales the rest by `1/(1-p)`;
/// the identity in evaluation.
#[derive(Debug, Clone, Copy, Module)]
pub struct Dropout {
    /// Drop probability (PyTorch's default 0.5).
    #[module(skip)]
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
