//! `perspective` and `RandomPerspective`: torchvision's coefficients (a float64 solve cast to
//! float32) and Pillow's `Image.transform(size, PERSPECTIVE, coeffs, resample)`.

use crate::error::{Result, VisionError};
use crate::geometry::{coord, fill_pixel, filter_pixel, unsupported};
use crate::image::Image;
use crate::random_affine::image_transform_with_torch_draws;
use crate::resample::InterpolationMode;
use crate::torch_draws::{bernoulli, randint};
use rand::RngCore;

/// torchvision's `_get_perspective_coeffs(startpoints, endpoints)`: the `(a, b, c, d, e, f, g,
/// h)` mapping each output pixel `(x, y)` of the transformed image to
/// `((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1))` in the input, the
/// 8x8 system solved in `f64` as torchvision solves it (`torch.linalg.lstsq(driver="gels")`:
/// LAPACK's Householder QR, here in reference LAPACK's order) and each coefficient cast to `f32`
/// as torchvision casts it. Points are `[x, y]`, top-left, top-right, bottom-right, bottom-left.
/// Corners that make the system singular (three in a line) give huge arbitrary coefficients,
/// as torchvision's do.
///
/// # Errors
/// When a pivot of the solve is exactly 0 (LAPACK's `dtrtrs` refuses that too).
pub fn perspective_coeffs(startpoints: [[i64; 2]; 4], endpoints: [[i64; 2]; 4]) -> Result<[f32; 8]> {
    let mut a = [[0.0f64; 8]; 8];
    let mut b = [0.0f64; 8];
    for (i, (p1, p2)) in endpoints.iter().zip(&startpoints).enumerate() {
        let (x1, y1, x2, y2) = (p1[0] as f64, p1[1] as f64, p2[0] as f64, p2[1] as f64);
        a[2 * i] = [x1, y1, 1.0, 0.0, 0.0, 0.0, -x2 * x1, -x2 * y1];
        a[2 * i + 1] = [0.0, 0.0, 0.0, x1, y1, 1.0, -y2 * x1, -y2 * y1];
        b[2 * i] = x2;
        b[2 * i + 1] = y2;
    }
    let x = solve_qr(a, b).ok_or_else(|| VisionError::Transform {
        transform: "perspective",
        message: format!(
            "the corners {endpoints:?} are degenerate (no perspective maps {startpoints:?} onto them)"
        ),
    })?;
    Ok(x.map(|v| v as f32))
}

