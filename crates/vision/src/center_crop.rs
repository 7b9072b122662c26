//! `CenterCrop`: the central `height x width` of an image, zero-padded when the image is
//! smaller, as `torchvision.transforms.CenterCrop` does.

use crate::crop_box::CropBox;
use crate::error::Result;
use crate::image::Image;
use crate::transform::{expect_image, LeadingCrop, Sample, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// `torchvision.transforms.CenterCrop(size)` on a PIL image.
///
/// The crop's corner is `round((H - height) / 2)`, `round((W - width) / 2)` with Python's
/// round-half-to-even (so an odd margin of 1 puts the extra row at the bottom, of 3 at the
/// top). Along a side where the image is smaller than the crop, the image is zero-padded by
/// `(crop - size) // 2` before and the rest after, as torchvision pads first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CenterCrop {
    height: usize,
    width: usize,
}

/// Where the crop starts along one axis of length `size`: `(source start, destination start,
/// length copied)`.
pub(crate) fn center_axis(size: usize, crop: usize) -> (usize, usize, usize) {
    if crop > size {
        (0, (crop - size) / 2, size)
    } else {
        (((size - crop) as f64 / 2.0).round_ties_even() as usize, 0, crop)
    }
}

impl CenterCrop {
    /// A square `size x size` crop (`CenterCrop(size)`).
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        Self::rect(size, size)
    }

    /// A `height x width` crop (`CenterCrop((height, width))`).
    ///
    /// # Panics
    /// If a size is 0.
    pub fn rect(height: usize, width: usize) -> Self {
        assert!(height > 0 && width > 0, "CenterCrop sizes must be positive");
        CenterCrop { height, width }
    }

    /// The crop's `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// The part of a `height x width` image the crop keeps (all of an axis the crop pads):
    /// cropping that part alone gives the same result as cropping the image.
    fn source_box(&self, height: usize, width: usize) -> CropBox {
        let (left, _, width) = center_axis(width, self.width);
        let (top, _, height) = center_axis(height, self.height);
        CropBox { top, left, height, width }
    }

    /// Crops `image`.
    pub fn crop(&self, image: &Image) -> Image {
        let (sx, dx, nx) = center_axis(image.width(), self.width);
        let (sy, dy, ny) = center_axis(image.height(), self.height);
        if dx == 0 && dy == 0 {
            return image.crop(sx, sy, nx, ny);
        }
        let c = image.channels();
        let mut out = Image::filled(self.width, self.height, c, 0);
        let w = self.width;
        let pixels = out.pixels_mut();
        for y in 0..ny {
            let src = ((sy + y) * image.width() + sx) * c;
            let dst = ((dy + y) * w + dx) * c;
            pixels[dst..dst + nx * c].copy_from_slice(&image.pixels()[src..src + nx * c]);
        }
        out
    }
}

impl Transform for CenterCrop {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "CenterCrop")?;
        Ok(Sample::Image(self.crop(&image)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }

    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        Some(self)
    }
}

/// The box is the part of the image the crop keeps (all of an axis it pads); cropping those
/// pixels again keeps all of them and adds the padding.
impl LeadingCrop for CenterCrop {
    fn crop_box(&self, height: usize, width: usize, _rng: &mut Rng) -> CropBox {
        self.source_box(height, width)
    }

    fn apply_cropped(&self, region: Image, _rng: &mut Rng) -> Result<Sample> {
        Ok(Sample::Image(self.crop(&region)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_margins_round_half_to_even() {
        assert_eq!(center_axis(11, 10), (0, 0, 10)); // round(0.5) = 0
        assert_eq!(center_axis(13, 10), (2, 0, 10)); // round(1.5) = 2
        assert_eq!(center_axis(15, 10), (2, 0, 10)); // round(2.5) = 2
        assert_eq!(center_axis(3, 8), (0, 2, 3)); // pad 2 before, 3 after
    }

    #[test]
    fn pads_with_zeros_when_larger() {
        let img = Image::filled(1, 3, 3, 9);
        let out = CenterCrop::new(4).crop(&img);
        assert_eq!((out.width(), out.height()), (4, 4));
        let col: Vec<u8> = (0..4).map(|y| out.pixel(1, y)[0]).collect();
        assert_eq!(col, [9, 9, 9, 0]);
        assert_eq!(out.pixel(0, 0), [0, 0, 0]);
    }
}
