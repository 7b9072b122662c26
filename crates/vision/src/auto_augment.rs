//! torchvision's automatic augmentation policies on `u8` images, as on PIL images:
//! `TrivialAugmentWide` and `RandAugment`, each op torchvision's `_apply_op` (nearest
//! interpolation, torchvision's default) over this crate's Pillow-exact ops, with the
//! generator calls torchvision makes, in its order.

use crate::color_jitter::{adjust_brightness, adjust_contrast, adjust_saturation, adjust_sharpness};
use crate::error::Result;
use crate::geometry::{affine, degrees, rotate};
use crate::image::Image;
use crate::point_ops::{autocontrast, equalize, posterize, solarize};
use crate::torch_draws::randint;
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
    use AugmentOp::*;
    let mut image = image;
    match op {
        Identity => {}
        ShearX => {
            let shear = [degrees(magnitude.atan()), 0.0];
            image = affine(&image, 0.0, [0.0, 0.0], 1.0, shear, Some([0.0, 0.0]), fill)?;
        }
        ShearY => {
            let shear = [0.0, degrees(magnitude.atan())];
            image = affine(&image, 0.0, [0.0, 0.0], 1.0, shear, Some([0.0, 0.0]), fill)?;
        }
        TranslateX => image = affine(&image, 0.0, [magnitude.trunc(), 0.0], 1.0, [0.0, 0.0], None, fill)?,
        TranslateY => image = affine(&image, 0.0, [0.0, magnitude.trunc()], 1.0, [0.0, 0.0], None, fill)?,
        Rotate => image = rotate(&image, magnitude, false, None, fill)?,
        Brightness => adjust_brightness(&mut image, 1.0 + magnitude),
        Color => adjust_saturation(&mut image, 1.0 + magnitude),
        Contrast => adjust_contrast(&mut image, 1.0 + magnitude),
        Sharpness => adjust_sharpness(&mut image, 1.0 + magnitude),
        Posterize => posterize(&mut image, magnitude.trunc() as u32)?,
        Solarize => solarize(&mut image, magnitude),
        AutoContrast => autocontrast(&mut image),
        Equalize => equalize(&mut image),
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
        TrivialAugmentWide { space: wide_space(num_magnitude_bins), fill: vec![] }
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
        apply_op(image, *op, magnitude, &self.fill)
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
        RandAugment { num_ops, magnitude, bins: num_magnitude_bins, fill: vec![] }
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
            image = apply_op(image, *op, magnitude, &self.fill)?;
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
