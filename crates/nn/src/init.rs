//! Initialisers (`torch.nn.init`) and policies that apply them over a model by layer kind.
//!
//! All draw from torch's global generator, so `seed_everything` makes them repeatable, and
//! all work in place under no-grad, like PyTorch's trailing-underscore functions.

use crate::module::{visit_modules, Module};
use tch::Tensor;
use torchlight_tensor::no_grad;

/// `mode` of the Kaiming initialisers: which fan the variance is preserved over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanMode {
    /// Preserve the variance of activations in the forward pass (PyTorch's default).
    FanIn,
    /// Preserve the variance of gradients in the backward pass (torchvision's ResNet convs).
    FanOut,
}

/// The nonlinearity that follows a layer, for [`calculate_gain`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nonlinearity {
    /// Identity, convolutions and linear layers: gain 1.
    Linear,
    /// Sigmoid: gain 1.
    Sigmoid,
    /// Tanh: gain 5/3.
    Tanh,
    /// ReLU: gain sqrt(2).
    Relu,
    /// Leaky ReLU with this negative slope: gain sqrt(2 / (1 + slope^2)).
    LeakyRelu(f64),
    /// SELU: gain 3/4.
    Selu,
}

/// `torch.nn.init.calculate_gain`.
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu(slope) => (2.0 / (1.0 + slope * slope)).sqrt(),
        Nonlinearity::Selu => 0.75,
    }
}

/// `(fan_in, fan_out)` of a weight: `[out, in, k...]` gives `(in * prod(k), out * prod(k))`.
///
/// # Panics
/// For tensors with fewer than two dimensions, as PyTorch raises.
pub fn fans(tensor: &Tensor) -> (i64, i64) {
    let size = tensor.size();
    assert!(size.len() >= 2, "fan in and fan out need at least 2 dimensions, got {size:?}");
    let receptive: i64 = size[2..].iter().product();
    (size[1] * receptive, size[0] * receptive)
}

fn fan(tensor: &Tensor, mode: FanMode) -> f64 {
    let (fan_in, fan_out) = fans(tensor);
    (match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    }) as f64
}

fn in_place(tensor: &Tensor, f: impl FnOnce(&mut Tensor)) {
    let _guard = no_grad();
    f(&mut tensor.shallow_clone());
}

/// `nn.init.uniform_(t, low, high)`.
pub fn uniform_(tensor: &Tensor, low: f64, high: f64) {
    in_place(tensor, |t| {
        let _ = t.uniform_(low, high);
    });
}

/// `nn.init.normal_(t, mean, std)`.
pub fn normal_(tensor: &Tensor, mean: f64, std: f64) {
    in_place(tensor, |t| {
        let _ = t.normal_(mean, std);
    });
}

/// `nn.init.constant_(t, value)`.
pub fn constant_(tensor: &Tensor, value: f64) {
    in_place(tensor, |t| {
        let _ = t.fill_(value);
    });
}

/// `nn.init.zeros_(t)`.
pub fn zeros_(tensor: &Tensor) {
    constant_(tensor, 0.0);
}

/// `nn.init.ones_(t)`.
pub fn ones_(tensor: &Tensor) {
    constant_(tensor, 1.0);
}

/// `nn.init.kaiming_uniform_(t, mode=..., nonlinearity=...)`: U(-b, b) with
/// `b = sqrt(3) * gain / sqrt(fan)`, computed in PyTorch's order so the bound is the same
/// float and a seeded draw is the same bit for bit.
pub fn kaiming_uniform_(tensor: &Tensor, mode: FanMode, nonlinearity: Nonlinearity) {
    let std = calculate_gain(nonlinearity) / fan(tensor, mode).sqrt();
    let bound = 3f64.sqrt() * std;
    uniform_(tensor, -bound, bound);
}

/// `nn.init.kaiming_normal_(t, mode=..., nonlinearity=...)`: N(0, std) with
/// `std = gain / sqrt(fan)`.
pub fn kaiming_normal_(tensor: &Tensor, mode: FanMode, nonlinearity: Nonlinearity) {
    let std = calculate_gain(nonlinearity) / fan(tensor, mode).sqrt();
    normal_(tensor, 0.0, std);
}

/// `nn.init.xavier_uniform_(t, gain)`: U(-a, a) with `a = sqrt(3) * gain * sqrt(2 / (fan_in +
/// fan_out))`, in PyTorch's order of operations (the same bound, so the same draws).
pub fn xavier_uniform_(tensor: &Tensor, gain: f64) {
    let (fan_in, fan_out) = fans(tensor);
    let std = gain * (2.0 / (fan_in + fan_out) as f64).sqrt();
    let bound = 3f64.sqrt() * std;
    uniform_(tensor, -bound, bound);
}

