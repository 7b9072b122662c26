//! Decoding only the box a crop keeps: [`decode_bytes_crop`], and the dataset path that reads
//! a JPEG's size from its header, draws the first transform's crop and decodes just that box.

use crate::decode::{decode_bytes_with, DecodeOptions};
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::random_resized_crop::CropBox;
use crate::transform::{Sample, Transform};
use std::path::Path;
use std::sync::Arc;
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
/// does, with the same output and the same draws from `rng`. When the transform (or the first
/// step of a [`Compose`](crate::Compose)) is a crop whose box follows from the image size and
/// the draws alone, and the file is a JPEG libjpeg-turbo decodes upright, the size comes from
/// the header and only the box is decoded: a [`RandomResizedCrop`](crate::RandomResizedCrop) (box drawn as the
/// transform draws it, then resized) or a [`CenterCrop`](crate::CenterCrop). (`Resize` then
/// `CenterCrop`, the evaluation transform, reads ~80% of the rows and columns: decoding only
/// those measured no faster than the whole image, so it decodes whole.)
pub(crate) fn load_transformed(
    path: &Path,
    options: &DecodeOptions,
    transform: &Arc<dyn Transform>,
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

/// [`load_transformed`]'s crop-box path: `None` when the transform does not start with a crop
/// it knows, or the file is not a JPEG libjpeg-turbo decodes upright.
#[cfg(feature = "libjpeg-turbo")]
fn load_by_box(
    bytes: &[u8],
    path: &Path,
    options: &DecodeOptions,
    transform: &Arc<dyn Transform>,
    rng: &mut Rng,
) -> Result<Option<Sample>> {
    use crate::{center_crop::CenterCrop, random_resized_crop::RandomResizedCrop};
    let (first, rest): (&Arc<dyn Transform>, &[Arc<dyn Transform>]) =
        match transform.as_any().downcast_ref::<crate::Compose>() {
            Some(compose) => match compose.plan().split_first() {
                Some((first, rest)) => (first, rest),
                None => return Ok(None),
            },
            None => (transform, &[]),
        };
    let step = first.as_any();
    if !(step.is::<RandomResizedCrop>() || step.is::<CenterCrop>()) {
        return Ok(None);
    }
    let Some(jpeg) = crate::decode::JpegFile::open(bytes, path, options)? else { return Ok(None) };
    if !jpeg.upright() {
        return Ok(None);
    }
    let (width, height) = (jpeg.header.width as usize, jpeg.header.height as usize);
    let mut sample = if let Some(crop) = step.downcast_ref::<RandomResizedCrop>() {
        let b = crop.get_params(height, width, rng);
        let region = jpeg.decode_stored(rect_of(b))?;
        Sample::Image(
            crop.crop_resize(&region, CropBox { top: 0, left: 0, height: b.height, width: b.width }),
        )
    } else if let Some(crop) = step.downcast_ref::<CenterCrop>() {
        let region = jpeg.decode_stored(rect_of(crop.source_box(height, width)))?;
        Sample::Image(crop.crop(&region))
    } else {
        return Ok(None);
    };
    for step in rest {
        sample = step.apply(sample, rng)?;
    }
    Ok(Some(sample))
}
