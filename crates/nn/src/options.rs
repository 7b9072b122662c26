//! `LayerOptions`: the dtype and device a layer's tensors are created with, and whether its
//! random initialisation runs.

use tch::{Device, Kind, Tensor};

/// How a layer creates its tensors: PyTorch's `dtype=` and `device=` factory arguments, and
/// whether the default initialisation runs.
///
/// Every constructor taking options (`Linear::new_on`, `resnet50_on`, ...) creates each tensor
/// once, directly in `kind` on `device`: nothing is built on the CPU and moved. With
/// [`LayerOptions::skip_init`] the tensors are created with `empty` and no initialiser runs,
/// PyTorch's `torch.nn.utils.skip_init` (and meta-device) idea for models whose weights are
/// loaded right after, so building ResNet-50 on a GPU and loading a file costs one allocation
/// and one write per tensor.
///
/// ```
/// use tch::{Device, Kind};
/// use torchlight_nn::{resnet18_on, LayerOptions, Linear};
/// let head = Linear::new_on(512, 10, true, (Kind::BFloat16, Device::Cpu));
/// assert_eq!(head.weight.kind(), Kind::BFloat16);
/// // Uninitialised: load weights into it before use.
/// let model = resnet18_on(10, LayerOptions::new(Kind::Float, Device::Cpu).skip_init());
/// # let _ = model;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerOptions {
    /// The dtype of floating-point tensors (weights, running statistics); integer buffers such
    /// as `num_batches_tracked` stay int64, as in PyTorch. Default `Float`.
    pub kind: Kind,
    /// Where the tensors are created. Default the CPU.
    pub device: Device,
    /// Run the layer's default initialisation (PyTorch's `reset_parameters`); `false` leaves
    /// the tensors uninitialised (`torch.empty`). Default `true`.
    pub init: bool,
}

impl Default for LayerOptions {
    fn default() -> Self {
        LayerOptions { kind: Kind::Float, device: Device::Cpu, init: true }
    }
}

impl LayerOptions {
    /// Tensors of `kind` on `device`, initialised.
    pub fn new(kind: Kind, device: Device) -> Self {
        LayerOptions { kind, device, init: true }
    }

    /// No initialisation: every tensor is created with `empty` (undefined values) and must be
    /// filled, typically by `load_weights` / `load_state_dict`, before use.
    pub fn skip_init(self) -> Self {
        LayerOptions { init: false, ..self }
    }

    /// Sets whether the default initialisation runs.
    pub fn with_init(self, init: bool) -> Self {
        LayerOptions { init, ..self }
    }

    /// A trainable parameter of `shape`, initialised by `init` unless initialisation is skipped.
    pub(crate) fn param(&self, shape: &[i64], init: impl FnOnce(&Tensor)) -> Tensor {
        let t = Tensor::empty(shape, (self.kind, self.device));
        if self.init {
            init(&t);
        }
        t.set_requires_grad(true)
    }

    /// A tensor of `shape` and `kind` filled with `value` (`torch.full`), or left empty when
    /// initialisation is skipped.
    pub(crate) fn full(&self, shape: &[i64], value: f64, kind: Kind) -> Tensor {
        if self.init {
            Tensor::full(shape, value, (kind, self.device))
        } else {
            Tensor::empty(shape, (kind, self.device))
        }
    }
}

impl From<(Kind, Device)> for LayerOptions {
    fn from((kind, device): (Kind, Device)) -> Self {
        LayerOptions::new(kind, device)
    }
}

impl From<Device> for LayerOptions {
    fn from(device: Device) -> Self {
        LayerOptions { device, ..LayerOptions::default() }
    }
}