/// `A x = b` as LAPACK's `dgels` solves a square system, step for step in reference LAPACK's
/// order: `dgeqr2` (`dlarfg`'s reflector from `dnrm2` and `dlapy2`, `dlarf`'s `w = C^T v`,
/// `C += v (-tau w)^T`), `dorm2r` on `b`, then `dtrtrs`' column-oriented back substitution.
/// Coefficients that are exactly 0 come out as rounding noise (~1e-15) in torchvision's solve
/// and here; which side of 0 decides whether a sample point on a pixel edge falls in or out,
/// and this order gives MKL's noise for most draws, not all (`tests/it/random_transforms.rs`).
/// `None` when a pivot is 0 or a value is not finite.
// Index loops read as the LAPACK routines they follow.
#[allow(clippy::needless_range_loop)]
fn solve_qr(mut a: [[f64; 8]; 8], mut b: [f64; 8]) -> Option<[f64; 8]> {
    const N: usize = 8;
    let mut tau = [0.0f64; N];
    for k in 0..N {
        let alpha = a[k][k];
        // dnrm2 in the scale / sum-of-squares form (LAPACK before 3.10): of the forms tried
        // (plain sum of squares, fused multiply-adds anywhere, division instead of the
        // reciprocal), the one whose rounding noise equals MKL's most often.
        let xnorm = {
            let (mut scale, mut ssq) = (0.0f64, 1.0f64);
            for row in a.iter().skip(k + 1) {
                let x = row[k];
                if x != 0.0 {
                    let ax = x.abs();
                    if scale < ax {
                        ssq = 1.0 + ssq * (scale / ax) * (scale / ax);
                        scale = ax;
                    } else {
                        ssq += (ax / scale) * (ax / scale);
                    }
                }
            }
            scale * ssq.sqrt()
        };
        if xnorm == 0.0 {
            tau[k] = 0.0;
        } else {
            let (w, z) = (alpha.abs().max(xnorm), alpha.abs().min(xnorm));
            let lapy2 = if z == 0.0 { w } else { w * (1.0 + (z / w) * (z / w)).sqrt() };
            let beta = -lapy2.copysign(alpha);
            tau[k] = (beta - alpha) / beta;
            let scale = 1.0 / (alpha - beta);
            for row in a.iter_mut().skip(k + 1) {
                row[k] *= scale;
            }
            a[k][k] = beta;
        }
        if tau[k] != 0.0 {
            let v = |a: &[[f64; 8]; 8], i: usize| if i == k { 1.0 } else { a[i][k] };
            for j in k + 1..N {
                let mut w = 0.0f64;
                for i in k..N {
                    w += a[i][j] * v(&a, i);
                }
                let t = -tau[k] * w;
                for i in k..N {
                    let vi = v(&a, i);
                    a[i][j] += vi * t;
                }
            }
        }
    }
    for k in 0..N {
        if tau[k] == 0.0 {
            continue;
        }
        let v = |i: usize| if i == k { 1.0 } else { a[i][k] };
        let mut w = 0.0f64;
        for i in k..N {
            w += b[i] * v(i);
        }
        let t = -tau[k] * w;
        for i in k..N {
            b[i] += v(i) * t;
        }
    }
    for j in (0..N).rev() {
        if a[j][j] == 0.0 {
            return None;
        }
        if b[j] != 0.0 {
            b[j] /= a[j][j];
            let t = b[j];
            for i in 0..j {
                b[i] -= t * a[i][j];
            }
        }
    }
    b.iter().all(|v| v.is_finite()).then_some(b)
}

/// Pillow's `im.transform(im.size, Image.PERSPECTIVE, coeffs, resample, fillcolor=fill)`:
/// output pixel `(x, y)` samples the input at the coefficients applied to `(x + 0.5, y + 0.5)`
/// in `f64` (`Geometry.c`'s `perspective_transform`), with nearest (`COORD`), bilinear or
/// bicubic as Pillow's generic transform does, and the fill outside.
///
/// # Errors
/// When `fill` fits neither 1 nor the image's channels, or the mode is not nearest, bilinear or
/// bicubic.
pub fn perspective_transform(
    image: &Image,
    coeffs: [f64; 8],
    interpolation: InterpolationMode,
    fill: &[u8],
) -> Result<Image> {
    let bicubic = match interpolation {
        InterpolationMode::Nearest | InterpolationMode::Bilinear => false,
        InterpolationMode::Bicubic => true,
        other => return Err(unsupported(other)),
    };
    let nearest = interpolation == InterpolationMode::Nearest;
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let fill = fill_pixel(fill, c)?;
    let mut out = Image::new(w, h, c, fill.repeat(w * h));
    let [a0, a1, a2, a3, a4, a5, a6, a7] = coeffs;
    let src = image.pixels();
    let dst = out.pixels_mut();
    for y in 0..h {
        let yin = y as f64 + 0.5;
        for x in 0..w {
            let xin = x as f64 + 0.5;
            let xx = (a0 * xin + a1 * yin + a2) / (a6 * xin + a7 * yin + 1.0);
            let yy = (a3 * xin + a4 * yin + a5) / (a6 * xin + a7 * yin + 1.0);
            if !(xx.is_finite() && yy.is_finite()) {
                continue;
            }
            let d = (y * w + x) * c;
            if nearest {
                let (xi, yi) = (coord(xx), coord(yy));
                if xi >= 0 && (xi as usize) < w && yi >= 0 && (yi as usize) < h {
                    let s = (yi as usize * w + xi as usize) * c;
                    dst[d..d + c].copy_from_slice(&src[s..s + c]);
                }
            } else {
                filter_pixel(image, xx, yy, bicubic, &mut dst[d..d + c]);
            }
        }
    }
    Ok(out)
}

