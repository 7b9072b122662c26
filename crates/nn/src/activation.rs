//! Activations: `ReLU`, `LeakyReLU`, `GELU`, `SiLU`, `Sigmoid`, `Tanh`.

use crate::module::Module;
use tch::Tensor;

/// The forward pass of an elementwise activation (the same in training and evaluation).
macro_rules! activation {
    ($name:ident, |$self_:ident, $xs:ident| $body:expr) => {
        impl tch::nn::ModuleT for $name {
            fn forward_t(&$self_, $xs: &Tensor, _train: bool) -> Tensor {
                $body
            }
        }
    };
}

/// `torch.nn.ReLU`: `max(x, 0)`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct ReLU;
activation!(ReLU, |self, xs| xs.relu());

/// `torch.nn.LeakyReLU`: `x` for `x >= 0`, `negative_slope * x` otherwise.
#[derive(Debug, Clone, Copy, Module)]
pub struct LeakyReLU {
    /// Slope for negative inputs (PyTorch's default 0.01), in `[0, 1]`.
    #[module(skip)]
    pub negative_slope: f64,
}
impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU { negative_slope: 0.01 }
    }
}
activation!(LeakyReLU, |self, xs| xs.maximum(&(xs * self.negative_slope)));

/// `torch.nn.GELU` (exact, erf-based; `approximate='none'`).
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct GELU;
activation!(GELU, |self, xs| xs.gelu("none"));

/// `torch.nn.SiLU` (swish): `x * sigmoid(x)`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct SiLU;
activation!(SiLU, |self, xs| xs.silu());

/// `torch.nn.Sigmoid`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Sigmoid;
activation!(Sigmoid, |self, xs| xs.sigmoid());

/// `torch.nn.Tanh`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Tanh;
activation!(Tanh, |self, xs| xs.tanh());
