//! `Linear`: `y = x W^T + b` (`torch.nn.Linear`).

use crate::init::{kaiming_uniform_, uniform_, FanMode, Nonlinearity};
use crate::module::{weight_and_bias, Module, OwnTensor};
use std::any::Any;
use tch::{Device, Kind, Tensor};

/// A fully connected layer. Input `[*, in_features]`, output `[*, out_features]`.
#[derive(Debug)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, when the layer has a bias.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer initialised as PyTorch does: weight kaiming-uniform with `a = sqrt(5)` (that is
    /// U(-1/sqrt(in), 1/sqrt(in))), bias U(-1/sqrt(in), 1/sqrt(in)).
    pub fn new(in_features: i64, out_features: i64, bias: bool) -> Self {
        let weight = Tensor::empty([out_features, in_features], (Kind::Float, Device::Cpu));
        kaiming_uniform_(&weight, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()));
        let bias = bias.then(|| {
            let b = Tensor::empty([out_features], (Kind::Float, Device::Cpu));
            let bound = 1.0 / (in_features as f64).sqrt();
            uniform_(&b, -bound, bound);
            b.set_requires_grad(true)
        });
        Linear { weight: weight.set_requires_grad(true), bias }
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

impl Module for Linear {
    fn kind(&self) -> &'static str {
        "Linear"
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        weight_and_bias(&self.weight, self.bias.as_ref())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
