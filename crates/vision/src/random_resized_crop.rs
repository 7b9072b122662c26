//! `RandomResizedCrop`: a random box of random area and aspect ratio, resized to a fixed
//! size, with torchvision's sampling and its central-crop fallback.

use crate::crop_box::CropBox;
use crate::error::Result;
use crate::image::Image;
use crate::resample::{resample, InterpolationMode, Rect};
use crate::transform::{expect_image, LeadingCrop, Sample, Transform};
use rand::Rng as _;
use std::any::Any;
use torchlight_base::seed::Rng;

/// `torchvision.transforms.RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))` on
/// a PIL image.
///
/// [`RandomResizedCrop::get_params`] is torchvision's `get_params`: up to 10 tries of an area
/// fraction uniform in `scale` and a log-aspect-ratio uniform in `log(ratio)`, with
/// `w = round(sqrt(area * ratio))`, `h = round(sqrt(area / ratio))` (half to even) accepted
/// when the box fits, at a uniform position; otherwise a central crop of the whole image
/// clamped to the ratio range. The box is then resized to `size` with the antialiased filter of
/// [`crate::Resize`] (bilinear, torchvision's default, or
/// [`RandomResizedCrop::with_interpolation`]'s mode), reading the box in place (crop and resize
/// are one pass pair).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomResizedCrop {
    height: usize,
    width: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
    interpolation: InterpolationMode,
}

impl RandomResizedCrop {
    /// A `size x size` output with the default scale `(0.08, 1.0)` and ratio `(3/4, 4/3)`.
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        Self::rect(size, size)
    }

    /// A `height x width` output with the default scale and ratio.
    ///
    /// # Panics
    /// If a size is 0.
    pub fn rect(height: usize, width: usize) -> Self {
        assert!(height > 0 && width > 0, "RandomResizedCrop sizes must be positive");
        RandomResizedCrop {
            height,
            width,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            interpolation: InterpolationMode::Bilinear,
        }
    }

    /// Sets the range of the crop's area as a fraction of the image's (default `(0.08, 1.0)`).
    ///
    /// # Panics
    /// If the range is empty or not positive.
    pub fn with_scale(mut self, min: f64, max: f64) -> Self {
        assert!(0.0 < min && min <= max, "scale range ({min}, {max}) must be positive and ordered");
        self.scale = (min, max);
        self
    }

    /// Sets the range of the crop's aspect ratio `width / height` (default `(3/4, 4/3)`).
    ///
    /// # Panics
    /// If the range is empty or not positive.
    pub fn with_ratio(mut self, min: f64, max: f64) -> Self {
        assert!(0.0 < min && min <= max, "ratio range ({min}, {max}) must be positive and ordered");
        self.ratio = (min, max);
        self
    }

    /// Resizes the box with `mode` (torchvision's `interpolation`; bilinear by default).
    pub fn with_interpolation(mut self, mode: InterpolationMode) -> Self {
        self.interpolation = mode;
        self
    }

    /// The output `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// How the box is resized.
    pub fn interpolation(&self) -> InterpolationMode {
        self.interpolation
    }

    /// Draws the crop box for an image of `height x width`, as torchvision's `get_params`.
    pub fn get_params(&self, height: usize, width: usize, rng: &mut Rng) -> CropBox {
        let area = (height * width) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target_area = area * uniform(rng, self.scale.0, self.scale.1);
            let aspect = uniform(rng, log_lo, log_hi).exp();
            let w = (target_area * aspect).sqrt().round_ties_even() as usize;
            let h = (target_area / aspect).sqrt().round_ties_even() as usize;
            if 0 < w && w <= width && 0 < h && h <= height {
                let top = rng.random_range(0..=height - h);
                let left = rng.random_range(0..=width - w);
                return CropBox { top, left, height: h, width: w };
            }
        }
        self.fallback_box(height, width)
    }

    /// torchvision's fallback: a central crop, the whole image unless its ratio is outside the
    /// range.
    fn fallback_box(&self, height: usize, width: usize) -> CropBox {
        let in_ratio = width as f64 / height as f64;
        let (w, h) = if in_ratio < self.ratio.0 {
            (width, ((width as f64 / self.ratio.0).round_ties_even() as usize).min(height))
        } else if in_ratio > self.ratio.1 {
            (((height as f64 * self.ratio.1).round_ties_even() as usize).min(width), height)
        } else {
            (width, height)
        };
        CropBox { top: (height - h) / 2, left: (width - w) / 2, height: h, width: w }
    }

    /// [`RandomResizedCrop::get_params`] with torchvision's generator calls from any generator
    /// (`uniform_` in float32 with float32 log/exp of the ratio, `randint` for the position), so
    /// a [`crate::TorchGenerator`] seeded as `torch.manual_seed(s)` draws torchvision's box.
    /// [`Transform::apply`] keeps its own draws (`get_params`), which crop-box decoding repeats.
    pub fn get_params_with<R: rand::RngCore + ?Sized>(
        &self,
        height: usize,
        width: usize,
        rng: &mut R,
    ) -> CropBox {
        use crate::torch_draws::{randint, uniform_f32};
        let area = (height * width) as f64;
        let (log_lo, log_hi) = ((self.ratio.0 as f32).ln(), (self.ratio.1 as f32).ln());
        for _ in 0..10 {
            let target_area = area * f64::from(uniform_f32(rng, self.scale.0, self.scale.1));
            let aspect = f64::from(uniform_f32(rng, f64::from(log_lo), f64::from(log_hi)).exp());
            let w = (target_area * aspect).sqrt().round_ties_even() as usize;
            let h = (target_area / aspect).sqrt().round_ties_even() as usize;
            if 0 < w && w <= width && 0 < h && h <= height {
                let top = randint(rng, 0, (height - h + 1) as i64) as usize;
                let left = randint(rng, 0, (width - w + 1) as i64) as usize;
                return CropBox { top, left, height: h, width: w };
            }
        }
        self.fallback_box(height, width)
    }

    /// Crops `image` to `crop` and resizes it to the output size.
    pub fn crop_resize(&self, image: &Image, crop: CropBox) -> Image {
        let rect = Rect::new(crop.left, crop.top, crop.width, crop.height);
        let window = Rect::new(0, 0, self.width, self.height);
        resample(self.interpolation, image, rect, self.width, self.height, window)
    }
}

