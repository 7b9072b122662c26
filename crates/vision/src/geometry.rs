//! `rotate` and `affine` with nearest-neighbour, bilinear or bicubic sampling, as torchvision
//! runs them on PIL images: torchvision's inverse matrix (`_get_inverse_affine_matrix`),
//! Pillow's `Image.rotate` (its exact-turn fast paths and its matrix rounded to 15 digits), and
//! Pillow's affine engines (`ImagingTransformAffine`: for nearest the pure scale/translate
//! path, the 16.16 fixed-point path, the floating-point fallback; for bilinear and bicubic
//! `ImagingGenericTransform` with `Geometry.c`'s filters), so the bytes are Pillow's.

use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::resample::InterpolationMode;

/// CPython's `math.radians`: `x * (pi / 180)`.
pub(crate) fn radians(x: f64) -> f64 {
    x * (std::f64::consts::PI / 180.0)
}

/// CPython's `math.degrees`: `x * (180 / pi)`.
pub(crate) fn degrees(x: f64) -> f64 {
    x * (180.0 / std::f64::consts::PI)
}

/// Pillow's `COORD`: truncation, with every negative coordinate outside.
pub(crate) fn coord(v: f64) -> i64 {
    if v < 0.0 {
        -1
    } else {
        v as i64
    }
}

/// Pillow's `FLOOR`.
fn floor_int(v: f64) -> i64 {
    v.floor() as i64
}

/// The fill pixel: one value for every channel, or one per channel (torchvision's
/// `_parse_fill`, values already integers).
pub(crate) fn fill_pixel(fill: &[u8], channels: usize) -> Result<Vec<u8>> {
    match fill.len() {
        0 => Ok(vec![0; channels]),
        1 => Ok(vec![fill[0]; channels]),
        n if n == channels => Ok(fill.to_vec()),
        n => Err(VisionError::Transform {
            transform: "affine",
            message: format!("{n} fill values for a {channels}-channel image: give 1 or {channels}"),
        }),
    }
}

