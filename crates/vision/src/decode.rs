//! Decoding image files to RGB [`Image`]s as torchvision's `pil_loader`
//! (`Image.open(path).convert("RGB")`) does with PIL, byte for byte, with Pillow's guard against
//! decompression bombs: JPEGs with libjpeg-turbo (`libjpeg.rs`), BMP, GIF and TIFF with this
//! crate's readers of Pillow's rules (`bmp.rs`, `gif.rs`, `tiff.rs`), PNG, WebP and PNM with the
//! `image` crate, and the EXIF orientation as `ImageOps.exif_transpose` reads it
//! (`orientation.rs`) when [`DecodeOptions::exif_transpose`] asks.

use crate::decode_options::{check_pixel_limit, DecodeOptions};
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::jpeg_segments::JpegSegments;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, RgbImage};
use std::io::Cursor;
use std::path::Path;

/// The file extensions `ImageFolder` picks up by default (compared case-insensitively):
/// torchvision's `IMG_EXTENSIONS` (`.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp`) plus
/// `.gif`, whose first frame is decoded.
pub const IMG_EXTENSIONS: &[&str] =
    &[".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif"];

/// Decodes the image file at `path` to RGB with the default [`DecodeOptions`].
///
/// The format is sniffed from the content (a PNG named `.jpg` still decodes). JPEG, PNG, BMP,
/// WebP, GIF (first frame), PPM/PGM and TIFF are supported, each decoded to the bytes of PIL's
/// `convert("RGB")`: grayscale is replicated to three channels, palettes are expanded, alpha
/// is dropped (not composited; associated alpha in TIFFs is undone first, as Pillow does),
/// CMYK is converted by Pillow's formula, 16-bit samples become 8-bit as Pillow makes them
/// (16-bit grayscale clipped to 255, 16-bit colour PNG/TIFF by the high byte, 16-bit PPM
/// scaled by 255/maxval), BMP and GIF follow Pillow's readers (16-bit BMP bit expansion, RLE
/// skips, a GIF's first frame on its screen). One deliberate difference by default: the EXIF
/// orientation is applied, so a phone photo taken upright comes out upright, as
/// `PIL.ImageOps.exif_transpose` turns it (torchvision's loader ignores the tag;
/// [`DecodeOptions::with_exif_transpose`]`(false)` gives its bytes). TIFFs that Pillow reads
/// through features this crate lacks (CIELab, LZMA, old-style JPEG, ...) are refused with an
/// error naming the feature.
///
/// # Errors
/// [`VisionError::Io`] if the file cannot be opened, [`VisionError::TooManyPixels`] if its
/// header declares more pixels than the limit, [`VisionError::Decode`] if it is not an image
/// of a supported format or is truncated or corrupt; each names `path`.
pub fn decode_file(path: impl AsRef<Path>) -> Result<Image> {
    decode_file_with(path, &DecodeOptions::default())
}

/// [`decode_file`] with `options` (e.g. another pixel limit).
pub fn decode_file_with(path: impl AsRef<Path>, options: &DecodeOptions) -> Result<Image> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| VisionError::Io { path: path.to_path_buf(), error })?;
    decode_bytes_with(&bytes, path, options)
}

/// Decodes an encoded image held in memory (see [`decode_file`]); `path` only names the
/// source in errors.
pub fn decode_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<Image> {
    decode_bytes_with(bytes, path, &DecodeOptions::default())
}

/// [`decode_bytes`] with `options`.
pub fn decode_bytes_with(bytes: &[u8], path: impl AsRef<Path>, options: &DecodeOptions) -> Result<Image> {
    let path = path.as_ref();
    // The decoders are third-party code fed untrusted bytes: should one panic, the file is
    // reported as undecodable rather than taking the program (or a loader thread) down.
    std::panic::catch_unwind(|| decode_unguarded(bytes, path, options)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(VisionError::Decode {
            path: path.to_path_buf(),
            message: format!("the image decoder failed on this file ({what})"),
        })
    })
}

/// The width and height an image file's header declares, without decoding its pixels.
///
/// # Errors
/// As [`decode_file`], except for the pixel limit.
pub fn image_dimensions(path: impl AsRef<Path>) -> Result<(u32, u32)> {
    let path = path.as_ref();
    let io_err = |error| VisionError::Io { path: path.to_path_buf(), error };
    let mut head = [0u8; 4];
    let got = {
        use std::io::Read;
        let mut file = std::fs::File::open(path).map_err(io_err)?;
        let mut got = 0;
        while got < head.len() {
            match file.read(&mut head[got..]).map_err(io_err)? {
                0 => break,
                n => got += n,
            }
        }
        got
    };
    if own_header(&head[..got]) {
        // A TIFF's first IFD can sit anywhere in the file: read it whole.
        let bytes = std::fs::read(path).map_err(io_err)?;
        return image_dimensions_of_bytes(&bytes, path);
    }
    let reader = ImageReader::open(path).map_err(io_err)?;
    dimensions_of(reader, path)
}

