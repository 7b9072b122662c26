//! PIL's resampling on `u8` images, reproduced operation for operation (Pillow's
//! `Resample.c` and, for nearest, `Geometry.c`), so `Resize` matches torchvision on PIL images
//! bit for bit in every [`InterpolationMode`].
//!
//! Every mode but nearest is Pillow's one convolution resampler with a different filter (box,
//! triangle, Hamming-windowed sinc, Keys' bicubic with `a = -0.5`, Lanczos-3) and support.
//! Pillow resizes in two separable passes (horizontal then vertical, or the reverse when the
//! height shrinks much more than the width), each rounding to `u8`,
//! with filter weights in 22-bit fixed point. The filter is stretched by the scale factor
//! when shrinking (that stretch is the antialiasing). Here the source
//! can be a rectangle of the image (crop and resize in one go, without copying the crop) and
//! the output can be a window of the full result (resize and centre-crop in one go, without
//! computing the pixels the crop throws away).
//!
//! Both passes run with SIMD where the CPU has it (x86_64: AVX2, else SSE4.1, detected at run
//! time; see `x86.rs`) with the same integer arithmetic, so every [`Kernel`] gives the same
//! bytes; the scalar code is the reference and runs everywhere else.
//!
//! Nearest is not a convolution in Pillow: `Image.resize(size, NEAREST)` is an affine scale
//! (`ImagingScaleAffine`) whose source positions are accumulated in `f64` from pixel centres,
//! reproduced by [`resize_nearest`].

use crate::image::Image;
use std::ops::Range;

/// How a resize samples the image, torchvision's `InterpolationMode` on PIL images (all but
/// `NEAREST_EXACT`, which PIL does not have). Every mode is Pillow's, byte for byte: nearest is
/// Pillow's coordinate mapping (pixel centres scaled, truncated); the others are Pillow's
/// convolution resampler with its filter, widened when shrinking (antialiasing, as
/// torchvision's `antialias=True` asks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InterpolationMode {
    /// `InterpolationMode.NEAREST` (PIL's `NEAREST`).
    Nearest,
    /// `InterpolationMode.BILINEAR` (PIL's `BILINEAR`): torchvision's default.
    #[default]
    Bilinear,
    /// `InterpolationMode.BICUBIC` (PIL's `BICUBIC`, Keys' cubic with `a = -0.5`).
    Bicubic,
    /// `InterpolationMode.BOX` (PIL's `BOX`: area averaging).
    Box,
    /// `InterpolationMode.HAMMING` (PIL's `HAMMING`).
    Hamming,
    /// `InterpolationMode.LANCZOS` (PIL's `LANCZOS`, 3 lobes).
    Lanczos,
}

impl InterpolationMode {
    /// Every mode, nearest first.
    pub const ALL: [InterpolationMode; 6] = [
        InterpolationMode::Nearest,
        InterpolationMode::Bilinear,
        InterpolationMode::Bicubic,
        InterpolationMode::Box,
        InterpolationMode::Hamming,
        InterpolationMode::Lanczos,
    ];

    /// torchvision's name for it (`InterpolationMode.BILINEAR.value`, also timm's name):
    /// `"nearest"`, `"bilinear"`, `"bicubic"`, `"box"`, `"hamming"` or `"lanczos"`.
    pub fn name(self) -> &'static str {
        match self {
            InterpolationMode::Nearest => "nearest",
            InterpolationMode::Bilinear => "bilinear",
            InterpolationMode::Bicubic => "bicubic",
            InterpolationMode::Box => "box",
            InterpolationMode::Hamming => "hamming",
            InterpolationMode::Lanczos => "lanczos",
        }
    }

    /// The mode [`name`](Self::name) gives `name`, if any.
    pub fn from_name(name: &str) -> Option<InterpolationMode> {
        InterpolationMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The Python that names it: `"InterpolationMode.BICUBIC"`.
    pub fn torchvision(self) -> String {
        format!("InterpolationMode.{}", self.name().to_uppercase())
    }
}