/// Pillow's `im.transform(size, Image.AFFINE, matrix, Image.NEAREST, fillcolor=fill)`: output
/// pixel `(x, y)` takes the input pixel at `matrix` applied to `(x + 0.5, y + 0.5)`, and the
/// fill where that is outside.
///
/// # Errors
/// When `fill` has neither 0, 1 nor `channels` values.
pub fn affine_nearest(
    image: &Image,
    matrix: [f64; 6],
    width: usize,
    height: usize,
    fill: &[u8],
) -> Result<Image> {
    let c = image.channels();
    let fill = fill_pixel(fill, c)?;
    let mut out = Image::new(width, height, c, fill.repeat(width * height));
    let (xsize, ysize) = (image.width() as i64, image.height() as i64);
    let src = image.pixels();
    let dst = out.pixels_mut();
    let mut put = |x: usize, y: usize, xin: i64, yin: i64| {
        let s = (yin as usize * xsize as usize + xin as usize) * c;
        let d = (y * width + x) * c;
        dst[d..d + c].copy_from_slice(&src[s..s + c]);
    };
    let a = matrix;
    if a[1] == 0.0 && a[3] == 0.0 {
        // ImagingScaleAffine: positions accumulated in f64 along the row and down the columns.
        let mut xintab = vec![-1i64; width];
        let mut xo = a[2] + a[0] * 0.5;
        for slot in xintab.iter_mut() {
            let xin = coord(xo);
            if xin >= 0 && xin < xsize {
                *slot = xin;
            }
            xo += a[0];
        }
        let mut yo = a[5] + a[4] * 0.5;
        for y in 0..height {
            let yi = coord(yo);
            if yi >= 0 && yi < ysize {
                for (x, &xin) in xintab.iter().enumerate() {
                    if xin >= 0 {
                        put(x, y, xin, yi);
                    }
                }
            }
            yo += a[4];
        }
        return Ok(out);
    }
    let check = |x: f64, y: f64| {
        (x * a[0] + y * a[1] + a[2]).abs() < 32768.0 && (x * a[3] + y * a[4] + a[5]).abs() < 32768.0
    };
    let (w, h) = (width as f64, height as f64);
    if check(0.0, 0.0) && check(w, h) && check(0.0, h) && check(w, 0.0) {
        // affine_fixed: 16.16 fixed point.
        let fix = |v: f64| floor_int(v * 65536.0 + 0.5) as i32;
        let (a0, a1, a3, a4) = (fix(a[0]), fix(a[1]), fix(a[3]), fix(a[4]));
        let mut a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
        let mut a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
        for y in 0..height {
            let (mut xx, mut yy) = (a2, a5);
            for x in 0..width {
                let xin = i64::from(xx >> 16);
                if xin >= 0 && xin < xsize {
                    let yin = i64::from(yy >> 16);
                    if yin >= 0 && yin < ysize {
                        put(x, y, xin, yin);
                    }
                }
                xx = xx.wrapping_add(a0);
                yy = yy.wrapping_add(a3);
            }
            a2 = a2.wrapping_add(a1);
            a5 = a5.wrapping_add(a4);
        }
        return Ok(out);
    }
    // The floating-point fallback.
    let mut xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
    let mut yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for y in 0..height {
        let (mut xx, mut yy) = (xo, yo);
        for x in 0..width {
            let xin = coord(xx);
            if xin >= 0 && xin < xsize {
                let yin = coord(yy);
                if yin >= 0 && yin < ysize {
                    put(x, y, xin, yin);
                }
            }
            xx += a[0];
            yy += a[3];
        }
        xo += a[1];
        yo += a[4];
    }
    Ok(out)
}

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale, shear)`.
pub fn inverse_affine_matrix(
    center: [f64; 2],
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
) -> [f64; 6] {
    let rot = radians(angle);
    let (sx, sy) = (radians(shear[0]), radians(shear[1]));
    let ([cx, cy], [tx, ty]) = (center, translate);
    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
    let mut m = [d, -b, 0.0, -c, a, 0.0].map(|v| v / scale);
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
    m
}

/// `F.affine(img, angle, translate, scale, shear, NEAREST, fill, center)` on a PIL image: the
/// output has the input's size; `center` defaults to `(width / 2, height / 2)`.
///
/// # Errors
/// When `scale` is not positive, or `fill` has neither 0, 1 nor `channels` values.
pub fn affine(
    image: &Image,
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
    center: Option<[f64; 2]>,
    fill: &[u8],
) -> Result<Image> {
    affine_with(image, angle, translate, scale, shear, center, fill, InterpolationMode::Nearest)
}

/// [`affine`] with `interpolation` (nearest, bilinear or bicubic, the modes PIL's `transform`
/// has): `F.affine(img, angle, translate, scale, shear, interpolation, fill, center)`.
///
/// # Errors
/// When `scale` is not positive, `fill` has neither 0, 1 nor `channels` values, or the mode is
/// another.
#[allow(clippy::too_many_arguments)]
pub fn affine_with(
    image: &Image,
    angle: f64,
    translate: [f64; 2],
    scale: f64,
    shear: [f64; 2],
    center: Option<[f64; 2]>,
    fill: &[u8],
    interpolation: InterpolationMode,
) -> Result<Image> {
    if scale.is_nan() || scale <= 0.0 {
        return Err(VisionError::Transform {
            transform: "affine",
            message: format!("scale {scale} must be positive"),
        });
    }
    let (w, h) = (image.width(), image.height());
    let center = center.unwrap_or([w as f64 * 0.5, h as f64 * 0.5]);
    let m = inverse_affine_matrix(center, angle, translate, scale, shear);
    affine_transform(image, m, w, h, fill, interpolation)
}

/// Pillow's `im.transform(size, Image.AFFINE, matrix, resample, fillcolor=fill)` with
/// `interpolation` as `resample`: [`affine_nearest`] for nearest; for bilinear and bicubic
/// output pixel `(x, y)` samples the input at `matrix` applied to `(x + 0.5, y + 0.5)` with
/// Pillow's filter (`Geometry.c`: neighbours clamped at the edges, the value truncated to
/// `u8`, bicubic's clipped to `0..=255`), and the fill where that point is outside.
///
/// # Errors
/// When `fill` has neither 0, 1 nor `channels` values, or the mode is not nearest, bilinear or
/// bicubic (PIL's `transform` has no other).
pub fn affine_transform(
    image: &Image,
    matrix: [f64; 6],
    width: usize,
    height: usize,
    fill: &[u8],
    interpolation: InterpolationMode,
) -> Result<Image> {
    let bicubic = match interpolation {
        InterpolationMode::Nearest => return affine_nearest(image, matrix, width, height, fill),
        InterpolationMode::Bilinear => false,
        InterpolationMode::Bicubic => true,
        other => return Err(unsupported(other)),
    };
    let c = image.channels();
    let fill = fill_pixel(fill, c)?;
    let mut out = Image::new(width, height, c, fill.repeat(width * height));
    let a = matrix;
    let dst = out.pixels_mut();
    for y in 0..height {
        let yin = y as f64 + 0.5;
        for x in 0..width {
            let xin = x as f64 + 0.5;
            let xx = a[0] * xin + a[1] * yin + a[2];
            let yy = a[3] * xin + a[4] * yin + a[5];
            let d = (y * width + x) * c;
            filter_pixel(image, xx, yy, bicubic, &mut dst[d..d + c]);
        }
    }
    Ok(out)
}

pub(crate) fn unsupported(mode: InterpolationMode) -> VisionError {
    VisionError::Transform {
        transform: "affine",
        message: format!(
            "interpolation {mode}: rotate and affine take nearest, bilinear or bicubic (as PIL)"
        ),
    }
}

/// Pillow's `bilinear_filter8`/`bilinear_filter32RGB` or the bicubic ones at `(xin, yin)`:
/// writes `out` and returns true, or returns false (leaving `out`) when the point is outside.
pub(crate) fn filter_pixel(image: &Image, xin: f64, yin: f64, bicubic: bool, out: &mut [u8]) -> bool {
    let (w, h, c) = (image.width() as i64, image.height() as i64, image.channels());
    if xin < 0.0 || xin >= w as f64 || yin < 0.0 || yin >= h as f64 {
        return false;
    }
    let (xin, yin) = (xin - 0.5, yin - 0.5);
    let (x, y) = (floor_int(xin), floor_int(yin));
    let (dx, dy) = (xin - x as f64, yin - y as f64);
    let src = image.pixels();
    let xclip = |x: i64| x.clamp(0, w - 1) as usize;
    let inside = |y: i64| (0..h).contains(&y);
    let at = |row: i64, col: usize, b: usize| f64::from(src[(row as usize * w as usize + col) * c + b]);
    if !bicubic {
        let (x0, x1) = (xclip(x), xclip(x + 1));
        let lerp = |a: f64, b: f64, d: f64| a + (b - a) * d;
        for (b, o) in out.iter_mut().enumerate() {
            let top = y.clamp(0, h - 1);
            let v1 = lerp(at(top, x0, b), at(top, x1, b), dx);
            let v2 = if inside(y + 1) { lerp(at(y + 1, x0, b), at(y + 1, x1, b), dx) } else { v1 };
            *o = lerp(v1, v2, dy) as u8;
        }
        return true;
    }
    let (x, y) = (x - 1, y - 1);
    let cols = [xclip(x), xclip(x + 1), xclip(x + 2), xclip(x + 3)];
    // Pillow's BICUBIC macro, term for term.
    let cubic = |v1: f64, v2: f64, v3: f64, v4: f64, d: f64| {
        let p1 = v2;
        let p2 = -v1 + v3;
        let p3 = 2.0 * (v1 - v2) + v3 - v4;
        let p4 = -v1 + v2 - v3 + v4;
        p1 + d * (p2 + d * (p3 + d * p4))
    };
    for (b, o) in out.iter_mut().enumerate() {
        let row =
            |r: i64| cubic(at(r, cols[0], b), at(r, cols[1], b), at(r, cols[2], b), at(r, cols[3], b), dx);
        let v1 = row(y.clamp(0, h - 1));
        let v2 = if inside(y + 1) { row(y + 1) } else { v1 };
        let v3 = if inside(y + 2) { row(y + 2) } else { v2 };
        let v4 = if inside(y + 3) { row(y + 3) } else { v3 };
        let v = cubic(v1, v2, v3, v4, dy);
        *o = if v <= 0.0 {
            0
        } else if v >= 255.0 {
            255
        } else {
            v as u8
        };
    }
    true
}

/// Python's `round(x, 15)`: to 15 decimals through the correctly rounded decimal string.
fn round15(x: f64) -> f64 {
    format!("{x:.15}").parse().expect("a formatted float parses")
}

/// Pillow's `Image.transpose(ROTATE_90 / ROTATE_180 / ROTATE_270)` (counter-clockwise turns).
fn turn(image: &Image, quarter_turns: u32) -> Image {
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let (ow, oh) = if quarter_turns == 2 { (w, h) } else { (h, w) };
    let src = image.pixels();
    let mut out = vec![0u8; w * h * c];
    for y in 0..oh {
        for x in 0..ow {
            let (sx, sy) = match quarter_turns {
                1 => (w - 1 - y, x),
                2 => (w - 1 - x, h - 1 - y),
                _ => (y, h - 1 - x),
            };
            let (s, d) = ((sy * w + sx) * c, (y * ow + x) * c);
            out[d..d + c].copy_from_slice(&src[s..s + c]);
        }
    }
    Image::new(ow, oh, c, out)
}

/// `F.rotate(img, angle, NEAREST, expand, center, fill)` on a PIL image (`Image.rotate`):
/// counter-clockwise degrees; multiples of 90 without a `center` are Pillow's exact turns
/// (90 and 270 only when `expand` or the image is square), anything else its affine matrix
/// (cos and sin rounded to 15 decimals) through [`affine_nearest`]; `expand` grows the output
/// to hold the whole turned image.
///
/// # Errors
/// When `fill` has neither 0, 1 nor `channels` values.
pub fn rotate(
    image: &Image,
    angle: f64,
    expand: bool,
    center: Option<[f64; 2]>,
    fill: &[u8],
) -> Result<Image> {
    rotate_with(image, angle, InterpolationMode::Nearest, expand, center, fill)
}

/// [`rotate`] with `interpolation` (nearest, bilinear or bicubic, the modes PIL's `rotate`
/// has; the exact turns are the same in every mode, as Pillow's):
/// `F.rotate(img, angle, interpolation, expand, center, fill)`.
///
/// # Errors
/// When `fill` has neither 0, 1 nor `channels` values, or the mode is another.
pub fn rotate_with(
    image: &Image,
    angle: f64,
    interpolation: InterpolationMode,
    expand: bool,
    center: Option<[f64; 2]>,
    fill: &[u8],
) -> Result<Image> {
    if !matches!(
        interpolation,
        InterpolationMode::Nearest | InterpolationMode::Bilinear | InterpolationMode::Bicubic
    ) {
        return Err(unsupported(interpolation));
    }
    fill_pixel(fill, image.channels())?;
    let mut angle = angle % 360.0;
    if angle < 0.0 {
        angle += 360.0;
    }
    let (w, h) = (image.width(), image.height());
    if center.is_none() {
        if angle == 0.0 {
            return Ok(image.clone());
        }
        if angle == 180.0 {
            return Ok(turn(image, 2));
        }
        if (angle == 90.0 || angle == 270.0) && (expand || w == h) {
            return Ok(turn(image, if angle == 90.0 { 1 } else { 3 }));
        }
    }
    let [cx, cy] = center.unwrap_or([w as f64 / 2.0, h as f64 / 2.0]);
    let a = -radians(angle);
    let mut m = [round15(a.cos()), round15(a.sin()), 0.0, round15(-a.sin()), round15(a.cos()), 0.0];
    let apply = |x: f64, y: f64, m: &[f64; 6]| (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]);
    let (t2, t5) = apply(-cx, -cy, &m);
    m[2] = t2 + cx;
    m[5] = t5 + cy;
    let (mut ow, mut oh) = (w, h);
    if expand {
        let corners = [(0.0, 0.0), (w as f64, 0.0), (w as f64, h as f64), (0.0, h as f64)];
        let pts: Vec<(f64, f64)> = corners.iter().map(|&(x, y)| apply(x, y, &m)).collect();
        let max_x = pts.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let min_x = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
        let max_y = pts.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let min_y = pts.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let nw = (max_x.ceil() - min_x.floor()) as usize;
        let nh = (max_y.ceil() - min_y.floor()) as usize;
        let (t2, t5) = apply(-((nw as f64 - w as f64) / 2.0), -((nh as f64 - h as f64) / 2.0), &m);
        m[2] = t2;
        m[5] = t5;
        (ow, oh) = (nw, nh);
    }
    affine_transform(image, m, ow, oh, fill, interpolation)
}
