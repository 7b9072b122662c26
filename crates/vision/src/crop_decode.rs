//! Decoding only the box a crop keeps: [`decode_bytes_crop`], and the dataset path that reads
//! a JPEG's size from its header, draws the first transform's crop and decodes just that box.

use crate::crop_box::CropBox;
use crate::decode::decode_bytes_with;
use crate::decode_options::DecodeOptions;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::{Sample, Transform};
use std::path::Path;
use torchlight_base::seed::Rng;

/// Decodes the `crop` box of an encoded image held in memory; `path` only names the source in
/// errors. Always equal to `decode_bytes_with(bytes, path, options)?.crop(..)` of the box, but
/// with the `libjpeg-turbo` feature (the default) a JPEG that needs no EXIF rotation decodes
/// only the rows and columns around the box (libjpeg-turbo's `jpeg_crop_scanline` and
/// `jpeg_skip_scanlines`; rows below the box are never decoded), which for a
/// `RandomResizedCrop`-sized box is most of the decoding time saved. Other files decode whole.
///
/// # Errors
/// As [`decode_bytes_with`](crate::decode_bytes_with); [`VisionError::Config`] (field `crop`)
/// when the box is empty or leaves the image.
pub fn decode_bytes_crop(
    bytes: &[u8],
    path: impl AsRef<Path>,
    options: &DecodeOptions,
    crop: CropBox,
) -> Result<Image> {
    let path = path.as_ref();
    #[cfg(feature = "libjpeg-turbo")]
    if let Some(jpeg) = crate::decode::JpegFile::open(bytes, path, options)? {
        if jpeg.upright() {
            check_inside(crop, jpeg.header.width as usize, jpeg.header.height as usize)?;
            return jpeg.decode_stored(rect_of(crop));
        }
    }
    let image = decode_bytes_with(bytes, path, options)?;
    check_inside(crop, image.width(), image.height())?;
    Ok(image.crop(crop.left, crop.top, crop.width, crop.height))
}

fn check_inside(crop: CropBox, width: usize, height: usize) -> Result<()> {
    if crop.width == 0
        || crop.height == 0
        || crop.left + crop.width > width
        || crop.top + crop.height > height
    {
        return Err(VisionError::Config {
            field: "crop",
            reason: format!(
                "{}x{} at (left {}, top {}) is empty or leaves the {width}x{height} image",
                crop.width, crop.height, crop.left, crop.top
            ),
        });
    }
    Ok(())
}

#[cfg(feature = "libjpeg-turbo")]
fn rect_of(crop: CropBox) -> (u32, u32, u32, u32) {
    (crop.left as u32, crop.top as u32, crop.width as u32, crop.height as u32)
}

/// Decodes the file at `path` and runs `transform` on it, as `transform.apply(decode(path))`
/// does, with the same output and the same draws from `rng`. When the transform has a
/// [`Transform::leading_crop`] (a [`RandomResizedCrop`](crate::RandomResizedCrop), a
/// [`CenterCrop`](crate::CenterCrop), a [`Compose`](crate::Compose) starting with one, or a
/// transform of the user's own) and the file is a JPEG libjpeg-turbo decodes upright, the size
/// comes from the header, the box is drawn, and only the box is decoded before the transform's
/// [`LeadingCrop::apply_cropped`](crate::LeadingCrop::apply_cropped). (`Resize` then
/// `CenterCrop`, the evaluation transform, reads ~80% of the rows and columns: decoding only
/// those measured no faster than the whole image, so the fused step has no leading crop and
/// decodes whole.)
pub(crate) fn load_transformed(
    path: &Path,
    options: &DecodeOptions,
    transform: &dyn Transform,
    rng: &mut Rng,
) -> Result<Sample> {
    let bytes = std::fs::read(path).map_err(|error| VisionError::Io { path: path.to_path_buf(), error })?;
    #[cfg(feature = "libjpeg-turbo")]
    if let Some(sample) = load_by_box(&bytes, path, options, transform, rng)? {
        return Ok(sample);
    }
    let image = decode_bytes_with(&bytes, path, options)?;
    transform.apply(Sample::Image(image), rng)
}

/// [`load_transformed`]'s crop-box path: `None`, before any draw, when the transform has no
/// leading crop or the file is not a JPEG libjpeg-turbo decodes upright.
#[cfg(feature = "libjpeg-turbo")]
fn load_by_box(
    bytes: &[u8],
    path: &Path,
    options: &DecodeOptions,
    transform: &dyn Transform,
    rng: &mut Rng,
) -> Result<Option<Sample>> {
    let Some(crop) = transform.leading_crop() else { return Ok(None) };
    let Some(jpeg) = crate::decode::JpegFile::open(bytes, path, options)? else { return Ok(None) };
    if !jpeg.upright() {
        return Ok(None);
    }
    let (width, height) = (jpeg.header.width as usize, jpeg.header.height as usize);
    let b = crop.crop_box(height, width, rng);
    // A transform of the user's own could return a box outside the image.
    check_inside(b, width, height)?;
    let region = jpeg.decode_stored(rect_of(b))?;
    crop.apply_cropped(region, rng).map(Some)
}
