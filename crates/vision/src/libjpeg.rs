//! JPEG decoding with libjpeg-turbo through the C shim `csrc/jpeg_shim.c`, whole or one
//! rectangle of the image (the `libjpeg-turbo` feature).
//!
//! libjpeg-turbo is what Pillow decodes JPEGs with; with libjpeg's default settings (islow
//! DCT, fancy upsampling), which Pillow also keeps, the decoded RGB bytes are PIL's
//! (`tests/it/jpeg.rs` checks this against `tests/fixtures/make_jpegs.py`'s files).

use std::ffi::{c_char, c_int, c_uint, CStr};

/// The shim's `tl_jpeg_info`: the header's facts and the decoder's messages.
#[repr(C)]
struct ShimInfo {
    width: c_uint,
    height: c_uint,
    components: c_int,
    color_space: c_int,
    progressive: c_int,
    imcu_width: c_int,
    imcu_height: c_int,
    warnings: c_int,
    error: [c_char; 200],
    warning_text: [c_char; 400],
}

impl ShimInfo {
    fn new() -> Self {
        ShimInfo {
            width: 0,
            height: 0,
            components: 0,
            color_space: 0,
            progressive: 0,
            imcu_width: 0,
            imcu_height: 0,
            warnings: 0,
            error: [0; 200],
            warning_text: [0; 400],
        }
    }

    fn text(buffer: &[c_char]) -> String {
        let bytes: Vec<u8> = buffer.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn header(&self) -> JpegHeader {
        JpegHeader {
            width: self.width,
            height: self.height,
            color_space: JpegColorSpace::from_libjpeg(self.color_space),
        }
    }
}

extern "C" {
    fn tl_jpeg_version() -> *const c_char;
    fn tl_jpeg_header(data: *const u8, len: usize, info: *mut ShimInfo) -> c_int;
    fn tl_jpeg_decode_tiff(
        data: *const u8,
        len: usize,
        ycbcr: c_int,
        out: *mut u8,
        out_len: usize,
        info: *mut ShimInfo,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn tl_jpeg_decode(
        data: *const u8,
        len: usize,
        x: c_uint,
        y: c_uint,
        w: c_uint,
        h: c_uint,
        out: *mut u8,
        stride: usize,
        out_len: usize,
        info: *mut ShimInfo,
    ) -> c_int;
}

/// The colour space libjpeg reads a file's components as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JpegColorSpace {
    /// One component.
    Grayscale,
    /// Three components stored as RGB (an Adobe marker saying so, or `R`, `G`, `B` ids).
    Rgb,
    /// Three components in YCbCr, nearly every photo.
    YCbCr,
    /// Four components, CMYK or YCCK (converted to RGB as Pillow converts them).
    Cmyk,
    /// Anything else: left to the other decoder.
    Other,
}

impl JpegColorSpace {
    fn from_libjpeg(code: c_int) -> Self {
        match code {
            1 => JpegColorSpace::Grayscale,
            2 => JpegColorSpace::Rgb,
            3 => JpegColorSpace::YCbCr,
            4 | 5 => JpegColorSpace::Cmyk,
            _ => JpegColorSpace::Other,
        }
    }
}

/// What a JPEG's header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegHeader {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The colour space libjpeg reads.
    pub color_space: JpegColorSpace,
}

impl JpegHeader {
    /// Whether this decoder turns the file into PIL's `convert("RGB")` bytes (grayscale, RGB,
    /// YCbCr, CMYK and YCCK files).
    pub fn supported(&self) -> bool {
        self.color_space != JpegColorSpace::Other
    }
}

/// Reads a JPEG's header.
///
/// # Errors
/// libjpeg's message when the bytes are not a JPEG it can read.
pub(crate) fn read_header(bytes: &[u8]) -> Result<JpegHeader, String> {
    let mut info = ShimInfo::new();
    // SAFETY: `bytes` is valid for `len` bytes, `info` is a live `tl_jpeg_info`; the shim
    // catches libjpeg's errors itself (setjmp/longjmp within C frames only).
    let rc = unsafe { tl_jpeg_header(bytes.as_ptr(), bytes.len(), &mut info) };
    if rc != 0 {
        return Err(ShimInfo::text(&info.error));
    }
    Ok(info.header())
}

