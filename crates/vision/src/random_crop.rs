//! `RandomCrop`: a crop at a uniform position, after optional padding, as
//! `torchvision.transforms.RandomCrop`, and the `pad` it uses.

use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::{expect_image, Sample, Transform};
use rand::Rng as _;
use std::any::Any;
use torchlight_base::seed::Rng;

/// How [`pad`] fills the border (torchvision's `padding_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PaddingMode {
    /// A constant value per channel (`fill`), torchvision's default.
    #[default]
    Constant,
    /// The edge pixel repeated.
    Edge,
    /// Mirrored without repeating the edge: `3 2 | 1 2 3 | 2 1`.
    Reflect,
    /// Mirrored repeating the edge: `2 1 | 1 2 3 | 3 2`.
    Symmetric,
}

/// Maps an index `i` of the padded axis (offset by `before`) into `0..n`.
fn source_index(i: isize, n: isize, mode: PaddingMode) -> Option<usize> {
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    let j = match mode {
        PaddingMode::Constant => return None,
        PaddingMode::Edge => i.clamp(0, n - 1),
        PaddingMode::Reflect => {
            if n == 1 {
                0
            } else {
                let period = 2 * (n - 1);
                let m = i.rem_euclid(period);
                if m < n {
                    m
                } else {
                    period - m
                }
            }
        }
        PaddingMode::Symmetric => {
            let period = 2 * n;
            let m = i.rem_euclid(period);
            if m < n {
                m
            } else {
                period - 1 - m
            }
        }
    };
    Some(j as usize)
}

/// `torchvision.transforms.functional.pad` on a PIL image: `left, top, right, bottom` pixels
/// added, filled per `mode` (`fill` is the value of every channel for `Constant`).
pub fn pad(image: &Image, [left, top, right, bottom]: [usize; 4], fill: u8, mode: PaddingMode) -> Image {
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let (nw, nh) = (w + left + right, h + top + bottom);
    let mut out = Image::filled(nw, nh, c, fill);
    let cols: Vec<Option<usize>> =
        (0..nw).map(|x| source_index(x as isize - left as isize, w as isize, mode)).collect();
    let pixels = out.pixels_mut();
    for y in 0..nh {
        let Some(sy) = source_index(y as isize - top as isize, h as isize, mode) else { continue };
        for (x, sx) in cols.iter().enumerate() {
            if let Some(sx) = sx {
                let d = (y * nw + x) * c;
                pixels[d..d + c].copy_from_slice(image.pixel(*sx, sy));
            }
        }
    }
    out
}

/// `torchvision.transforms.RandomCrop(size, padding=None, pad_if_needed=False, fill=0,
/// padding_mode="constant")`: pads by `padding` (left, top, right, bottom), then, with
/// `pad_if_needed`, pads both sides of a too-small dimension by the shortfall (as torchvision
/// does), then crops `height x width` at a uniform position (top drawn first, then left).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomCrop {
    height: usize,
    width: usize,
    padding: [usize; 4],
    pad_if_needed: bool,
    fill: u8,
    mode: PaddingMode,
}

