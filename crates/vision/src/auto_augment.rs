//! torchvision's automatic augmentation policies on `u8` images, as on PIL images:
//! `AutoAugment` (its ImageNet, CIFAR10 and SVHN policies), `TrivialAugmentWide` and
//! `RandAugment`, each op torchvision's `_apply_op` (nearest interpolation by default, as
//! torchvision's, or bilinear/bicubic) over this crate's Pillow-exact ops, with the generator
//! calls torchvision makes, in its order. `AugMix`, which runs on tensors, is in `augmix.rs`.

use crate::color_jitter::{adjust_brightness, adjust_contrast, adjust_saturation, adjust_sharpness};
use crate::error::Result;
use crate::geometry::{affine_with, degrees, rotate_with};
use crate::image::Image;
use crate::point_ops::{autocontrast, equalize, invert, posterize, solarize};
use crate::resample::InterpolationMode;
use crate::torch_draws::{rand_f32, randint};
use crate::transform::{expect_image, Sample, Transform};
use rand::RngCore;
use std::any::Any;
use torchlight_base::seed::Rng;

/// One op of the policies (torchvision's `op_name`s), in their augmentation-space order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AugmentOp {
    /// The image unchanged.
    Identity,
    /// `affine` with shear `(degrees(atan(m)), 0)` about the top-left corner.
    ShearX,
    /// `affine` with shear `(0, degrees(atan(m)))` about the top-left corner.
    ShearY,
    /// `affine` translated by `(int(m), 0)`.
    TranslateX,
    /// `affine` translated by `(0, int(m))`.
    TranslateY,
    /// `rotate` by `m` degrees.
    Rotate,
    /// `adjust_brightness(1 + m)`.
    Brightness,
    /// `adjust_saturation(1 + m)`.
    Color,
    /// `adjust_contrast(1 + m)`.
    Contrast,
    /// `adjust_sharpness(1 + m)`.
    Sharpness,
    /// `posterize(int(m))`.
    Posterize,
    /// `solarize(m)`.
    Solarize,
    /// `autocontrast`.
    AutoContrast,
    /// `equalize`.
    Equalize,
    /// `invert` (AutoAugment's policies only).
    Invert,
}

/// The 14 ops of `TrivialAugmentWide` and `RandAugment`, in torchvision's order.
pub const AUGMENT_OPS: [AugmentOp; 14] = [
    AugmentOp::Identity,
    AugmentOp::ShearX,
    AugmentOp::ShearY,
    AugmentOp::TranslateX,
    AugmentOp::TranslateY,
    AugmentOp::Rotate,
    AugmentOp::Brightness,
    AugmentOp::Color,
    AugmentOp::Contrast,
    AugmentOp::Sharpness,
    AugmentOp::Posterize,
    AugmentOp::Solarize,
    AugmentOp::AutoContrast,
    AugmentOp::Equalize,
];

/// `torch.linspace(start, end, steps)` in float32 on the CPU: `step = (end - start) / (steps -
/// 1)` in `f32`, the first half `start + step * i`, the rest `end - step * (steps - 1 - i)`,
/// each one fused multiply-add (what libtorch 2.11's kernel computes; tested against it).
pub fn torch_linspace_f32(start: f64, end: f64, steps: usize) -> Vec<f32> {
    let (start, end) = (start as f32, end as f32);
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f32;
    (0..steps)
        .map(|i| {
            if i < steps / 2 {
                step.mul_add(i as f32, start)
            } else {
                (-step).mul_add((steps - 1 - i) as f32, end)
            }
        })
        .collect()
}

/// `8 - (torch.arange(bins) / ((bins - 1) / div)).round().int()` (float32 division, ties to
/// even): the posterize bits of each bin.
fn posterize_bits(bins: usize, div: f64) -> Vec<f32> {
    let d = ((bins - 1) as f64 / div) as f32;
    (0..bins).map(|i| 8.0 - (i as f32 / d).round_ties_even()).collect()
}

/// An op's magnitudes per bin (empty for the ops without one) and whether it takes a random sign.
#[derive(Debug, Clone, PartialEq)]
struct Space {
    ops: Vec<(AugmentOp, Vec<f32>, bool)>,
}

