//! How files are decoded ([`DecodeOptions`]: Pillow's pixel limits and the EXIF switch) and the
//! pixel-limit check every reader makes before decoding; below `decode.rs` and the readers it
//! calls (`gif.rs`, `tiff.rs`, ...), which all take the options.

use crate::error::{Result, VisionError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Pillow's `Image.MAX_IMAGE_PIXELS` (`1024 * 1024 * 1024 // 4 // 3`): above this many pixels
/// Pillow warns of a possible decompression bomb, and so does [`decode_file`](crate::decode_file) (once per
/// process, on stderr).
pub const PIL_MAX_IMAGE_PIXELS: u64 = 89_478_485;

/// The default pixel limit, twice [`PIL_MAX_IMAGE_PIXELS`]: where Pillow raises
/// `DecompressionBombError`. An image declaring more pixels in its header is refused before
/// any pixel is decoded.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 2 * PIL_MAX_IMAGE_PIXELS;

/// How files are decoded. `Default` is Pillow's guard (refuse images over
/// [`DEFAULT_MAX_IMAGE_PIXELS`], warn over half of the limit) and the EXIF orientation applied
/// (`exif_transpose: true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// The most pixels (width x height, read from the header before decoding) an image may
    /// have; `None` for no limit (Pillow's `Image.MAX_IMAGE_PIXELS = None`). Images over half
    /// of it decode with a warning, as Pillow's do over `MAX_IMAGE_PIXELS`.
    pub max_pixels: Option<u64>,
    /// Turn JPEG, PNG and WebP images upright as their EXIF orientation says, exactly as
    /// `PIL.ImageOps.exif_transpose` does (the EXIF block's tag 0x0112, else XMP's
    /// `tiff:Orientation`); default `true`, so phone photos come out upright. `false` gives
    /// torchvision's loader bit for bit (`Image.open(f).convert("RGB")`, which ignores the tag).
    /// TIFFs are turned either way, because Pillow's TIFF reader applies their orientation tag
    /// itself.
    pub exif_transpose: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { max_pixels: Some(DEFAULT_MAX_IMAGE_PIXELS), exif_transpose: true }
    }
}

impl DecodeOptions {
    /// Options with the pixel limit `max_pixels` (`None`: unlimited).
    pub fn with_max_pixels(mut self, max_pixels: Option<u64>) -> Self {
        self.max_pixels = max_pixels;
        self
    }

    /// Options that apply the EXIF orientation (`true`, the default) or ignore it as
    /// torchvision's loader does (`false`); see [`DecodeOptions::exif_transpose`].
    pub fn with_exif_transpose(mut self, exif_transpose: bool) -> Self {
        self.exif_transpose = exif_transpose;
        self
    }

    /// What the pixel limit says of a `width x height` image.
    pub fn check_pixels(&self, width: u32, height: u32) -> PixelCheck {
        let pixels = u64::from(width) * u64::from(height);
        match self.max_pixels {
            Some(limit) if pixels > limit => PixelCheck::TooMany { pixels, limit },
            Some(limit) if pixels > limit / 2 => PixelCheck::Warn { pixels, limit },
            _ => PixelCheck::Fine,
        }
    }
}

/// The verdict of [`DecodeOptions::check_pixels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelCheck {
    /// Within half of the limit (or no limit).
    Fine,
    /// Over half of the limit: decoded, with a warning (Pillow's `DecompressionBombWarning`).
    Warn {
        /// The image's pixels.
        pixels: u64,
        /// The limit.
        limit: u64,
    },
    /// Over the limit: refused (Pillow's `DecompressionBombError`).
    TooMany {
        /// The image's pixels.
        pixels: u64,
        /// The limit.
        limit: u64,
    },
}

/// Refuses (or warns of) a `width x height` image as `options`' pixel limit says.
pub(crate) fn check_pixel_limit(options: &DecodeOptions, path: &Path, width: u32, height: u32) -> Result<()> {
    match options.check_pixels(width, height) {
        PixelCheck::Fine => Ok(()),
        PixelCheck::Warn { pixels, limit } => {
            warn_once(&format!(
                "warning: {}: {width}x{height} = {pixels} pixels is over half of the limit of {limit} \
                 (Pillow warns of a possible decompression bomb here); further warnings are not shown",
                path.display()
            ));
            Ok(())
        }
        PixelCheck::TooMany { pixels, limit } => {
            Err(VisionError::TooManyPixels { path: path.to_path_buf(), width, height, pixels, limit })
        }
    }
}

/// Prints `message` to stderr the first time only, as Python's default warning filter shows a
/// warning once.
fn warn_once(message: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!("{message}");
    }
}