impl std::fmt::Display for InterpolationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

/// Pillow's `PRECISION_BITS`: weights are fixed point with this many fraction bits.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The rounding term every sum starts from (one half in fixed point).
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// An implementation of the two resampling passes: the scalar reference or one of the SIMD
/// kernels. Only the kernels this CPU runs can be had ([`Kernel::available`]), so a `Kernel`
/// in hand is always safe to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel(Isa);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Sse41,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// The scalar reference, which runs on every CPU.
    pub fn scalar() -> Kernel {
        Kernel(Isa::Scalar)
    }

    /// Every kernel this CPU runs, the scalar reference first and the fastest last.
    pub fn available() -> Vec<Kernel> {
        #[allow(unused_mut)]
        let mut kernels = vec![Kernel(Isa::Scalar)];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("sse4.1") {
                kernels.push(Kernel(Isa::Sse41));
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(Kernel(Isa::Avx2));
            }
        }
        kernels
    }

    /// The kernel the transforms use, chosen once: the one named by the environment variable
    /// `TORCHLIGHT_RESAMPLE_KERNEL` (`scalar`, `sse4.1`, `avx2`) if this CPU runs it, else
    /// the fastest this CPU runs. Every kernel gives the same bytes; the variable is there to
    /// time or rule out the SIMD code.
    pub fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let available = Kernel::available();
            let wanted = std::env::var("TORCHLIGHT_RESAMPLE_KERNEL").unwrap_or_default();
            let named = available.iter().find(|k| k.name() == wanted.trim());
            *named.or(available.last()).expect("the scalar kernel is always there")
        })
    }

    /// `"scalar"`, `"sse4.1"` or `"avx2"`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Sse41 => "sse4.1",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
        }
    }
}

/// A rectangle in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// The left column.
    pub left: usize,
    /// The top row.
    pub top: usize,
    /// The width in pixels.
    pub width: usize,
    /// The height in pixels.
    pub height: usize,
}

impl Rect {
    /// The `width x height` rectangle whose top-left pixel is `(left, top)`.
    pub fn new(left: usize, top: usize, width: usize, height: usize) -> Self {
        Rect { left, top, width, height }
    }
}

/// Per output position, the first input index and the tap count, and `ksize` fixed-point
/// weights (Pillow's `precompute_coeffs` followed by `normalize_coeffs_8bpc`).
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    ksize: usize,
}

impl Coeffs {
    /// Output position `at`'s first input index and its weights (one per tap).
    #[inline]
    fn taps(&self, at: usize) -> (usize, &[i32]) {
        let (min, n) = self.bounds[at];
        (min, &self.weights[at * self.ksize..at * self.ksize + n])
    }
}

/// A filter of Pillow's convolution resampler (`Resample.c`'s `struct filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Box,
    Bilinear,
    Hamming,
    Bicubic,
    Lanczos,
}

impl Filter {
    /// The filter of `mode`; `None` for nearest, which Pillow does not convolve.
    fn of(mode: InterpolationMode) -> Option<Filter> {
        match mode {
            InterpolationMode::Nearest => None,
            InterpolationMode::Bilinear => Some(Filter::Bilinear),
            InterpolationMode::Bicubic => Some(Filter::Bicubic),
            InterpolationMode::Box => Some(Filter::Box),
            InterpolationMode::Hamming => Some(Filter::Hamming),
            InterpolationMode::Lanczos => Some(Filter::Lanczos),
        }
    }