/// TrivialAugmentWide's augmentation space for `bins` bins.
fn wide_space(bins: usize) -> Space {
    use AugmentOp::*;
    let lin = |a, b| torch_linspace_f32(a, b, bins);
    Space {
        ops: vec![
            (Identity, vec![], false),
            (ShearX, lin(0.0, 0.99), true),
            (ShearY, lin(0.0, 0.99), true),
            (TranslateX, lin(0.0, 32.0), true),
            (TranslateY, lin(0.0, 32.0), true),
            (Rotate, lin(0.0, 135.0), true),
            (Brightness, lin(0.0, 0.99), true),
            (Color, lin(0.0, 0.99), true),
            (Contrast, lin(0.0, 0.99), true),
            (Sharpness, lin(0.0, 0.99), true),
            (Posterize, posterize_bits(bins, 6.0), false),
            (Solarize, lin(255.0, 0.0), false),
            (AutoContrast, vec![], false),
            (Equalize, vec![], false),
        ],
    }
}

/// RandAugment's augmentation space for `bins` bins and an image of `height x width`.
fn rand_space(bins: usize, height: usize, width: usize) -> Space {
    use AugmentOp::*;
    let lin = |a, b| torch_linspace_f32(a, b, bins);
    Space {
        ops: vec![
            (Identity, vec![], false),
            (ShearX, lin(0.0, 0.3), true),
            (ShearY, lin(0.0, 0.3), true),
            (TranslateX, lin(0.0, 150.0 / 331.0 * width as f64), true),
            (TranslateY, lin(0.0, 150.0 / 331.0 * height as f64), true),
            (Rotate, lin(0.0, 30.0), true),
            (Brightness, lin(0.0, 0.9), true),
            (Color, lin(0.0, 0.9), true),
            (Contrast, lin(0.0, 0.9), true),
            (Sharpness, lin(0.0, 0.9), true),
            (Posterize, posterize_bits(bins, 4.0), false),
            (Solarize, lin(255.0, 0.0), false),
            (AutoContrast, vec![], false),
            (Equalize, vec![], false),
        ],
    }
}

/// torchvision's `_apply_op(img, op_name, magnitude, NEAREST, fill)` on a PIL image.
///
/// # Errors
/// When `fill` has neither 0, 1 nor `channels` values, or posterize gets bits outside `1..=8`.
pub fn apply_op(image: Image, op: AugmentOp, magnitude: f64, fill: &[u8]) -> Result<Image> {
    apply_op_with(image, op, magnitude, InterpolationMode::Nearest, fill)
}

/// torchvision's `_apply_op(img, op_name, magnitude, interpolation, fill)` on a PIL image: the
/// geometric ops sample with `interpolation` (nearest, bilinear or bicubic, PIL's modes).
///
/// # Errors
/// As [`apply_op`], and for another interpolation mode when a geometric op runs.
pub fn apply_op_with(
    image: Image,
    op: AugmentOp,
    magnitude: f64,
    interpolation: InterpolationMode,
    fill: &[u8],
) -> Result<Image> {
    use AugmentOp::*;
    let mut image = image;
    let affine = |image: &Image, translate: [f64; 2], shear: [f64; 2], center: Option<[f64; 2]>| {
        affine_with(image, 0.0, translate, 1.0, shear, center, fill, interpolation)
    };
    match op {
        Identity => {}
        ShearX => image = affine(&image, [0.0, 0.0], [degrees(magnitude.atan()), 0.0], Some([0.0, 0.0]))?,
        ShearY => image = affine(&image, [0.0, 0.0], [0.0, degrees(magnitude.atan())], Some([0.0, 0.0]))?,
        TranslateX => image = affine(&image, [magnitude.trunc(), 0.0], [0.0, 0.0], None)?,
        TranslateY => image = affine(&image, [0.0, magnitude.trunc()], [0.0, 0.0], None)?,
        Rotate => image = rotate_with(&image, magnitude, interpolation, false, None, fill)?,
        Brightness => adjust_brightness(&mut image, 1.0 + magnitude),
        Color => adjust_saturation(&mut image, 1.0 + magnitude),
        Contrast => adjust_contrast(&mut image, 1.0 + magnitude),
        Sharpness => adjust_sharpness(&mut image, 1.0 + magnitude),
        Posterize => posterize(&mut image, magnitude.trunc() as u32)?,
        Solarize => solarize(&mut image, magnitude),
        AutoContrast => autocontrast(&mut image),
        Equalize => equalize(&mut image),
        Invert => invert(&mut image),
    }
    Ok(image)
}

