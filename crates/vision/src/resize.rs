//! `Resize`: antialiased resizing (bilinear by default, any [`InterpolationMode`]) to a
//! shorter-side length or an exact size, as `torchvision.transforms.Resize` does for PIL images.

use crate::center_crop::{center_axis, CenterCrop};
use crate::error::Result;
use crate::image::Image;
pub use crate::resample::InterpolationMode;
use crate::resample::{resample, Rect};
use crate::transform::{expect_image, Sample, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// The size a [`Resize`] aims for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeSize {
    /// The shorter side becomes this long and the aspect ratio is kept (torchvision's
    /// `Resize(int)`).
    Shorter(usize),
    /// Exactly this `height x width` (torchvision's `Resize((h, w))`).
    Exact {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
    },
}

/// `torchvision.transforms.Resize(size, interpolation=BILINEAR, max_size=None, antialias=True)`
/// on a PIL image: PIL's bilinear filter, widened when shrinking (antialiasing), reproduced
/// exactly (see the fixture parity tests), or another [`InterpolationMode`]
/// ([`Resize::with_interpolation`]).
///
/// Works on `u8` images (1 or 3 channels); returns the input unchanged when it already has
/// the target size, as torchvision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    size: ResizeSize,
    max_size: Option<usize>,
    interpolation: InterpolationMode,
}

impl Resize {
    /// Resizes so the shorter side is `size` pixels (`Resize(size)`).
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        assert!(size > 0, "Resize size must be positive");
        Resize { size: ResizeSize::Shorter(size), max_size: None, interpolation: InterpolationMode::Bilinear }
    }

    /// Resizes to exactly `height x width` (`Resize((height, width))`).
    ///
    /// # Panics
    /// If a size is 0.
    pub fn exact(height: usize, width: usize) -> Self {
        assert!(height > 0 && width > 0, "Resize sizes must be positive");
        Resize {
            size: ResizeSize::Exact { height, width },
            max_size: None,
            interpolation: InterpolationMode::Bilinear,
        }
    }

    /// Caps the longer side of a shorter-side resize at `max_size` (torchvision's `max_size`).
    ///
    /// # Panics
    /// If the size is exact or `max_size` is not larger than the shorter-side size, as
    /// torchvision raises.
    pub fn with_max_size(mut self, max_size: usize) -> Self {
        match self.size {
            ResizeSize::Shorter(s) => assert!(max_size > s, "max_size {max_size} must exceed size {s}"),
            ResizeSize::Exact { .. } => panic!("max_size only applies to a shorter-side Resize"),
        }
        self.max_size = Some(max_size);
        self
    }

    /// Samples with `mode` (torchvision's `interpolation`; bilinear by default).
    pub fn with_interpolation(mut self, mode: InterpolationMode) -> Self {
        self.interpolation = mode;
        self
    }

    /// The size aimed for.
    pub fn size(&self) -> ResizeSize {
        self.size
    }

    /// How it samples.
    pub fn interpolation(&self) -> InterpolationMode {
        self.interpolation
    }

    /// The `(height, width)` an image of `height x width` is resized to: torchvision's
    /// `_compute_resized_output_size`, truncating the longer side as `int()` does.
    pub fn output_size(&self, height: usize, width: usize) -> (usize, usize) {
        match self.size {
            ResizeSize::Exact { height, width } => (height, width),
            ResizeSize::Shorter(size) => {
                let (short, long) = if width <= height { (width, height) } else { (height, width) };
                // Python: int(size * long / short), the product exact, then one rounded division.
                let mut new_short = size;
                let mut new_long = ((size * long) as f64 / short as f64) as usize;
                if let Some(max) = self.max_size {
                    if new_long > max {
                        new_short = ((max * new_short) as f64 / new_long as f64) as usize;
                        new_long = max;
                    }
                }
                let (new_short, new_long) = (new_short.max(1), new_long.max(1));
                if width <= height {
                    (new_long, new_short)
                } else {
                    (new_short, new_long)
                }
            }
        }
    }

    /// Resizes `image`.
    pub fn resize(&self, image: Image) -> Image {
        let (h, w) = self.output_size(image.height(), image.width());
        if (h, w) == (image.height(), image.width()) {
            return image;
        }
        let full = Rect::new(0, 0, image.width(), image.height());
        resample(self.interpolation, &image, full, w, h, Rect::new(0, 0, w, h))
    }
}

impl Transform for Resize {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        Ok(Sample::Image(self.resize(expect_image(input, "Resize")?)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }

    /// Fuses with a following [`CenterCrop`]: only the pixels the crop keeps are resampled.
    fn fuse(&self, next: &dyn Transform) -> Option<Box<dyn Transform>> {
        let crop = next.as_any().downcast_ref::<CenterCrop>()?;
        Some(Box::new(ResizeCenterCrop { resize: *self, crop: *crop }))
    }
}

/// `Resize` then `CenterCrop`, resampling only the kept window (what [`Resize::fuse`] gives).
#[derive(Debug)]
struct ResizeCenterCrop {
    resize: Resize,
    crop: CenterCrop,
}

impl Transform for ResizeCenterCrop {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "Resize")?;
        let (rh, rw) = self.resize.output_size(image.height(), image.width());
        let (ch, cw) = self.crop.size();
        if ch > rh || cw > rw || (rh, rw) == (image.height(), image.width()) {
            // Padding needed, or no resize at all: the plain steps are as cheap.
            return Ok(Sample::Image(self.crop.crop(&self.resize.resize(image))));
        }
        let (left, _, _) = center_axis(rw, cw);
        let (top, _, _) = center_axis(rh, ch);
        let full = Rect::new(0, 0, image.width(), image.height());
        let window = Rect::new(left, top, cw, ch);
        Ok(Sample::Image(resample(self.resize.interpolation, &image, full, rw, rh, window)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_size_follows_torchvision() {
        // Values from torchvision 0.26's _compute_resized_output_size.
        assert_eq!(Resize::new(256).output_size(375, 500), (256, 341));
        assert_eq!(Resize::new(256).output_size(500, 375), (341, 256));
        assert_eq!(Resize::new(224).output_size(300, 1), (67200, 224));
        assert_eq!(Resize::new(256).with_max_size(300).output_size(100, 1000), (30, 300));
        assert_eq!(Resize::exact(10, 20).output_size(5, 5), (10, 20));
    }
}
