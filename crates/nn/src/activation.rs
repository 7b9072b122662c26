//! Activations: `ReLU`, `LeakyReLU`, `GELU`, `SiLU`, `Sigmoid`, `Tanh`.

use crate::module::Module;
use std::any::Any;
use tch::Tensor;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $kind:literal, |$self_:ident, $xs:ident| $body:expr) => {
        $(#[$doc])*
        impl tch::nn::ModuleT for $name {
            fn forward_t(&$self_, $xs: &Tensor, _train: bool) -> Tensor {
                $body
            }
        }
        impl Module for $name {
            fn kind(&self) -> &'static str {
                $kind
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
        }
    };
}

/// `torch.nn.ReLU`: `max(x, 0)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReLU;
activation!(ReLU, "ReLU", |self, xs| xs.relu());

/// `torch.nn.LeakyReLU`: `x` for `x >= 0`, `negative_slope * x` otherwise.
#[derive(Debug, Clone, Copy)]
pub struct LeakyReLU {
    /// Slope for negative inputs (PyTorch's default 0.01), in `[0, 1]`.
    pub negative_slope: f64,
}
impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU { negative_slope: 0.01 }
    }
}
activation!(LeakyReLU, "LeakyReLU", |self, xs| xs.maximum(&(xs * self.negative_slope)));

/// `torch.nn.GELU` (exact, erf-based; `approximate='none'`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GELU;
activation!(GELU, "GELU", |self, xs| xs.gelu("none"));

/// `torch.nn.SiLU` (swish): `x * sigmoid(x)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiLU;
activation!(SiLU, "SiLU", |self, xs| xs.silu());

/// `torch.nn.Sigmoid`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sigmoid;
activation!(Sigmoid, "Sigmoid", |self, xs| xs.sigmoid());

/// `torch.nn.Tanh`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tanh;
activation!(Tanh, "Tanh", |self, xs| xs.tanh());
