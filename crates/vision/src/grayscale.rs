//! `Grayscale`: PIL's `convert("L")` luma, kept as 1 channel or replicated to 3.

use crate::error::Result;
use crate::image::Image;
use crate::transform::{expect_image, Sample, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// PIL's ITU-R 601-2 luma of one RGB pixel: `(19595 R + 38470 G + 7471 B + 0x8000) >> 16`
/// (Pillow's `L24` fixed-point form of `0.299 R + 0.587 G + 0.114 B`, rounded).
#[inline]
pub(crate) fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// The luma plane of `image` (itself for a 1-channel image).
pub(crate) fn luma_plane(image: &Image) -> Vec<u8> {
    if image.channels() == 1 {
        return image.pixels().to_vec();
    }
    image.pixels().chunks_exact(3).map(|p| luma(p[0], p[1], p[2])).collect()
}

/// `torchvision.transforms.Grayscale(num_output_channels)` on a PIL image: PIL's
/// `convert("L")`, then for 3 output channels the plane replicated to R, G and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grayscale {
    channels: usize,
}

impl Default for Grayscale {
    /// One output channel, torchvision's default.
    fn default() -> Self {
        Grayscale { channels: 1 }
    }
}

impl Grayscale {
    /// `num_output_channels` of 1 or 3.
    ///
    /// # Panics
    /// If `num_output_channels` is not 1 or 3.
    pub fn new(num_output_channels: usize) -> Self {
        assert!(num_output_channels == 1 || num_output_channels == 3, "Grayscale outputs 1 or 3 channels");
        Grayscale { channels: num_output_channels }
    }

    /// Converts `image`.
    pub fn convert(&self, image: &Image) -> Image {
        let plane = luma_plane(image);
        let pixels = if self.channels == 1 { plane } else { plane.iter().flat_map(|&v| [v, v, v]).collect() };
        Image::new(image.width(), image.height(), self.channels, pixels)
    }
}

impl Transform for Grayscale {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        Ok(Sample::Image(self.convert(&expect_image(input, "Grayscale")?)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }
}

/// `torchvision.transforms.RandomGrayscale(p=0.1)` on a PIL image: when `torch.rand(1) < p`,
/// [`Grayscale`] with as many channels as the input has (3 stay 3, with R = G = B).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomGrayscale {
    p: f64,
}

impl Default for RandomGrayscale {
    /// `p = 0.1`, torchvision's default.
    fn default() -> Self {
        RandomGrayscale { p: 0.1 }
    }
}

impl RandomGrayscale {
    /// Converts with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    pub fn new(p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "RandomGrayscale p must be in [0, 1], got {p}");
        RandomGrayscale { p }
    }

    /// The transform with torchvision's draw from any generator (a [`crate::TorchGenerator`]
    /// seeded as `torch.manual_seed(s)` gives torchvision's choice for that seed).
    pub fn apply_with<R: rand::RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        if crate::torch_draws::bernoulli(rng, self.p) {
            return Ok(Grayscale::new(image.channels()).convert(&image));
        }
        Ok(image)
    }
}

crate::random_affine::image_transform_with_torch_draws!(RandomGrayscale, "RandomGrayscale");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luma_matches_pil_values() {
        // PIL: Image.new("RGB", (1, 1), c).convert("L").getpixel((0, 0))
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
    }
}