/// `torchvision.transforms.TrivialAugmentWide(num_magnitude_bins=31, NEAREST, fill)` on a PIL
/// image: one op drawn uniformly (`randint(14)`), then for ops with magnitudes a bin
/// (`randint(bins)`), then for signed ops a sign (`randint(2)`), as torchvision draws them.
#[derive(Debug, Clone, PartialEq)]
pub struct TrivialAugmentWide {
    /// The ops and their magnitudes for the bin count, built once (they depend on nothing else).
    space: Space,
    interpolation: InterpolationMode,
    fill: Vec<u8>,
}

impl Default for TrivialAugmentWide {
    fn default() -> Self {
        Self::new(31)
    }
}

impl TrivialAugmentWide {
    /// With `num_magnitude_bins` bins (31 in torchvision) and fill 0.
    ///
    /// # Panics
    /// If `num_magnitude_bins < 2`.
    pub fn new(num_magnitude_bins: usize) -> Self {
        assert!(num_magnitude_bins >= 2, "TrivialAugmentWide needs at least 2 magnitude bins");
        TrivialAugmentWide {
            space: wide_space(num_magnitude_bins),
            interpolation: InterpolationMode::Nearest,
            fill: vec![],
        }
    }

    /// The sampling of the geometric ops (torchvision's `interpolation`; nearest by default,
    /// bilinear and bicubic as PIL's; another is an error when a geometric op runs).
    pub fn with_interpolation(mut self, interpolation: InterpolationMode) -> Self {
        self.interpolation = interpolation;
        self
    }

    /// The fill of the geometric ops: one value, or one per channel (torchvision's `fill`); a
    /// count that fits neither is an error when a geometric op runs.
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// The transform with draws from any generator (a [`torchlight_data::TorchGenerator`]
    /// seeded as `torch.manual_seed(s)` gives torchvision's image for that seed).
    ///
    /// # Errors
    /// As [`apply_op`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let space = &self.space;
        let (op, magnitudes, signed) = &space.ops[randint(rng, 0, space.ops.len() as i64) as usize];
        let mut magnitude = if magnitudes.is_empty() {
            0.0
        } else {
            f64::from(magnitudes[randint(rng, 0, magnitudes.len() as i64) as usize])
        };
        if *signed && randint(rng, 0, 2) != 0 {
            magnitude = -magnitude;
        }
        apply_op_with(image, *op, magnitude, self.interpolation, &self.fill)
    }
}

impl Transform for TrivialAugmentWide {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "TrivialAugmentWide")?;
        Ok(Sample::Image(self.apply_with(image, rng)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        Some(
            expect_image(input, "TrivialAugmentWide")
                .and_then(|image| Ok(Sample::Image(self.apply_with(image, g)?))),
        )
    }
}

/// `torchvision.transforms.RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, NEAREST,
/// fill)` on a PIL image: `num_ops` times an op drawn uniformly (`randint(14)`) at the fixed
/// magnitude bin, with a sign drawn (`randint(2)`) for signed ops; the translations scale with
/// the image (`150 / 331` of its side at the last bin).
#[derive(Debug, Clone, PartialEq)]
pub struct RandAugment {
    num_ops: usize,
    magnitude: usize,
    bins: usize,
    interpolation: InterpolationMode,
    fill: Vec<u8>,
}

impl Default for RandAugment {
    fn default() -> Self {
        Self::new(2, 9, 31)
    }
}

impl RandAugment {
    /// `num_ops` ops at bin `magnitude` of `num_magnitude_bins`, fill 0.
    ///
    /// # Panics
    /// If `num_magnitude_bins < 2` or `magnitude >= num_magnitude_bins` (torchvision's index
    /// would be out of range).
    pub fn new(num_ops: usize, magnitude: usize, num_magnitude_bins: usize) -> Self {
        assert!(num_magnitude_bins >= 2, "RandAugment needs at least 2 magnitude bins");
        assert!(
            magnitude < num_magnitude_bins,
            "RandAugment magnitude {magnitude} must be below num_magnitude_bins {num_magnitude_bins}"
        );
        RandAugment {
            num_ops,
            magnitude,
            bins: num_magnitude_bins,
            interpolation: InterpolationMode::Nearest,
            fill: vec![],
        }
    }