/// A uniform draw in `[lo, hi)`, like `torch.empty(1).uniform_(lo, hi)`.
pub(crate) fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

impl Transform for RandomResizedCrop {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "RandomResizedCrop")?;
        let crop = self.get_params(image.height(), image.width(), rng);
        Ok(Sample::Image(self.crop_resize(&image, crop)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        Some(expect_image(input, "RandomResizedCrop").map(|image| {
            let crop = self.get_params_with(image.height(), image.width(), g);
            Sample::Image(self.crop_resize(&image, crop))
        }))
    }

    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        Some(self)
    }
}

/// The box is [`RandomResizedCrop::get_params`]'s; its pixels are then resized to the output
/// size.
impl LeadingCrop for RandomResizedCrop {
    fn crop_box(&self, height: usize, width: usize, rng: &mut Rng) -> CropBox {
        self.get_params(height, width, rng)
    }

    fn apply_cropped(&self, region: Image, _rng: &mut Rng) -> Result<Sample> {
        let whole = CropBox { top: 0, left: 0, height: region.height(), width: region.width() };
        Ok(Sample::Image(self.crop_resize(&region, whole)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_base::seed::rng_from_seed;

    #[test]
    fn boxes_fit_and_thin_images_fall_back_to_the_centre() {
        let t = RandomResizedCrop::new(8);
        let mut rng = rng_from_seed(7);
        for _ in 0..1000 {
            let b = t.get_params(37, 53, &mut rng);
            assert!(b.top + b.height <= 37 && b.left + b.width <= 53 && b.height > 0 && b.width > 0, "{b:?}");
        }
        // A 1-pixel-wide column: no try fits; torchvision 0.26 returns (149, 0, 1, 1).
        let b = t.get_params(300, 1, &mut rng);
        assert_eq!(b, CropBox { top: 149, left: 0, height: 1, width: 1 });
    }
}
