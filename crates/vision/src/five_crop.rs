//! `FiveCrop` and `TenCrop`: the four corner crops and the centre crop of an image (and of its
//! mirror image), as `torchvision.transforms.FiveCrop` / `TenCrop` make them; and `CropView`,
//! one of those crops as a [`Transform`], for evaluating a model on each view in turn
//! (test-time augmentation).

use crate::center_crop::center_axis;
use crate::error::{Result, VisionError};
use crate::flip::{hflip, vflip};
use crate::image::Image;
use crate::transform::{expect_image, Sample, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// The names of [`FiveCrop`]'s crops, in torchvision's order.
pub const FIVE_CROP_NAMES: [&str; 5] = ["top_left", "top_right", "bottom_left", "bottom_right", "center"];

/// `torchvision.transforms.FiveCrop(size)` on a PIL image: the `height x width` crops at the
/// top-left, top-right, bottom-left and bottom-right corners and the centre, in that order
/// ([`FIVE_CROP_NAMES`]). The centre crop is [`crate::CenterCrop`]'s (Python's
/// round-half-to-even of the margins). A crop larger than the image along either side is an
/// error, as in torchvision (which pads nothing here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiveCrop {
    height: usize,
    width: usize,
}

impl FiveCrop {
    /// Square `size x size` crops (`FiveCrop(size)`).
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        Self::rect(size, size)
    }

    /// `height x width` crops (`FiveCrop((height, width))`).
    ///
    /// # Panics
    /// If a size is 0.
    pub fn rect(height: usize, width: usize) -> Self {
        assert!(height > 0 && width > 0, "FiveCrop sizes must be positive");
        FiveCrop { height, width }
    }

    /// The crops' `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// The five crops of `image`: top-left, top-right, bottom-left, bottom-right, centre.
    ///
    /// # Errors
    /// [`VisionError::Transform`] when the crop is larger than the image, with torchvision's
    /// message ("Requested crop size (h, w) is bigger than input size (H, W)").
    pub fn crops(&self, image: &Image) -> Result<Vec<Image>> {
        self.check(image, "FiveCrop")?;
        Ok((0..5).map(|i| self.crop_unchecked(image, i)).collect())
    }

    /// Crop `index` (0..5, in [`FIVE_CROP_NAMES`]' order) of `image` alone: `crops(image)[index]`.
    ///
    /// # Errors
    /// As [`FiveCrop::crops`].
    ///
    /// # Panics
    /// If `index` is 5 or more.
    pub fn crop(&self, image: &Image, index: usize) -> Result<Image> {
        assert!(index < 5, "FiveCrop has crops 0..5, not {index}");
        self.check(image, "FiveCrop")?;
        Ok(self.crop_unchecked(image, index))
    }

    /// [`CropView`] of crop `index` (0..5).
    ///
    /// # Panics
    /// If `index` is 5 or more.
    pub fn view(&self, index: usize) -> CropView {
        assert!(index < 5, "FiveCrop has crops 0..5, not {index}");
        CropView { ten: TenCrop { five: *self, vertical_flip: false }, index, name: "FiveCrop" }
    }

    fn check(&self, image: &Image, transform: &'static str) -> Result<()> {
        if self.height > image.height() || self.width > image.width() {
            return Err(VisionError::Transform {
                transform,
                message: format!(
                    "Requested crop size ({}, {}) is bigger than input size ({}, {})",
                    self.height,
                    self.width,
                    image.height(),
                    image.width()
                ),
            });
        }
        Ok(())
    }

    /// Crop `index` of an image at least as large as the crop.
    fn crop_unchecked(&self, image: &Image, index: usize) -> Image {
        let (h, w) = (self.height, self.width);
        let (bottom, right) = (image.height() - h, image.width() - w);
        let (top, left) = match index {
            0 => (0, 0),
            1 => (0, right),
            2 => (bottom, 0),
            3 => (bottom, right),
            _ => (center_axis(image.height(), h).0, center_axis(image.width(), w).0),
        };
        image.crop(left, top, w, h)
    }
}

/// `torchvision.transforms.TenCrop(size, vertical_flip=False)` on a PIL image: [`FiveCrop`]'s
/// five crops of the image, then the five crops of the image flipped left to right (top to
/// bottom with `vertical_flip`), ten in all. The whole image is flipped before cropping, as
/// torchvision does, so crop 5 is the top-left crop of the mirror image (the mirror of the
/// top-right crop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenCrop {
    five: FiveCrop,
    vertical_flip: bool,
}