    /// The sampling of the geometric ops (torchvision's `interpolation`; nearest by default,
    /// bilinear and bicubic as PIL's; another is an error when a geometric op runs).
    pub fn with_interpolation(mut self, interpolation: InterpolationMode) -> Self {
        self.interpolation = interpolation;
        self
    }

    /// The fill of the geometric ops: one value, or one per channel (torchvision's `fill`); a
    /// count that fits neither is an error when a geometric op runs.
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// The transform with draws from any generator, as [`TrivialAugmentWide::apply_with`].
    ///
    /// # Errors
    /// As [`apply_op`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let space = rand_space(self.bins, image.height(), image.width());
        let mut image = image;
        for _ in 0..self.num_ops {
            let (op, magnitudes, signed) = &space.ops[randint(rng, 0, space.ops.len() as i64) as usize];
            let mut magnitude =
                if magnitudes.is_empty() { 0.0 } else { f64::from(magnitudes[self.magnitude]) };
            if *signed && randint(rng, 0, 2) != 0 {
                magnitude = -magnitude;
            }
            image = apply_op_with(image, *op, magnitude, self.interpolation, &self.fill)?;
        }
        Ok(image)
    }
}

impl Transform for RandAugment {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "RandAugment")?;
        Ok(Sample::Image(self.apply_with(image, rng)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        Some(
            expect_image(input, "RandAugment")
                .and_then(|image| Ok(Sample::Image(self.apply_with(image, g)?))),
        )
    }
}

/// The datasets AutoAugment's policies were learned on (torchvision's `AutoAugmentPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoAugmentPolicy {
    /// `AutoAugmentPolicy.IMAGENET`, torchvision's default.
    ImageNet,
    /// `AutoAugmentPolicy.CIFAR10`.
    Cifar10,
    /// `AutoAugmentPolicy.SVHN`.
    Svhn,
}

/// One step of a sub-policy: the op, its probability and its magnitude bin (of 10).
type Step = (AugmentOp, f64, Option<usize>);

