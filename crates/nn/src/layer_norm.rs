//! `LayerNorm` (`torch.nn.LayerNorm`) and `LayerNorm2d`, torchvision's channels-last layer norm
//! over `[N, C, H, W]` (ConvNeXt's).

use crate::module::Module;
use crate::options::LayerOptions;
use tch::Tensor;

/// `[C]` weight 1 and bias 0 (PyTorch's `reset_parameters`), when affine.
fn affine(channels: &[i64], elementwise_affine: bool, o: LayerOptions) -> (Option<Tensor>, Option<Tensor>) {
    if !elementwise_affine {
        return (None, None);
    }
    let weight = o.full(channels, 1.0, o.kind).set_requires_grad(true);
    let bias = o.full(channels, 0.0, o.kind).set_requires_grad(true);
    (Some(weight), Some(bias))
}

/// Layer normalisation over the trailing `normalized_shape` dims: `(x - mean) / sqrt(var + eps)
/// * weight + bias`, with the biased variance, the same in training and evaluation. Input
/// `[*, normalized_shape]`.
#[derive(Debug, Module)]
pub struct LayerNorm {
    /// `normalized_shape` scale, when elementwise-affine.
    #[param]
    pub weight: Option<Tensor>,
    /// `normalized_shape` shift, when elementwise-affine.
    #[param]
    pub bias: Option<Tensor>,
    /// The trailing dims normalised over.
    #[module(skip)]
    pub normalized_shape: Vec<i64>,
    /// Added to the variance (PyTorch's default 1e-5; torchvision's ViT and ConvNeXt use 1e-6).
    #[module(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// A float32 CPU layer over the last dim of size `dim` with weight and bias
    /// (`nn.LayerNorm(dim, eps=eps)`).
    pub fn new(dim: i64, eps: f64) -> Self {
        Self::new_on(&[dim], eps, true, LayerOptions::default())
    }

    /// `nn.LayerNorm(normalized_shape, eps, elementwise_affine)` with its tensors created in
    /// `options`' dtype on its device.
    pub fn new_on(
        normalized_shape: &[i64],
        eps: f64,
        elementwise_affine: bool,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let (weight, bias) = affine(normalized_shape, elementwise_affine, options.into());
        LayerNorm { weight, bias, normalized_shape: normalized_shape.to_vec(), eps }
    }
}

impl tch::nn::ModuleT for LayerNorm {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.layer_norm(
            self.normalized_shape.as_slice(),
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
            true,
        )
    }
}

/// torchvision's `LayerNorm2d` (ConvNeXt's stem, downsampling and head norm): a [`LayerNorm`]
/// over the channels of `[N, C, H, W]` at each position, computed channels-last (permute to
/// `[N, H, W, C]`, normalise, permute back) as torchvision does. Keys `weight`, `bias` (`[C]`).
#[derive(Debug, Module)]
pub struct LayerNorm2d {
    /// `[C]` scale.
    #[param]
    pub weight: Option<Tensor>,
    /// `[C]` shift.
    #[param]
    pub bias: Option<Tensor>,
    /// Added to the variance (torchvision's ConvNeXt: 1e-6).
    #[module(skip)]
    pub eps: f64,
    /// `C`.
    #[module(skip)]
    pub channels: i64,
}

impl LayerNorm2d {
    /// Over `channels` channels, weight 1 and bias 0, tensors created in `options`' dtype on its
    /// device.
    pub fn new_on(channels: i64, eps: f64, options: impl Into<LayerOptions>) -> Self {
        let (weight, bias) = affine(&[channels], true, options.into());
        LayerNorm2d { weight, bias, eps, channels }
    }
}

impl tch::nn::ModuleT for LayerNorm2d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.permute([0, 2, 3, 1])
            .layer_norm([self.channels], self.weight.as_ref(), self.bias.as_ref(), self.eps, true)
            .permute([0, 3, 1, 2])
    }
}