impl RandomCrop {
    /// A `size x size` crop without padding.
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        Self::rect(size, size)
    }

    /// A `height x width` crop without padding.
    ///
    /// # Panics
    /// If a size is 0.
    pub fn rect(height: usize, width: usize) -> Self {
        assert!(height > 0 && width > 0, "RandomCrop sizes must be positive");
        RandomCrop {
            height,
            width,
            padding: [0; 4],
            pad_if_needed: false,
            fill: 0,
            mode: PaddingMode::Constant,
        }
    }

    /// Pads every side by `padding` first (torchvision's `padding=int`, e.g. 4 for CIFAR).
    pub fn with_padding(self, padding: usize) -> Self {
        self.with_padding_ltrb([padding; 4])
    }

    /// Pads `left, top, right, bottom` first.
    pub fn with_padding_ltrb(mut self, padding: [usize; 4]) -> Self {
        self.padding = padding;
        self
    }

    /// Pads an image smaller than the crop instead of failing (`pad_if_needed=True`).
    pub fn with_pad_if_needed(mut self, pad_if_needed: bool) -> Self {
        self.pad_if_needed = pad_if_needed;
        self
    }

    /// The padding's fill value and mode (defaults 0, `Constant`).
    pub fn with_fill(mut self, fill: u8, mode: PaddingMode) -> Self {
        self.fill = fill;
        self.mode = mode;
        self
    }

    /// Pads and crops `image`.
    ///
    /// # Errors
    /// [`VisionError::Transform`] if the (padded) image is smaller than the crop.
    pub fn crop(&self, image: Image, rng: &mut Rng) -> Result<Image> {
        self.crop_by(image, |n| rng.random_range(0..=n))
    }

    /// [`RandomCrop::crop`] with torchvision's draws from any generator (`torch.randint(0, n +
    /// 1)` for the top, then the left): with a [`crate::TorchGenerator`] seeded as
    /// `torch.manual_seed(s)`, torchvision's crop for that seed. [`Transform::apply`] keeps its
    /// own draws.
    ///
    /// # Errors
    /// As [`RandomCrop::crop`].
    pub fn crop_with<R: rand::RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        self.crop_by(image, |n| crate::torch_draws::randint(rng, 0, n as i64 + 1) as usize)
    }

    /// Pads, then crops at the position `offset(room)` draws, top first, then left.
    fn crop_by(&self, image: Image, mut offset: impl FnMut(usize) -> usize) -> Result<Image> {
        let mut image = image;
        if self.padding != [0; 4] {
            image = pad(&image, self.padding, self.fill, self.mode);
        }
        if self.pad_if_needed && image.width() < self.width {
            let d = self.width - image.width();
            image = pad(&image, [d, 0, d, 0], self.fill, self.mode);
        }
        if self.pad_if_needed && image.height() < self.height {
            let d = self.height - image.height();
            image = pad(&image, [0, d, 0, d], self.fill, self.mode);
        }
        let (h, w) = (image.height(), image.width());
        if h < self.height || w < self.width {
            return Err(VisionError::Transform {
                transform: "RandomCrop",
                message: format!(
                    "crop {}x{} is larger than the {h}x{w} (padded) image",
                    self.height, self.width
                ),
            });
        }
        if (h, w) == (self.height, self.width) {
            return Ok(image);
        }
        let top = offset(h - self.height);
        let left = offset(w - self.width);
        Ok(image.crop(left, top, self.width, self.height))
    }
}

impl Transform for RandomCrop {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        Ok(Sample::Image(self.crop(expect_image(input, "RandomCrop")?, rng)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        Some(expect_image(input, "RandomCrop").and_then(|image| Ok(Sample::Image(self.crop_with(image, g)?))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_base::seed::rng_from_seed;

    #[test]
    fn padding_modes_match_numpy_pad() {
        let img = Image::new(3, 1, 1, vec![1, 2, 3]);
        let row = |mode| pad(&img, [2, 0, 2, 0], 9, mode).into_pixels();
        assert_eq!(row(PaddingMode::Constant), [9, 9, 1, 2, 3, 9, 9]);
        assert_eq!(row(PaddingMode::Edge), [1, 1, 1, 2, 3, 3, 3]);
        assert_eq!(row(PaddingMode::Reflect), [3, 2, 1, 2, 3, 2, 1]);
        assert_eq!(row(PaddingMode::Symmetric), [2, 1, 1, 2, 3, 3, 2]);
    }

    #[test]
    fn crops_stay_inside_padding_and_small_images_error() {
        let img = Image::filled(8, 8, 3, 5);
        let t = RandomCrop::new(8).with_padding(4);
        let mut rng = rng_from_seed(3);
        let mut saw_border = false;
        for _ in 0..50 {
            let out = t.crop(img.clone(), &mut rng).unwrap();
            assert_eq!((out.width(), out.height()), (8, 8));
            saw_border |= out.pixels().contains(&0);
        }
        assert!(saw_border, "padding should show in some crops");
        assert!(RandomCrop::new(9).crop(img.clone(), &mut rng).is_err());
        let out = RandomCrop::new(10).with_pad_if_needed(true).crop(img, &mut rng).unwrap();
        assert_eq!((out.width(), out.height()), (10, 10));
    }
}