/// `F.perspective(img, startpoints, endpoints, interpolation, fill)` on a PIL image: the
/// coefficients of [`perspective_coeffs`] (as `f32`, widened) through
/// [`perspective_transform`]; the output has the input's size.
///
/// # Errors
/// As [`perspective_coeffs`] and [`perspective_transform`].
pub fn perspective(
    image: &Image,
    startpoints: [[i64; 2]; 4],
    endpoints: [[i64; 2]; 4],
    interpolation: InterpolationMode,
    fill: &[u8],
) -> Result<Image> {
    let coeffs = perspective_coeffs(startpoints, endpoints)?.map(f64::from);
    perspective_transform(image, coeffs, interpolation, fill)
}

/// `torchvision.transforms.RandomPerspective(distortion_scale=0.5, p=0.5, interpolation=
/// BILINEAR, fill=0)` on a PIL image: `torch.rand(1) < p`, then torchvision's `get_params`
/// (eight `randint`s: each corner moved inwards by up to `distortion_scale` of half the side),
/// then [`perspective`].
#[derive(Debug, Clone, PartialEq)]
pub struct RandomPerspective {
    distortion_scale: f64,
    p: f64,
    interpolation: InterpolationMode,
    fill: Vec<u8>,
}

impl Default for RandomPerspective {
    fn default() -> Self {
        Self::new(0.5, 0.5)
    }
}

impl RandomPerspective {
    /// `distortion_scale` and `p`, both in `[0, 1]`; bilinear, fill 0.
    ///
    /// # Panics
    /// If either is outside `[0, 1]`.
    pub fn new(distortion_scale: f64, p: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&distortion_scale),
            "distortion_scale must be in [0, 1], got {distortion_scale}"
        );
        assert!((0.0..=1.0).contains(&p), "RandomPerspective p must be in [0, 1], got {p}");
        RandomPerspective { distortion_scale, p, interpolation: InterpolationMode::Bilinear, fill: vec![] }
    }

    /// Samples with `mode`: bilinear (the default), nearest or bicubic.
    pub fn with_interpolation(mut self, mode: InterpolationMode) -> Self {
        self.interpolation = mode;
        self
    }

    /// The fill outside the transformed image: one value, or one per channel.
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// torchvision's `get_params(width, height, distortion_scale)`: the start points (the
    /// corners) and the drawn end points, top-left, top-right, bottom-right, bottom-left.
    pub fn get_params<R: RngCore + ?Sized>(
        &self,
        width: usize,
        height: usize,
        rng: &mut R,
    ) -> ([[i64; 2]; 4], [[i64; 2]; 4]) {
        let (w, h) = (width as i64, height as i64);
        let dx = (self.distortion_scale * (w / 2) as f64) as i64;
        let dy = (self.distortion_scale * (h / 2) as f64) as i64;
        let mut r = |lo: i64, hi: i64| randint(rng, lo, hi);
        let top_left = [r(0, dx + 1), r(0, dy + 1)];
        let top_right = [r(w - dx - 1, w), r(0, dy + 1)];
        let bottom_right = [r(w - dx - 1, w), r(h - dy - 1, h)];
        let bottom_left = [r(0, dx + 1), r(h - dy - 1, h)];
        let start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]];
        (start, [top_left, top_right, bottom_right, bottom_left])
    }

    /// The transform with draws from any generator (a [`crate::TorchGenerator`] seeded as
    /// `torch.manual_seed(s)` gives torchvision's image for that seed).
    ///
    /// # Errors
    /// As [`perspective`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        if !bernoulli(rng, self.p) || image.width() == 0 || image.height() == 0 {
            return Ok(image);
        }
        let (start, end) = self.get_params(image.width(), image.height(), rng);
        perspective(&image, start, end, self.interpolation, &self.fill)
    }
}

image_transform_with_torch_draws!(RandomPerspective, "RandomPerspective");
