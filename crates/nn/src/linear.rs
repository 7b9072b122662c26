//! `Linear`: `y = x W^T + b` (`torch.nn.Linear`).

use crate::init::{kaiming_uniform_, uniform_, FanMode, Nonlinearity};
use crate::module::Module;
use crate::options::LayerOptions;
use tch::Tensor;

/// A fully connected layer. Input `[*, in_features]`, output `[*, out_features]`.
#[derive(Debug, Module)]
pub struct Linear {
    /// `[out_features, in_features]`.
    #[param]
    pub weight: Tensor,
    /// `[out_features]`, when the layer has a bias.
    #[param]
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A float32 CPU layer initialised as PyTorch does: weight kaiming-uniform with
    /// `a = sqrt(5)` (that is U(-1/sqrt(in), 1/sqrt(in))), bias U(-1/sqrt(in), 1/sqrt(in)).
    pub fn new(in_features: i64, out_features: i64, bias: bool) -> Self {
        Self::new_on(in_features, out_features, bias, LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device
    /// (`nn.Linear(in, out, bias, device=..., dtype=...)`), initialised unless skipped.
    pub fn new_on(in_features: i64, out_features: i64, bias: bool, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let weight = o.param(&[out_features, in_features], |w| {
            kaiming_uniform_(w, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()))
        });
        let bias = bias.then(|| {
            let bound = 1.0 / (in_features as f64).sqrt();
            o.param(&[out_features], |b| uniform_(b, -bound, bound))
        });
        Linear { weight, bias }
    }

    /// `in_features`.
    pub fn in_features(&self) -> i64 {
        self.weight.size()[1]
    }

    /// `out_features`.
    pub fn out_features(&self) -> i64 {
        self.weight.size()[0]
    }
}

impl tch::nn::ModuleT for Linear {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.linear(&self.weight, self.bias.as_ref())
    }
}
