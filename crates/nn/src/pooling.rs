//! Pooling layers: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`.

use crate::module::Module;
use tch::Tensor;

/// `torch.nn.MaxPool2d`. Input `[N, C, H, W]`.
#[derive(Debug, Clone, Copy, Module)]
pub struct MaxPool2d {
    /// Window size.
    #[module(skip)]
    pub kernel_size: [i64; 2],
    /// Step between windows (PyTorch's default: the kernel size).
    #[module(skip)]
    pub stride: [i64; 2],
    /// Implicit negative-infinity padding.
    #[module(skip)]
    pub padding: [i64; 2],
    /// Spacing inside the window.
    #[module(skip)]
    pub dilation: [i64; 2],
    /// Round the output size up instead of down.
    #[module(skip)]
    pub ceil_mode: bool,
}

impl MaxPool2d {
    /// A square window with explicit stride and padding, as ResNet's stem (`3, 2, 1`).
    pub fn new(kernel_size: i64, stride: i64, padding: i64) -> Self {
        MaxPool2d {
            kernel_size: [kernel_size; 2],
            stride: [stride; 2],
            padding: [padding; 2],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }
}

impl tch::nn::ModuleT for MaxPool2d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.max_pool2d(self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
    }
}

/// `torch.nn.AvgPool2d`. Input `[N, C, H, W]`.
#[derive(Debug, Clone, Copy, Module)]
pub struct AvgPool2d {
    /// Window size.
    #[module(skip)]
    pub kernel_size: [i64; 2],
    /// Step between windows.
    #[module(skip)]
    pub stride: [i64; 2],
    /// Implicit zero padding.
    #[module(skip)]
    pub padding: [i64; 2],
    /// Round the output size up instead of down.
    #[module(skip)]
    pub ceil_mode: bool,
    /// Count padded zeros in the average (PyTorch's default: true).
    #[module(skip)]
    pub count_include_pad: bool,
}

impl AvgPool2d {
    /// A square window with explicit stride and padding.
    pub fn new(kernel_size: i64, stride: i64, padding: i64) -> Self {
        AvgPool2d {
            kernel_size: [kernel_size; 2],
            stride: [stride; 2],
            padding: [padding; 2],
            ceil_mode: false,
            count_include_pad: true,
        }
    }
}

impl tch::nn::ModuleT for AvgPool2d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.avg_pool2d(
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            None,
        )
    }
}

/// `torch.nn.AdaptiveAvgPool2d`: average-pools `[N, C, H, W]` to `[N, C, out_h, out_w]`.
#[derive(Debug, Clone, Copy, Module)]
pub struct AdaptiveAvgPool2d {
    /// `(out_h, out_w)`; `(1, 1)` is global average pooling.
    #[module(skip)]
    pub output_size: [i64; 2],
}

impl tch::nn::ModuleT for AdaptiveAvgPool2d {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.adaptive_avg_pool2d(self.output_size)
    }
}