    /// The half-width of the filter at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Box => 0.5,
            Filter::Bilinear | Filter::Hamming => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    /// The filter's value at `x`, with Pillow's operations in Pillow's order (its `float`
    /// constants included), so the weights are its weights to the last bit.
    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Filter::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let x = x * std::f64::consts::PI;
                    // C: `sin(x) / x * (0.54f + 0.46f * cos(x))`, float constants widened.
                    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// Pillow's `sinc_filter`.
fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

fn precompute_coeffs(in_size: usize, out_size: usize, filter: Filter) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale * filter.support();
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0f64; ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C's (int) cast truncates toward zero; a negative value is clamped to 0 right after.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax) {
            let w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        let row = &mut weights[xx * ksize..(xx + 1) * ksize];
        for x in 0..xmax {
            let w = if ww != 0.0 { k[x] / ww } else { k[x] };
            let fixed = w * (1u32 << PRECISION_BITS) as f64;
            row[x] = if w < 0.0 { (-0.5 + fixed) as i32 } else { (0.5 + fixed) as i32 };
        }
        bounds.push((xmin, xmax));
    }
    Coeffs { bounds, weights, ksize }
}

#[inline]
fn clip8(v: i32) -> u8 {
    if v >= (1 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Which pass Pillow runs first. Pillow 13 (python-pillow/Pillow#9549) runs the vertical pass
/// first when the height shrinks by more than twice as many pixels as the width does; the
/// order changes the intermediate `u8` rounding, so it is reproduced.
fn vertical_first(in_w: usize, in_h: usize, out_w: usize, out_h: usize) -> bool {
    in_h > out_h && (in_h - out_h) as i64 > 2 * (in_w as i64 - out_w as i64)
}

/// A view of a `u8` HWC buffer in the crop's (or output's) coordinates: pixel `(x, y)` is at
/// buffer position `(x + dx, y + dy)`.
struct View<'a> {
    pixels: &'a [u8],
    stride: usize,
    channels: usize,
    dx: isize,
    dy: isize,
}

impl View<'_> {
    #[inline]
    fn at(&self, x: usize, y: usize) -> usize {
        let bx = (x as isize + self.dx) as usize;
        let by = (y as isize + self.dy) as usize;
        (by * self.stride + bx) * self.channels
    }
}

/// The scalar horizontal arithmetic for one output pixel: `k.len()` taps of `c` channels from
/// byte `base` of `pixels`.
#[inline]
fn horizontal_pixel_scalar(pixels: &[u8], base: usize, c: usize, k: &[i32], out: &mut [u8]) {
    if c == 3 {
        let (mut s0, mut s1, mut s2) = (HALF, HALF, HALF);
        for (i, &w) in k.iter().enumerate() {
            let p = base + i * 3;
            s0 += pixels[p] as i32 * w;
            s1 += pixels[p + 1] as i32 * w;
            s2 += pixels[p + 2] as i32 * w;
        }
        out[0] = clip8(s0);
        out[1] = clip8(s1);
        out[2] = clip8(s2);
    } else {
        let mut s = HALF;
        for (i, &w) in k.iter().enumerate() {
            s += pixels[base + i] as i32 * w;
        }
        out[0] = clip8(s);
    }
}

/// One output row of the horizontal pass with the scalar arithmetic.
fn horizontal_row_scalar(src: &View, y: usize, h: &Coeffs, cols: Range<usize>, out: &mut [u8]) {
    let c = src.channels;
    for (tx, xx) in cols.enumerate() {
        let (xmin, k) = h.taps(xx);
        horizontal_pixel_scalar(src.pixels, src.at(xmin, y), c, k, &mut out[tx * c..(tx + 1) * c]);
    }
}

/// One horizontal pass (Pillow's `ImagingResampleHorizontal_8bpc`): rows `rows` of `src`,
/// output columns `cols`; `None` coefficients copy column `x` to output column `x`.
fn horizontal(
    kernel: Kernel,
    src: &View,
    rows: Range<usize>,
    coeffs: Option<&Coeffs>,
    cols: Range<usize>,
) -> Vec<u8> {
    let c = src.channels;
    let row_len = cols.len() * c;
    let mut out = vec![0u8; rows.len() * row_len];
    let mut skip = false;
    for (ty, y) in rows.clone().enumerate() {
        if std::mem::take(&mut skip) {
            continue; // done with the row before it
        }
        let rest = &mut out[ty * row_len..];
        let Some(h) = coeffs else {
            let start = src.at(cols.start, y);
            rest[..row_len].copy_from_slice(&src.pixels[start..start + row_len]);
            continue;
        };
        #[cfg(target_arch = "x86_64")]
        if kernel.0 == Isa::Avx2 && c == 3 && y + 1 < rows.end {
            let (row0, row1) = rest.split_at_mut(row_len);
            // SAFETY: a `Kernel` other than the scalar one exists only where the CPU runs it.
            unsafe {
                x86::horizontal_rows2_rgb_avx2(src, [y, y + 1], h, cols.clone(), [row0, &mut row1[..row_len]])
            };
            skip = true;
            continue;
        }
        let out_row = &mut rest[..row_len];
        match kernel.0 {
            Isa::Scalar => horizontal_row_scalar(src, y, h, cols.clone(), out_row),
            // SAFETY: a `Kernel` other than the scalar one exists only where the CPU runs it.
            #[cfg(target_arch = "x86_64")]
            Isa::Sse41 => unsafe { x86::horizontal_row_sse41(src, y, h, cols.clone(), out_row) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::horizontal_row_avx2(src, y, h, cols.clone(), out_row) },
        }
    }
    out
}

/// One vertical pass (Pillow's `ImagingResampleVertical_8bpc`): columns `cols` of `src`,
/// output rows `rows`; `None` coefficients copy row `y` to output row `y`.
fn vertical(
    kernel: Kernel,
    src: &View,
    cols: Range<usize>,
    coeffs: Option<&Coeffs>,
    rows: Range<usize>,
) -> Vec<u8> {
    let row_len = cols.len() * src.channels;
    let mut out = vec![0u8; rows.len() * row_len];
    let mut acc = vec![0i32; if kernel.0 == Isa::Scalar { row_len } else { 0 }];
    for (oy, yy) in rows.enumerate() {
        let out_row = &mut out[oy * row_len..(oy + 1) * row_len];
        let Some(v) = coeffs else {
            let start = src.at(cols.start, yy);
            out_row.copy_from_slice(&src.pixels[start..start + row_len]);
            continue;
        };
        let (ymin, k) = v.taps(yy);
        #[cfg(target_arch = "x86_64")]
        {
            let taps = x86::VerticalTaps {
                first: src.at(cols.start, ymin),
                step: src.stride * src.channels,
                weights: k,
            };
            match kernel.0 {
                // SAFETY: a `Kernel` other than the scalar one exists only where the CPU runs it.
                Isa::Sse41 => {
                    unsafe { x86::vertical_row_sse41(src.pixels, &taps, out_row) };
                    continue;
                }
                Isa::Avx2 => {
                    unsafe { x86::vertical_row_avx2(src.pixels, &taps, out_row) };
                    continue;
                }
                Isa::Scalar => {}
            }
        }
        acc.fill(HALF);
        for (i, &w) in k.iter().enumerate() {
            let r = src.at(cols.start, ymin + i);
            for (a, &p) in acc.iter_mut().zip(&src.pixels[r..r + row_len]) {
                *a += p as i32 * w;
            }
        }
        for (o, &a) in out_row.iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

/// The input range output positions `range` read (all of it for an identity pass).
fn taps(coeffs: Option<&Coeffs>, range: &Range<usize>) -> Range<usize> {
    match coeffs {
        Some(k) => {
            let (last_min, last_n) = k.bounds[range.end - 1];
            k.bounds[range.start].0..last_min + last_n
        }
        None => range.clone(),
    }
}

/// Resizes the `crop` rectangle of `src` to `out_width x out_height` with `mode` and returns
/// the `window` rectangle of that result.
///
/// Equal to PIL's `img.crop(box).resize((out_width, out_height), mode)` followed by a crop to
/// `window`.
///
/// # Panics
/// If `crop` leaves `src`, `window` leaves the output, or a size is 0.
pub(crate) fn resample(
    mode: InterpolationMode,
    src: &Image,
    crop: Rect,
    out_width: usize,
    out_height: usize,
    window: Rect,
) -> Image {
    resize_with(Kernel::best(), mode, src, crop, out_width, out_height, window)
}

/// [`resize_with`] with the bilinear filter.
///
/// # Panics
/// If `crop` leaves `src`, `window` leaves the output, or a size is 0.
pub fn resize_bilinear_with(
    kernel: Kernel,
    src: &Image,
    crop: Rect,
    out_width: usize,
    out_height: usize,
    window: Rect,
) -> Image {
    resize_with(kernel, InterpolationMode::Bilinear, src, crop, out_width, out_height, window)
}

fn check_rects(src: &Image, crop: Rect, out_width: usize, out_height: usize, window: Rect) {
    assert!(crop.width > 0 && crop.height > 0 && out_width > 0 && out_height > 0, "sizes must be positive");
    assert!(
        crop.left + crop.width <= src.width() && crop.top + crop.height <= src.height(),
        "crop leaves the image"
    );
    assert!(
        window.width > 0
            && window.height > 0
            && window.left + window.width <= out_width
            && window.top + window.height <= out_height,
        "window leaves the output"
    );
}

/// Resizes the `crop` rectangle of `src` to `out_width x out_height` with `mode` and returns
/// the `window` rectangle of that result, with the convolution passes run by `kernel` (every
/// kernel gives the same bytes; nearest has no passes).
///
/// # Panics
/// If `crop` leaves `src`, `window` leaves the output, or a size is 0.
pub fn resize_with(
    kernel: Kernel,
    mode: InterpolationMode,
    src: &Image,
    crop: Rect,
    out_width: usize,
    out_height: usize,
    window: Rect,
) -> Image {
    check_rects(src, crop, out_width, out_height, window);
    let Some(filter) = Filter::of(mode) else {
        return resize_nearest(src, crop, out_width, out_height, window);
    };
    let c = src.channels();
    let hc = (out_width != crop.width).then(|| precompute_coeffs(crop.width, out_width, filter));
    let vc = (out_height != crop.height).then(|| precompute_coeffs(crop.height, out_height, filter));
    let (hc, vc) = (hc.as_ref(), vc.as_ref());
    let out_cols = window.left..window.left + window.width;
    let out_rows = window.top..window.top + window.height;
    let source = View {
        pixels: src.pixels(),
        stride: src.width(),
        channels: c,
        dx: crop.left as isize,
        dy: crop.top as isize,
    };
    let pixels = if vertical_first(crop.width, crop.height, out_width, out_height) {
        let cols = taps(hc, &out_cols);
        let temp = vertical(kernel, &source, cols.clone(), vc, out_rows.clone());
        let view = View {
            pixels: &temp,
            stride: cols.len(),
            channels: c,
            dx: -(cols.start as isize),
            dy: -(window.top as isize),
        };
        horizontal(kernel, &view, out_rows, hc, out_cols)
    } else {
        let rows = taps(vc, &out_rows);
        let temp = horizontal(kernel, &source, rows.clone(), hc, out_cols.clone());
        let view = View {
            pixels: &temp,
            stride: window.width,
            channels: c,
            dx: -(window.left as isize),
            dy: -(rows.start as isize),
        };
        vertical(kernel, &view, out_cols, vc, out_rows)
    };
    Image::new(window.width, window.height, c, pixels)
}

/// Pillow's `Image.resize(size, NEAREST)` of the `crop` rectangle (`ImagingScaleAffine` with
/// the matrix `_resize` builds: `crop / out` per axis, no offset), cut to `window`: output
/// column `x` reads source column `int(0.5 * a + x * a)` with the sum accumulated in `f64`
/// from column 0 as Pillow accumulates it (so the rounding is Pillow's), and likewise rows.
fn resize_nearest(src: &Image, crop: Rect, out_width: usize, out_height: usize, window: Rect) -> Image {
    // Pillow's box is `float`: the sizes are exact; `a = (double)(box[2] - box[0]) / xsize`.
    let positions = |in_size: usize, out_size: usize, range: Range<usize>| -> Vec<Option<usize>> {
        let a = f64::from(in_size as f32) / out_size as f64;
        let mut o = a * 0.5;
        let mut table = Vec::with_capacity(range.len());
        for x in 0..range.end {
            if x >= range.start {
                // Pillow's COORD: negative is outside, else truncation.
                let at = if o < 0.0 { None } else { Some(o as usize) };
                table.push(at.filter(|&i| i < in_size));
            }
            o += a;
        }
        table
    };
    let cols = positions(crop.width, out_width, window.left..window.left + window.width);
    let rows = positions(crop.height, out_height, window.top..window.top + window.height);
    let c = src.channels();
    // Positions outside the source are 0 (Pillow fills them); a resize has none.
    let mut out = vec![0u8; window.width * window.height * c];
    for (row, y) in out.chunks_exact_mut(window.width * c).zip(&rows) {
        let Some(y) = y else { continue };
        let line = ((crop.top + y) * src.width() + crop.left) * c;
        for (pixel, x) in row.chunks_exact_mut(c).zip(&cols) {
            if let Some(x) = x {
                pixel.copy_from_slice(&src.pixels()[line + x * c..line + (x + 1) * c]);
            }
        }
    }
    Image::new(window.width, window.height, c, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_a_copy_and_constant_stays_constant() {
        let img = Image::new(3, 2, 3, (0..18).collect());
        let full = Rect::new(0, 0, 3, 2);
        assert_eq!(resample(InterpolationMode::Bilinear, &img, full, 3, 2, full), img);
        let flat = Image::filled(17, 9, 3, 200);
        let out =
            resample(InterpolationMode::Bilinear, &flat, Rect::new(0, 0, 17, 9), 5, 4, Rect::new(0, 0, 5, 4));
        assert!(out.pixels().iter().all(|&v| v == 200), "{out:?}");
    }

    #[test]
    fn pass_order_follows_pillow_13() {
        // Orders observed in Pillow 13.0.0 (see make_fixtures.py's cases for full-image checks).
        assert!(vertical_first(96, 128, 70, 50));
        assert!(vertical_first(10, 50, 30, 39)); // width grows, height shrinks
        assert!(!vertical_first(151, 101, 70, 50));
        assert!(!vertical_first(44, 41, 20, 16)); // height shrinks 25, width 24: not > 2x
        assert!(!vertical_first(10, 22, 55, 76)); // both grow
    }

    #[test]
    fn window_equals_crop_of_full_result_in_every_mode() {
        let img = Image::new(13, 31, 3, (0..13 * 31 * 3).map(|v| (v * 37 % 256) as u8).collect());
        // Horizontal-first (7x6 from 10x9) and vertical-first (9x5 from 10x29) orders.
        for (crop, w, h) in [(Rect::new(2, 1, 10, 9), 7, 6), (Rect::new(2, 1, 10, 29), 9, 5)] {
            for mode in InterpolationMode::ALL {
                let full = resample(mode, &img, crop, w, h, Rect::new(0, 0, w, h));
                let window = resample(mode, &img, crop, w, h, Rect::new(2, 1, 4, 3));
                assert_eq!(window, full.crop(2, 1, 4, 3), "{mode:?}");
                let cropped = img.crop(crop.left, crop.top, crop.width, crop.height);
                let whole = Rect::new(0, 0, crop.width, crop.height);
                assert_eq!(resample(mode, &cropped, whole, w, h, Rect::new(0, 0, w, h)), full, "{mode:?}");
            }
        }
    }
}
