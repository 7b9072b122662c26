//! Decoding image files to RGB [`Image`]s with the `image` crate, as torchvision's
//! `pil_loader` (`Image.open(path).convert("RGB")`) does with PIL.

use crate::error::{Result, VisionError};
use crate::image::Image;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
use std::io::Cursor;
use std::path::Path;

/// The file extensions `ImageFolder` picks up by default (compared case-insensitively):
/// torchvision's `IMG_EXTENSIONS` (`.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp`) plus
/// `.gif`, whose first frame is decoded.
pub const IMG_EXTENSIONS: &[&str] =
    &[".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif"];

/// Decodes the image file at `path` to RGB.
///
/// The format is sniffed from the content (a PNG named `.jpg` still decodes). JPEG, PNG, BMP,
/// WebP, GIF (first frame), PPM/PGM and TIFF are supported. As with PIL's `convert("RGB")`,
/// grayscale is replicated to three channels, palettes are expanded and alpha is dropped
/// (not composited). Unlike PIL, 16-bit samples are scaled to 8 bits (`round(v / 257)`)
/// rather than clipped, and the EXIF orientation tag is applied, so a phone photo taken
/// upright comes out upright (torchvision's loader ignores the tag).
///
/// # Errors
/// [`VisionError::Io`] if the file cannot be opened, [`VisionError::Decode`] if it is not an
/// image of a supported format or is truncated or corrupt; both name `path`.
pub fn decode_file(path: impl AsRef<Path>) -> Result<Image> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| VisionError::Io { path: path.to_path_buf(), error })?;
    decode_bytes(&bytes, path)
}

/// Decodes an encoded image held in memory (see [`decode_file`]); `path` only names the
/// source in errors.
pub fn decode_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<Image> {
    let path = path.as_ref();
    let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
    let reader =
        ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| decode_err(e.to_string()))?;
    match reader.format() {
        None => return Err(decode_err("unrecognised image format".into())),
        // The JPEG decoder fills a cut-off scan with grey instead of failing; PIL raises
        // "image file is truncated", and so do we.
        Some(ImageFormat::Jpeg) if jpeg_is_truncated(bytes) => {
            return Err(decode_err("truncated JPEG: no end-of-image marker after the last scan".into()))
        }
        Some(_) => {}
    }
    let mut decoder = reader.into_decoder().map_err(|e| decode_err(e.to_string()))?;
    // A malformed EXIF block should not make an otherwise good image unreadable.
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).map_err(|e| decode_err(e.to_string()))?;
    image.apply_orientation(orientation);
    Ok(Image::from_rgb_image(image.into_rgb8()))
}

/// Whether a JPEG lacks its end-of-image marker (`FF D9`) after the last start-of-scan
/// (`FF DA`). Scan data cannot contain `FF D9` (a data `FF` is stuffed as `FF 00`), and an
/// EXIF thumbnail's own markers come before the main image's scans, so this finds cut-off files.
fn jpeg_is_truncated(bytes: &[u8]) -> bool {
    let Some(last_sos) = bytes.windows(2).rposition(|w| w == [0xFF, 0xDA]) else {
        return true;
    };
    !bytes[last_sos..].windows(2).any(|w| w == [0xFF, 0xD9])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_a_decode_error_naming_the_path() {
        let err = decode_bytes(b"not an image at all", "cats/felix.jpg").unwrap_err();
        assert!(matches!(err, VisionError::Decode { .. }), "{err:?}");
        assert!(err.to_string().contains("cats/felix.jpg"), "{err}");
    }

    #[test]
    fn jpeg_truncation_is_found_after_the_last_scan() {
        let whole = [0xFF, 0xD8, 0xFF, 0xDA, 1, 2, 0xFF, 0x00, 3, 0xFF, 0xD9];
        assert!(!jpeg_is_truncated(&whole));
        assert!(jpeg_is_truncated(&whole[..8]));
        // A thumbnail's end marker before the main scan does not count.
        assert!(jpeg_is_truncated(&[0xFF, 0xD8, 0xFF, 0xD9, 0xFF, 0xDA, 1, 2]));
    }
}