/// Decodes the rectangle `(x, y, width, height)` of a JPEG to RGB8 rows written `stride` bytes
/// apart from the start of `out` (`stride = width * 3` for packed rows), bit-identical to the
/// same rectangle of a full decode: `Ok(false)` when the file is not one this decoder handles
/// (see [`JpegHeader::supported`]). libjpeg's warnings (corrupt data it decoded past) are
/// dropped when the decode succeeds, as Pillow drops them.
///
/// # Errors
/// libjpeg's message for a corrupt file (after the first warnings it raised, if any), or a
/// rectangle outside the image or not fitting `out`.
pub(crate) fn decode_region_into(
    bytes: &[u8],
    (x, y, width, height): (u32, u32, u32, u32),
    out: &mut [u8],
    stride: usize,
) -> Result<bool, String> {
    let mut info = ShimInfo::new();
    // SAFETY: `bytes` is valid for its length, `out` for `out.len()` bytes (the shim checks
    // that `height` rows of `width * 3` bytes, `stride` apart, fit in it before writing),
    // `info` is a live `tl_jpeg_info`.
    let rc = unsafe {
        tl_jpeg_decode(
            bytes.as_ptr(),
            bytes.len(),
            x,
            y,
            width,
            height,
            out.as_mut_ptr(),
            stride,
            out.len(),
            &mut info,
        )
    };
    match rc {
        0 => Ok(true),
        -2 => Ok(false),
        _ if info.warnings > 0 => Err(format!(
            "{} (after {} warning{}: {})",
            ShimInfo::text(&info.error),
            info.warnings,
            if info.warnings == 1 { "" } else { "s" },
            ShimInfo::text(&info.warning_text)
        )),
        _ => Err(ShimInfo::text(&info.error)),
    }
}

/// Decodes a TIFF's JPEG strip or tile (its `JPEGTables` already spliced in) as libtiff's
/// JPEG codec does for Pillow: `ycbcr` converts YCbCr to RGB (a YCbCr TIFF), else the
/// components come out as stored, without colour conversion. Returns the width, height and
/// components per pixel with the packed samples.
///
/// # Errors
/// libjpeg's message for a corrupt stream; a message for components stored at a lower
/// resolution without `ycbcr` (libtiff hands those back unexpanded, which Pillow cannot use).
pub(crate) fn decode_tiff_chunk(bytes: &[u8], ycbcr: bool) -> Result<(usize, usize, usize, Vec<u8>), String> {
    let mut info = ShimInfo::new();
    // SAFETY: as in `read_header`.
    if unsafe { tl_jpeg_header(bytes.as_ptr(), bytes.len(), &mut info) } != 0 {
        return Err(ShimInfo::text(&info.error));
    }
    let (w, h) = (info.width as usize, info.height as usize);
    let components = if ycbcr { 3 } else { info.components.max(0) as usize };
    let mut out = vec![0u8; w * h * components];
    // SAFETY: `bytes` is valid for its length, `out` for `out.len()` bytes (the shim checks the
    // decoded size against it before writing), `info` is a live `tl_jpeg_info`.
    let rc = unsafe {
        tl_jpeg_decode_tiff(
            bytes.as_ptr(),
            bytes.len(),
            c_int::from(ycbcr),
            out.as_mut_ptr(),
            out.len(),
            &mut info,
        )
    };
    match rc {
        0 => Ok((w, h, info.components as usize, out)),
        -2 => Err(
            "JPEG components stored at a lower resolution (chroma subsampling) in a TIFF that is not YCbCr"
                .into(),
        ),
        _ => Err(ShimInfo::text(&info.error)),
    }
}

/// The libjpeg-turbo version compiled in, e.g. `2.1.5`.
pub(crate) fn version() -> &'static str {
    // SAFETY: the shim returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(tl_jpeg_version()) }.to_str().unwrap_or("unknown")
}