/// `nn.init.xavier_normal_(t, gain)`: N(0, std) with `std = gain * sqrt(2 / (fan_in + fan_out))`.
pub fn xavier_normal_(tensor: &Tensor, gain: f64) {
    let (fan_in, fan_out) = fans(tensor);
    normal_(tensor, 0.0, gain * (2.0 / (fan_in + fan_out) as f64).sqrt());
}

/// `nn.init.trunc_normal_(t, mean, std, a, b)`: N(mean, std) truncated to `[a, b]` (absolute
/// bounds, PyTorch's defaults -2 and 2), drawn as PyTorch does: uniform over the truncated
/// range of the normal CDF, the inverse error function, then scale, shift and clamp; so a
/// seeded draw equals PyTorch's (exactly whenever `a` and `b` lie beyond ~6 std, where the
/// CDF bounds are exactly 0 and 1, as in ConvNeXt's and ViT's initialisation).
pub fn trunc_normal_(tensor: &Tensor, mean: f64, std: f64, a: f64, b: f64) {
    // The normal CDF through libtorch's double-precision erf (std has no erf).
    let norm_cdf = |x: f64| (1.0 + Tensor::from(x / 2f64.sqrt()).erf().double_value(&[])) / 2.0;
    let (low, high) = (norm_cdf((a - mean) / std), norm_cdf((b - mean) / std));
    in_place(tensor, |t| {
        let _ = t.uniform_(2.0 * low - 1.0, 2.0 * high - 1.0);
        let _ = t.erfinv_();
        let _ = t.g_mul_scalar_(std * 2f64.sqrt());
        let _ = t.g_add_scalar_(mean);
        let _ = t.clamp_(a, b);
    });
}

/// One initialiser, as a value a policy can hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// [`kaiming_normal_`].
    KaimingNormal(FanMode, Nonlinearity),
    /// [`kaiming_uniform_`].
    KaimingUniform(FanMode, Nonlinearity),
    /// [`xavier_normal_`] with this gain.
    XavierNormal(f64),
    /// [`xavier_uniform_`] with this gain.
    XavierUniform(f64),
    /// [`normal_`] with mean and std.
    Normal(f64, f64),
    /// [`uniform_`] over `[low, high)`.
    Uniform(f64, f64),
    /// [`trunc_normal_`] with mean, std and the bounds `a`, `b`.
    TruncNormal(f64, f64, f64, f64),
    /// [`constant_`].
    Constant(f64),
}

impl Init {
    /// Applies this initialiser to `tensor` in place.
    pub fn apply(self, tensor: &Tensor) {
        match self {
            Init::KaimingNormal(mode, nl) => kaiming_normal_(tensor, mode, nl),
            Init::KaimingUniform(mode, nl) => kaiming_uniform_(tensor, mode, nl),
            Init::XavierNormal(gain) => xavier_normal_(tensor, gain),
            Init::XavierUniform(gain) => xavier_uniform_(tensor, gain),
            Init::Normal(mean, std) => normal_(tensor, mean, std),
            Init::Uniform(low, high) => uniform_(tensor, low, high),
            Init::TruncNormal(mean, std, a, b) => trunc_normal_(tensor, mean, std, a, b),
            Init::Constant(value) => constant_(tensor, value),
        }
    }
}

/// Initialisers by layer kind and tensor name, the declarative form of PyTorch's
/// `model.apply(init_weights)` with its `isinstance` checks:
///
/// ```
/// use torchlight_nn::init::{FanMode, Init, InitPolicy, Nonlinearity};
/// let policy = InitPolicy::new()
///     .rule("Conv2d", "weight", Init::KaimingNormal(FanMode::FanOut, Nonlinearity::Relu))
///     .rule("BatchNorm2d", "weight", Init::Constant(1.0))
///     .rule("BatchNorm2d", "bias", Init::Constant(0.0))
///     .rule("Linear", "bias", Init::Constant(0.0));
/// let model = torchlight_nn::resnet18(10);
/// assert_eq!(policy.apply(&model), 20 + 2 * 20 + 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct InitPolicy {
    rules: Vec<(&'static str, &'static str, Init)>,
}

impl InitPolicy {
    /// An empty policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Initialise tensor `name` (`"weight"`, `"bias"`) of every layer of kind `kind`
    /// (`Module::kind`, e.g. `"Conv2d"`) with `init`.
    pub fn rule(mut self, kind: &'static str, name: &'static str, init: Init) -> Self {
        self.rules.push((kind, name, init));
        self
    }

    /// Applies the rules over every module of `model`; returns how many tensors were set.
    pub fn apply(&self, model: &dyn Module) -> usize {
        let mut count = 0;
        visit_modules(model, &mut |_, m| {
            for own in m.own_tensors() {
                for (kind, name, init) in &self.rules {
                    if *kind == m.kind() && *name == own.name {
                        init.apply(own.tensor);
                        count += 1;
                    }
                }
            }
        });
        count
    }
}