impl TenCrop {
    /// Square `size x size` crops (`TenCrop(size)`), the second five of the horizontal mirror.
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: usize) -> Self {
        TenCrop { five: FiveCrop::new(size), vertical_flip: false }
    }

    /// `height x width` crops (`TenCrop((height, width))`).
    ///
    /// # Panics
    /// If a size is 0.
    pub fn rect(height: usize, width: usize) -> Self {
        TenCrop { five: FiveCrop::rect(height, width), vertical_flip: false }
    }

    /// Flips top to bottom for the second five instead (`vertical_flip=True`).
    pub fn with_vertical_flip(mut self, vertical_flip: bool) -> Self {
        self.vertical_flip = vertical_flip;
        self
    }

    /// The crops' `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        self.five.size()
    }

    /// Whether the second five are of the image flipped top to bottom.
    pub fn vertical_flip(&self) -> bool {
        self.vertical_flip
    }

    /// The ten crops of `image`: [`FiveCrop::crops`] of the image, then of its mirror image.
    ///
    /// # Errors
    /// As [`FiveCrop::crops`].
    pub fn crops(&self, image: &Image) -> Result<Vec<Image>> {
        self.five.check(image, "TenCrop")?;
        let flipped = self.flipped(image);
        Ok((0..10)
            .map(|i| {
                if i < 5 {
                    self.five.crop_unchecked(image, i)
                } else {
                    self.five.crop_unchecked(&flipped, i - 5)
                }
            })
            .collect())
    }

    /// Crop `index` (0..10) of `image` alone: `crops(image)[index]`.
    ///
    /// # Errors
    /// As [`FiveCrop::crops`].
    ///
    /// # Panics
    /// If `index` is 10 or more.
    pub fn crop(&self, image: &Image, index: usize) -> Result<Image> {
        assert!(index < 10, "TenCrop has crops 0..10, not {index}");
        self.five.check(image, "TenCrop")?;
        Ok(if index < 5 {
            self.five.crop_unchecked(image, index)
        } else {
            self.five.crop_unchecked(&self.flipped(image), index - 5)
        })
    }

    /// [`CropView`] of crop `index` (0..10).
    ///
    /// # Panics
    /// If `index` is 10 or more.
    pub fn view(&self, index: usize) -> CropView {
        assert!(index < 10, "TenCrop has crops 0..10, not {index}");
        CropView { ten: *self, index, name: "TenCrop" }
    }

    /// The crop names in order: [`FIVE_CROP_NAMES`], then the same prefixed `hflip_` (`vflip_`
    /// with `vertical_flip`): crop 5 is `hflip_top_left`, the top-left crop of the mirror image.
    pub fn names(&self) -> Vec<String> {
        let flip = if self.vertical_flip { "vflip" } else { "hflip" };
        FIVE_CROP_NAMES
            .iter()
            .map(|n| n.to_string())
            .chain(FIVE_CROP_NAMES.iter().map(|n| format!("{flip}_{n}")))
            .collect()
    }

    fn flipped(&self, image: &Image) -> Image {
        let mut flipped = image.clone();
        if self.vertical_flip {
            vflip(&mut flipped);
        } else {
            hflip(&mut flipped);
        }
        flipped
    }
}

/// One crop of [`FiveCrop`] or [`TenCrop`] as a [`Transform`] on `u8` images: what
/// `FiveCrop(size)(img)[index]` (or `TenCrop`'s) is, so a pipeline such as
/// `Resize -> CropView -> ToTensor -> Normalize` makes one view of a test-time augmentation.
/// It draws nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropView {
    ten: TenCrop,
    index: usize,
    name: &'static str,
}

impl CropView {
    /// Which crop it keeps: 0..5 for a [`FiveCrop`] view, 0..10 for a [`TenCrop`] view.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Transform for CropView {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, self.name)?;
        self.ten.five.check(&image, self.name)?;
        Ok(Sample::Image(if self.index < 5 {
            self.ten.five.crop_unchecked(&image, self.index)
        } else {
            self.ten.five.crop_unchecked(&self.ten.flipped(&image), self.index - 5)
        }))
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

    /// A `w x h` RGB image whose pixel `(x, y)` is `[x, y, 0]`.
    fn coords(w: usize, h: usize) -> Image {
        let pixels = (0..h).flat_map(|y| (0..w).flat_map(move |x| [x as u8, y as u8, 0])).collect();
        Image::new(w, h, 3, pixels)
    }

    #[test]
    fn the_corners_and_the_centre_are_where_torchvision_puts_them() {
        let image = coords(9, 7);
        let crops = FiveCrop::rect(3, 4).crops(&image).unwrap();
        let corners: Vec<&[u8]> = crops.iter().map(|c| c.pixel(0, 0)).collect();
        // The centre's margins (7 - 3) / 2 = 2 and round((9 - 4) / 2) = round(2.5) = 2.
        assert_eq!(corners, [[0, 0, 0], [5, 0, 0], [0, 4, 0], [5, 4, 0], [2, 2, 0]]);
        for c in &crops {
            assert_eq!((c.width(), c.height()), (4, 3));
        }
    }

    #[test]
    fn ten_crop_crops_the_mirror_image_and_views_are_the_crops() {
        let image = coords(9, 7);
        for ten in [TenCrop::rect(3, 4), TenCrop::new(5).with_vertical_flip(true)] {
            let crops = ten.crops(&image).unwrap();
            let mut flipped = image.clone();
            if ten.vertical_flip() {
                vflip(&mut flipped);
            } else {
                hflip(&mut flipped);
            }
            assert_eq!(crops[5..], FiveCrop::rect(ten.size().0, ten.size().1).crops(&flipped).unwrap()[..]);
            for (i, want) in crops.iter().enumerate() {
                assert_eq!(&ten.crop(&image, i).unwrap(), want);
                let got = ten
                    .view(i)
                    .apply(Sample::Image(image.clone()), &mut torchlight_base::seed::rng_from_seed(0))
                    .unwrap();
                assert_eq!(got.into_image().as_ref(), Some(want));
            }
            assert_eq!(ten.names().len(), 10);
        }
    }

    #[test]
    fn a_crop_larger_than_the_image_is_torchvisions_error() {
        let err = FiveCrop::rect(8, 4).crops(&coords(9, 7)).unwrap_err();
        assert_eq!(err.to_string(), "FiveCrop: Requested crop size (8, 4) is bigger than input size (7, 9)");
        let err = TenCrop::new(10)
            .view(7)
            .apply(Sample::Image(coords(9, 7)), &mut torchlight_base::seed::rng_from_seed(0));
        assert!(err.unwrap_err().to_string().starts_with("TenCrop: Requested crop size (10, 10)"));
    }
}