/// The 25 sub-policies of a policy, two steps each, in torchvision's order.
fn sub_policies(policy: AutoAugmentPolicy) -> &'static [(Step, Step); 25] {
    use AugmentOp::*;
    const IMAGENET: [(Step, Step); 25] = [
        ((Posterize, 0.4, Some(8)), (Rotate, 0.6, Some(9))),
        ((Solarize, 0.6, Some(5)), (AutoContrast, 0.6, None)),
        ((Equalize, 0.8, None), (Equalize, 0.6, None)),
        ((Posterize, 0.6, Some(7)), (Posterize, 0.6, Some(6))),
        ((Equalize, 0.4, None), (Solarize, 0.2, Some(4))),
        ((Equalize, 0.4, None), (Rotate, 0.8, Some(8))),
        ((Solarize, 0.6, Some(3)), (Equalize, 0.6, None)),
        ((Posterize, 0.8, Some(5)), (Equalize, 1.0, None)),
        ((Rotate, 0.2, Some(3)), (Solarize, 0.6, Some(8))),
        ((Equalize, 0.6, None), (Posterize, 0.4, Some(6))),
        ((Rotate, 0.8, Some(8)), (Color, 0.4, Some(0))),
        ((Rotate, 0.4, Some(9)), (Equalize, 0.6, None)),
        ((Equalize, 0.0, None), (Equalize, 0.8, None)),
        ((Invert, 0.6, None), (Equalize, 1.0, None)),
        ((Color, 0.6, Some(4)), (Contrast, 1.0, Some(8))),
        ((Rotate, 0.8, Some(8)), (Color, 1.0, Some(2))),
        ((Color, 0.8, Some(8)), (Solarize, 0.8, Some(7))),
        ((Sharpness, 0.4, Some(7)), (Invert, 0.6, None)),
        ((ShearX, 0.6, Some(5)), (Equalize, 1.0, None)),
        ((Color, 0.4, Some(0)), (Equalize, 0.6, None)),
        ((Equalize, 0.4, None), (Solarize, 0.2, Some(4))),
        ((Solarize, 0.6, Some(5)), (AutoContrast, 0.6, None)),
        ((Invert, 0.6, None), (Equalize, 1.0, None)),
        ((Color, 0.6, Some(4)), (Contrast, 1.0, Some(8))),
        ((Equalize, 0.8, None), (Equalize, 0.6, None)),
    ];
    const CIFAR10: [(Step, Step); 25] = [
        ((Invert, 0.1, None), (Contrast, 0.2, Some(6))),
        ((Rotate, 0.7, Some(2)), (TranslateX, 0.3, Some(9))),
        ((Sharpness, 0.8, Some(1)), (Sharpness, 0.9, Some(3))),
        ((ShearY, 0.5, Some(8)), (TranslateY, 0.7, Some(9))),
        ((AutoContrast, 0.5, None), (Equalize, 0.9, None)),
        ((ShearY, 0.2, Some(7)), (Posterize, 0.3, Some(7))),
        ((Color, 0.4, Some(3)), (Brightness, 0.6, Some(7))),
        ((Sharpness, 0.3, Some(9)), (Brightness, 0.7, Some(9))),
        ((Equalize, 0.6, None), (Equalize, 0.5, None)),
        ((Contrast, 0.6, Some(7)), (Sharpness, 0.6, Some(5))),
        ((Color, 0.7, Some(7)), (TranslateX, 0.5, Some(8))),
        ((Equalize, 0.3, None), (AutoContrast, 0.4, None)),
        ((TranslateY, 0.4, Some(3)), (Sharpness, 0.2, Some(6))),
        ((Brightness, 0.9, Some(6)), (Color, 0.2, Some(8))),
        ((Solarize, 0.5, Some(2)), (Invert, 0.0, None)),
        ((Equalize, 0.2, None), (AutoContrast, 0.6, None)),
        ((Equalize, 0.2, None), (Equalize, 0.6, None)),
        ((Color, 0.9, Some(9)), (Equalize, 0.6, None)),
        ((AutoContrast, 0.8, None), (Solarize, 0.2, Some(8))),
        ((Brightness, 0.1, Some(3)), (Color, 0.7, Some(0))),
        ((Solarize, 0.4, Some(5)), (AutoContrast, 0.9, None)),
        ((TranslateY, 0.9, Some(9)), (TranslateY, 0.7, Some(9))),
        ((AutoContrast, 0.9, None), (Solarize, 0.8, Some(3))),
        ((Equalize, 0.8, None), (Invert, 0.1, None)),
        ((TranslateY, 0.7, Some(9)), (AutoContrast, 0.9, None)),
    ];
    const SVHN: [(Step, Step); 25] = [
        ((ShearX, 0.9, Some(4)), (Invert, 0.2, None)),
        ((ShearY, 0.9, Some(8)), (Invert, 0.7, None)),
        ((Equalize, 0.6, None), (Solarize, 0.6, Some(6))),
        ((Invert, 0.9, None), (Equalize, 0.6, None)),
        ((Equalize, 0.6, None), (Rotate, 0.9, Some(3))),
        ((ShearX, 0.9, Some(4)), (AutoContrast, 0.8, None)),
        ((ShearY, 0.9, Some(8)), (Invert, 0.4, None)),
        ((ShearY, 0.9, Some(5)), (Solarize, 0.2, Some(6))),
        ((Invert, 0.9, None), (AutoContrast, 0.8, None)),
        ((Equalize, 0.6, None), (Rotate, 0.9, Some(3))),
        ((ShearX, 0.9, Some(4)), (Solarize, 0.3, Some(3))),
        ((ShearY, 0.8, Some(8)), (Invert, 0.7, None)),
        ((Equalize, 0.9, None), (TranslateY, 0.6, Some(6))),
        ((Invert, 0.9, None), (Equalize, 0.6, None)),
        ((Contrast, 0.3, Some(3)), (Rotate, 0.8, Some(4))),
        ((Invert, 0.8, None), (TranslateY, 0.0, Some(2))),
        ((ShearY, 0.7, Some(6)), (Solarize, 0.4, Some(8))),
        ((Invert, 0.6, None), (Rotate, 0.8, Some(4))),
        ((ShearY, 0.3, Some(7)), (TranslateX, 0.9, Some(3))),
        ((ShearX, 0.1, Some(6)), (Invert, 0.6, None)),
        ((Solarize, 0.7, Some(2)), (TranslateY, 0.6, Some(7))),
        ((ShearY, 0.8, Some(4)), (Invert, 0.8, None)),
        ((ShearX, 0.7, Some(9)), (TranslateY, 0.8, Some(3))),
        ((ShearY, 0.8, Some(5)), (AutoContrast, 0.7, None)),
        ((ShearX, 0.7, Some(2)), (Invert, 0.1, None)),
    ];
    match policy {
        AutoAugmentPolicy::ImageNet => &IMAGENET,
        AutoAugmentPolicy::Cifar10 => &CIFAR10,
        AutoAugmentPolicy::Svhn => &SVHN,
    }
}