/// The width and height the header of an encoded image held in memory declares, without
/// decoding its pixels; `path` only names the source in errors. What a loader that draws a
/// crop from the image size calls before [`decode_bytes_crop`](crate::decode_bytes_crop).
///
/// # Errors
/// As [`decode_bytes`], except for the pixel limit.
pub fn image_dimensions_of_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<(u32, u32)> {
    let path = path.as_ref();
    let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
    if crate::tiff::is_tiff(bytes) {
        return crate::tiff::dimensions(bytes).map_err(decode_err);
    }
    if bytes.starts_with(b"BM") {
        return crate::bmp::dimensions(bytes).map_err(decode_err);
    }
    dimensions_of(ImageReader::new(std::io::Cursor::new(bytes)), path)
}

/// Whether this crate reads the header itself (TIFF and BMP) rather than the image crate.
fn own_header(head: &[u8]) -> bool {
    crate::tiff::is_tiff(head) || head.starts_with(b"BM")
}

fn dimensions_of<R: std::io::BufRead + std::io::Seek>(
    reader: ImageReader<R>,
    path: &Path,
) -> Result<(u32, u32)> {
    let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
    let reader =
        reader.with_guessed_format().map_err(|error| VisionError::Io { path: path.to_path_buf(), error })?;
    if reader.format().is_none() {
        return Err(decode_err("unrecognised image format".into()));
    }
    reader.into_dimensions().map_err(|e| decode_err(e.to_string()))
}

fn decode_unguarded(bytes: &[u8], path: &Path, options: &DecodeOptions) -> Result<Image> {
    let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
    // TIFF, BMP and GIF go to this crate's readers of Pillow's rules (the image crate's differ
    // from PIL's bytes on several of their variants; it does not know BigTIFF).
    if crate::tiff::is_tiff(bytes) {
        let (width, height) = crate::tiff::dimensions(bytes).map_err(decode_err)?;
        check_pixel_limit(options, path, width, height)?;
        return crate::tiff::decode(bytes).map_err(|e| e.into_error(path));
    }
    if bytes.starts_with(b"BM") {
        let (width, height) = crate::bmp::dimensions(bytes).map_err(decode_err)?;
        check_pixel_limit(options, path, width, height)?;
        return crate::bmp::decode(bytes).map_err(decode_err);
    }
    if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        return crate::gif::decode(bytes, path, options);
    }
    let reader =
        ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| decode_err(e.to_string()))?;
    let format = match reader.format() {
        None => return Err(decode_err("unrecognised image format".into())),
        // The JPEG decoder fills a cut-off scan with grey instead of failing; PIL raises
        // "image file is truncated", and so do we.
        Some(ImageFormat::Jpeg) if jpeg_is_truncated(bytes) => {
            return Err(decode_err("truncated JPEG: no end-of-image marker after the last scan".into()))
        }
        Some(format) => format,
    };
    #[cfg(feature = "libjpeg-turbo")]
    if format == ImageFormat::Jpeg {
        if let Some(jpeg) = JpegFile::open(bytes, path, options)? {
            return jpeg.decode_whole();
        }
    }
    let decoder = reader.into_decoder().map_err(|e| decode_err(e.to_string()))?;
    let (width, height) = decoder.dimensions();
    check_pixel_limit(options, path, width, height)?;
    let image = DynamicImage::from_decoder(decoder).map_err(|e| decode_err(e.to_string()))?;
    let image = Image::from_rgb_image(to_rgb8_like_pil(image, format, png_is_grayscale(bytes)));
    let orientation = match format {
        _ if !options.exif_transpose => 1,
        ImageFormat::Jpeg => crate::orientation::jpeg(bytes),
        ImageFormat::Png => crate::orientation::png(bytes),
        ImageFormat::WebP => crate::orientation::webp(bytes),
        _ => 1,
    };
    Ok(crate::orientation::apply(image, orientation))
}

/// Which JPEG decoder this build uses: `"libjpeg-turbo 2.1.5"` (the version compiled in) with
/// the `libjpeg-turbo` feature, on by default, whose decode is byte-identical to PIL's;
/// `"zune-jpeg"` (pure Rust, through the `image` crate, which differs from PIL's by a few units
/// on some bytes) without it.
pub fn jpeg_decoder() -> &'static str {
    #[cfg(feature = "libjpeg-turbo")]
    {
        static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        NAME.get_or_init(|| format!("libjpeg-turbo {}", crate::libjpeg::version()))
    }
    #[cfg(not(feature = "libjpeg-turbo"))]
    {
        "zune-jpeg"
    }
}

