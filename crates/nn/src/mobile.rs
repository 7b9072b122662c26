//! What torchvision's MobileNet and EfficientNet families share: channel rounding
//! (`_make_divisible`) and their weight initialisation.

use crate::batch_norm::BatchNorm2d;
use crate::conv::Conv2d;
use crate::init::{constant_, kaiming_normal_, FanMode, Nonlinearity};
use crate::linear::Linear;
use crate::module::{visit_modules, Module};

/// torchvision's `_make_divisible(v, divisor, min_value)`: `v` rounded to the nearest multiple
/// of `divisor` (at least `min_value`, default `divisor`), never more than 10% below `v`.
pub(crate) fn make_divisible(v: f64, divisor: i64, min_value: Option<i64>) -> i64 {
    let min_value = min_value.unwrap_or(divisor);
    let mut rounded = min_value.max((v + divisor as f64 / 2.0) as i64 / divisor * divisor);
    if (rounded as f64) < 0.9 * v {
        rounded += divisor;
    }
    rounded
}

/// The initialisation loop of torchvision's MobileNetV2/V3 and EfficientNet, over `model`'s
/// modules in registration order: convolutions kaiming-normal (fan-out, gain sqrt 2) with zero
/// bias, BatchNorm weight 1 and bias 0, and each Linear through `linear` (weight) with zero bias.
pub(crate) fn init_conv_bn_linear(model: &dyn Module, linear: impl Fn(&Linear)) {
    visit_modules(model, &mut |_, m| {
        let any = m.as_any();
        if let Some(conv) = any.downcast_ref::<Conv2d>() {
            kaiming_normal_(&conv.weight, FanMode::FanOut, Nonlinearity::Relu);
            conv.bias.iter().for_each(|b| constant_(b, 0.0));
        } else if let Some(norm) = any.downcast_ref::<BatchNorm2d>() {
            norm.weight.iter().for_each(|w| constant_(w, 1.0));
            norm.bias.iter().for_each(|b| constant_(b, 0.0));
        } else if let Some(lin) = any.downcast_ref::<Linear>() {
            linear(lin);
            lin.bias.iter().for_each(|b| constant_(b, 0.0));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::make_divisible;

    #[test]
    fn channels_round_as_torchvision() {
        // Values torchvision's _make_divisible gives.
        assert_eq!(make_divisible(32.0 * 1.1, 8, None), 32);
        assert_eq!(make_divisible(40.0 * 1.2, 8, None), 48);
        assert_eq!(make_divisible(1280.0 * 1.2, 8, None), 1536);
        assert_eq!(make_divisible(240.0 / 4.0, 8, None), 64);
        assert_eq!(make_divisible(3.0, 8, None), 8);
        assert_eq!(make_divisible(90.0, 8, None), 88);
        assert_eq!(make_divisible(20.0, 16, None), 32, "no more than 10% below v");
    }
}
