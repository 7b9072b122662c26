//! `Conv2d` (`torch.nn.Conv2d`, zero padding).

use crate::init::{kaiming_uniform_, uniform_, FanMode, Nonlinearity};
use crate::module::Module;
use crate::options::LayerOptions;
use tch::Tensor;

/// Options of a [`Conv2d`], with PyTorch's defaults (stride 1, padding 0, dilation 1,
/// groups 1, bias on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Stride `(h, w)`.
    pub stride: [i64; 2],
    /// Zero padding `(h, w)`.
    pub padding: [i64; 2],
    /// Dilation `(h, w)`.
    pub dilation: [i64; 2],
    /// Groups; in and out channels must both divide by it.
    pub groups: i64,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1, bias: true }
    }
}

impl Conv2dConfig {
    /// The same stride on both axes.
    pub fn with_stride(mut self, stride: i64) -> Self {
        self.stride = [stride, stride];
        self
    }
    /// The same padding on both axes.
    pub fn with_padding(mut self, padding: i64) -> Self {
        self.padding = [padding, padding];
        self
    }
    /// The same dilation on both axes.
    pub fn with_dilation(mut self, dilation: i64) -> Self {
        self.dilation = [dilation, dilation];
        self
    }
    /// Grouped convolution.
    pub fn with_groups(mut self, groups: i64) -> Self {
        self.groups = groups;
        self
    }
    /// With or without bias.
    pub fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }
}

/// A 2-D convolution. Input `[N, C_in, H, W]`, output `[N, C_out, H_out, W_out]`.
#[derive(Debug, Module)]
pub struct Conv2d {
    /// `[C_out, C_in / groups, kH, kW]`.
    #[param]
    pub weight: Tensor,
    /// `[C_out]`, when the layer has a bias.
    #[param]
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation, groups.
    #[module(skip)]
    pub config: Conv2dConfig,
}

impl Conv2d {
    /// A float32 CPU square-kernel convolution initialised as PyTorch does (weight
    /// kaiming-uniform with `a = sqrt(5)`, bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
    ///
    /// # Panics
    /// When `in_channels` or `out_channels` does not divide by `config.groups`.
    pub fn new(in_channels: i64, out_channels: i64, kernel_size: i64, config: Conv2dConfig) -> Self {
        Self::new_on(in_channels, out_channels, kernel_size, config, LayerOptions::default())
    }

    /// The convolution with its tensors created in `options`' dtype on its device,
    /// initialised unless skipped.
    ///
    /// # Panics
    /// When `in_channels` or `out_channels` does not divide by `config.groups`.
    pub fn new_on(
        in_channels: i64,
        out_channels: i64,
        kernel_size: i64,
        config: Conv2dConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(
            config.groups > 0 && in_channels % config.groups == 0 && out_channels % config.groups == 0,
            "Conv2d: in_channels {in_channels} and out_channels {out_channels} must divide by groups {}",
            config.groups
        );
        let o = options.into();
        let weight = o.param(&[out_channels, in_channels / config.groups, kernel_size, kernel_size], |w| {
            kaiming_uniform_(w, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()))
        });
        let fan_in = (in_channels / config.groups * kernel_size * kernel_size) as f64;
        let bias = config
            .bias
            .then(|| o.param(&[out_channels], |b| uniform_(b, -1.0 / fan_in.sqrt(), 1.0 / fan_in.sqrt())));
        Conv2d { weight, bias, config }
    }
}

impl tch::nn::ModuleT for Conv2d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        let c = &self.config;
        xs.conv2d(&self.weight, self.bias.as_ref(), c.stride, c.padding, c.dilation, c.groups)
    }
}