/// A JPEG held in memory that libjpeg-turbo decodes as PIL does, checked (not truncated,
/// within the pixel limit) and ready to decode whole or one rectangle at a time.
#[cfg(feature = "libjpeg-turbo")]
pub(crate) struct JpegFile<'a> {
    bytes: &'a [u8],
    path: &'a Path,
    /// What the header declares.
    pub header: crate::libjpeg::JpegHeader,
    /// The EXIF orientation to apply (1 when `exif_transpose` is off).
    orientation: crate::orientation::Orientation,
}

#[cfg(feature = "libjpeg-turbo")]
impl<'a> JpegFile<'a> {
    /// `Ok(None)` when `bytes` is not a JPEG or is one libjpeg-turbo leaves to zune-jpeg
    /// (a colour space other than grayscale, RGB, YCbCr, CMYK and YCCK).
    ///
    /// # Errors
    /// [`VisionError::Decode`] for a truncated file or an unreadable header,
    /// [`VisionError::TooManyPixels`] over the limit; each names `path`.
    pub fn open(bytes: &'a [u8], path: &'a Path, options: &DecodeOptions) -> Result<Option<Self>> {
        let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
        if !bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            return Ok(None);
        }
        if jpeg_is_truncated(bytes) {
            return Err(decode_err("truncated JPEG: no end-of-image marker after the last scan".into()));
        }
        let header = crate::libjpeg::read_header(bytes).map_err(decode_err)?;
        if !header.supported() {
            return Ok(None);
        }
        check_pixel_limit(options, path, header.width, header.height)?;
        let orientation = if options.exif_transpose { crate::orientation::jpeg(bytes) } else { 1 };
        Ok(Some(JpegFile { bytes, path, header, orientation }))
    }

    /// Whether the EXIF orientation leaves the pixels as stored (so a rectangle of the stored
    /// image is a rectangle of the decoded one).
    pub fn upright(&self) -> bool {
        !(2..=8).contains(&self.orientation)
    }

    /// The whole image, turned upright as its EXIF orientation says (when the options asked).
    pub fn decode_whole(&self) -> Result<Image> {
        let (width, height) = (self.header.width, self.header.height);
        let image = self.decode_stored((0, 0, width, height))?;
        Ok(crate::orientation::apply(image, self.orientation))
    }

    /// The rectangle `(x, y, width, height)` of the image as stored (before any EXIF
    /// orientation), decoding only the rows and columns it needs: bit-identical to the same
    /// rectangle of a full decode.
    pub fn decode_stored(&self, rect: (u32, u32, u32, u32)) -> Result<Image> {
        let decode_err = |message: String| VisionError::Decode { path: self.path.to_path_buf(), message };
        let (width, height) = (rect.2 as usize, rect.3 as usize);
        let mut pixels = vec![0u8; width * height * 3];
        match crate::libjpeg::decode_region_into(self.bytes, rect, &mut pixels, width * 3)
            .map_err(decode_err)?
        {
            true => Ok(Image::new(width, height, 3, pixels)),
            false => Err(decode_err("libjpeg-turbo refused the colour space its header read".into())),
        }
    }
}

/// Whether a PNG's header declares a grayscale image without alpha (colour type 0), which the
/// decoder turns into grayscale+alpha when it has a `tRNS` chunk, while Pillow keeps it
/// grayscale (`I;16` at 16 bits).
fn png_is_grayscale(bytes: &[u8]) -> bool {
    // Signature (8), IHDR length (4) and tag (4), width (4), height (4), depth (1), colour type.
    bytes.len() > 25 && &bytes[12..16] == b"IHDR" && bytes[25] == 0
}

/// `convert("RGB")` as Pillow does it for the decoded image: 8-bit data and 16-bit PPM through
/// the image crate's conversion (PPM: `round(v * 255 / maxval)`, as Pillow's PPM decoder
/// scales), 16-bit grayscale clipped to 255 (Pillow's `I;16` -> `RGB`), other 16-bit PNG and
/// TIFF data by its high byte (Pillow's `;16B` raw modes).
fn to_rgb8_like_pil(image: DynamicImage, format: ImageFormat, png_grayscale: bool) -> RgbImage {
    let (width, height) = (image.width(), image.height());
    let rgb = |pixels: Vec<u8>| RgbImage::from_raw(width, height, pixels).expect("3 values per pixel");
    let clip = |v: u16| v.min(255) as u8;
    let high = |v: u16| (v >> 8) as u8;
    let pnm = format == ImageFormat::Pnm;
    match image {
        DynamicImage::ImageLuma16(b) => rgb(b.as_raw().iter().flat_map(|&v| [clip(v); 3]).collect()),
        DynamicImage::ImageLumaA16(b) => {
            let to8 = if format == ImageFormat::Png && png_grayscale { clip } else { high };
            rgb(b.as_raw().chunks_exact(2).flat_map(|p| [to8(p[0]); 3]).collect())
        }
        DynamicImage::ImageRgb16(b) if !pnm => rgb(b.as_raw().iter().map(|&v| high(v)).collect()),
        DynamicImage::ImageRgba16(b) if !pnm => {
            rgb(b.as_raw().chunks_exact(4).flat_map(|p| [high(p[0]), high(p[1]), high(p[2])]).collect())
        }
        other => other.into_rgb8(),
    }
}