/// `torchvision.transforms.AutoAugment(policy, interpolation=NEAREST, fill)` on a PIL image:
/// a sub-policy drawn uniformly (`randint(25)`), two probabilities (`rand(2)`) and two signs
/// (`randint(2, (2,))`), all drawn before any op; then each step of the sub-policy runs when
/// its probability draw is at most the step's (compared in `float32`), at its magnitude bin of
/// RandAugment's space with 10 bins (translations `150 / 331` of the side at the last bin),
/// negated for a signed op when its sign draw is 0.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoAugment {
    policy: AutoAugmentPolicy,
    interpolation: InterpolationMode,
    fill: Vec<u8>,
}

impl Default for AutoAugment {
    fn default() -> Self {
        Self::new(AutoAugmentPolicy::ImageNet)
    }
}

impl AutoAugment {
    /// The policy, nearest interpolation, fill 0 (torchvision's defaults).
    pub fn new(policy: AutoAugmentPolicy) -> Self {
        AutoAugment { policy, interpolation: InterpolationMode::Nearest, fill: vec![] }
    }

    /// The policy this transform draws from.
    pub fn policy(&self) -> AutoAugmentPolicy {
        self.policy
    }

    /// The sampling of the geometric ops, as [`TrivialAugmentWide::with_interpolation`].
    pub fn with_interpolation(mut self, interpolation: InterpolationMode) -> Self {
        self.interpolation = interpolation;
        self
    }

    /// The fill of the geometric ops, as [`TrivialAugmentWide::with_fill`].
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// The magnitudes of `op`'s 10 bins on an image of `height x width` (empty for the ops
    /// without one) and whether it takes a sign: torchvision's `_augmentation_space(10, ...)`.
    pub fn magnitudes(op: AugmentOp, height: usize, width: usize) -> (Vec<f32>, bool) {
        rand_space(10, height, width)
            .ops
            .into_iter()
            .find(|(o, _, _)| *o == op)
            .map_or((vec![], false), |(_, m, signed)| (m, signed))
    }

    /// The transform with draws from any generator, as [`TrivialAugmentWide::apply_with`].
    ///
    /// # Errors
    /// As [`apply_op_with`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let policies = sub_policies(self.policy);
        let id = randint(rng, 0, policies.len() as i64) as usize;
        let probs = [rand_f32(rng), rand_f32(rng)];
        let signs = [randint(rng, 0, 2), randint(rng, 0, 2)];
        let space = rand_space(10, image.height(), image.width());
        let (first, second) = policies[id];
        let mut image = image;
        for (i, (op, p, bin)) in [first, second].into_iter().enumerate() {
            if probs[i] > p as f32 {
                continue;
            }
            // Invert is not in the space: no magnitude, no sign.
            let (magnitudes, signed) = space
                .ops
                .iter()
                .find(|(o, _, _)| *o == op)
                .map_or((&[][..], false), |(_, m, s)| (&m[..], *s));
            let mut magnitude = bin.map_or(0.0, |b| f64::from(magnitudes[b]));
            if signed && signs[i] == 0 {
                magnitude = -magnitude;
            }
            image = apply_op_with(image, op, magnitude, self.interpolation, &self.fill)?;
        }
        Ok(image)
    }
}

impl Transform for AutoAugment {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "AutoAugment")?;
        Ok(Sample::Image(self.apply_with(image, rng)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        Some(
            expect_image(input, "AutoAugment")
                .and_then(|image| Ok(Sample::Image(self.apply_with(image, g)?))),
        )
    }
}
