//! Activations: `ReLU`, `ReLU6`, `LeakyReLU`, `GELU`, `SiLU`, `Hardswish`, `Hardsigmoid`,
//! `Sigmoid`, `Tanh`.

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

/// `torch.nn.ReLU6`: `min(max(x, 0), 6)` (MobileNetV2's activation).
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct ReLU6;
activation!(ReLU6, |self, xs| xs.relu6());

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

/// `torch.nn.Hardswish`: `x * relu6(x + 3) / 6` (MobileNetV3's activation).
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Hardswish;
activation!(Hardswish, |self, xs| xs.hardswish());

/// `torch.nn.Hardsigmoid`: `relu6(x + 3) / 6` (the gate of MobileNetV3's squeeze-excitation).
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Hardsigmoid;
activation!(Hardsigmoid, |self, xs| xs.hardsigmoid());

/// `torch.nn.Sigmoid`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Sigmoid;
activation!(Sigmoid, |self, xs| xs.sigmoid());

/// `torch.nn.Tanh`.
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Tanh;
activation!(Tanh, |self, xs| xs.tanh());