/// Whether a JPEG lacks its end-of-image marker (`FF D9`) after the last start-of-scan
/// (`FF DA`). Scan data cannot contain `FF D9` (a data `FF` is stuffed as `FF 00`), and an
/// EXIF thumbnail's own markers come before the main image's scans, so this finds cut-off files.
///
/// Almost every file ends with its end-of-image marker, and then the answer only needs a
/// start-of-scan to exist anywhere before it, which the header segments lead to in a few jumps
/// ([`jpeg_has_scan`]); only other files (trailing bytes, odd headers) are scanned byte by byte.
fn jpeg_is_truncated(bytes: &[u8]) -> bool {
    if bytes.ends_with(&[0xFF, 0xD9]) && jpeg_has_scan(bytes) {
        // The final `FF D9` lies after the last start-of-scan, wherever that is.
        return false;
    }
    let Some(last_sos) = bytes.windows(2).rposition(|w| w == [0xFF, 0xDA]) else {
        return true;
    };
    !bytes[last_sos..].windows(2).any(|w| w == [0xFF, 0xD9])
}

/// Whether walking the header segments from the start-of-image marker reaches a start-of-scan
/// marker. `false` for anything the walk does not understand, which sends the caller to the
/// byte-by-byte scan.
fn jpeg_has_scan(bytes: &[u8]) -> bool {
    JpegSegments::new(bytes).any(|(marker, _)| marker == 0xDA)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode_options::PixelCheck;

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

    #[test]
    fn the_end_marker_shortcut_agrees_with_the_full_scan() {
        // SOI, an APP0 segment of length 4, SOS (length 3), scan data, EOI.
        let whole = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 9, 9, 0xFF, 0xDA, 0, 3, 7, 1, 0xFF, 0x00, 0xFF, 0xD9];
        assert!(jpeg_has_scan(&whole));
        assert!(!jpeg_is_truncated(&whole));
        // A file that only ends like one: no scan, so still truncated (by the full scan).
        let no_scan = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 9, 9, 0xFF, 0xD9];
        assert!(!jpeg_has_scan(&no_scan));
        assert!(jpeg_is_truncated(&no_scan));
        // A segment length running past the end stops the walk instead of panicking.
        assert!(!jpeg_has_scan(&[0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xF0, 0xFF, 0xD9]));
        assert!(!jpeg_has_scan(&[0xFF, 0xD8, 0xFF]));
        // Trailing bytes after the end marker: the full scan still finds the marker.
        let mut padded = whole.to_vec();
        padded.extend([0, 0]);
        assert!(!jpeg_is_truncated(&padded));
    }

    #[test]
    fn the_pixel_limit_warns_over_half_and_refuses_over_the_limit_as_pillow_does() {
        let pillow = DecodeOptions::default();
        assert_eq!(pillow.max_pixels, Some(178_956_970), "Pillow's DecompressionBombError threshold");
        assert_eq!(pillow.check_pixels(9459, 9459), PixelCheck::Fine, "89,472,681 pixels: under the warning");
        assert!(matches!(pillow.check_pixels(9460, 9460), PixelCheck::Warn { pixels: 89_491_600, .. }));
        assert!(matches!(
            pillow.check_pixels(40_000, 40_000),
            PixelCheck::TooMany { pixels: 1_600_000_000, .. }
        ));
        assert!(matches!(pillow.check_pixels(u32::MAX, u32::MAX), PixelCheck::TooMany { .. }), "no overflow");
        assert_eq!(pillow.with_max_pixels(None).check_pixels(u32::MAX, u32::MAX), PixelCheck::Fine);
        let small = DecodeOptions::default().with_max_pixels(Some(100));
        assert_eq!(small.check_pixels(10, 5), PixelCheck::Fine);
        assert!(matches!(small.check_pixels(10, 6), PixelCheck::Warn { .. }));
        assert!(matches!(small.check_pixels(10, 11), PixelCheck::TooMany { .. }));
    }
}
