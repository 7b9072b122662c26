//! torchvision's `AugMix` on `u8` images as it runs on a PIL image: the image becomes a `uint8`
//! tensor, each op is torchvision's tensor op (`grid_sample` for the geometric ones, float32
//! blends, tensor autocontrast, ...), the chains are mixed in float32 with Dirichlet weights
//! drawn as `torch._sample_dirichlet` draws them, and the mix is cast back to `u8`.

use crate::auto_augment::{torch_linspace_f32, AugmentOp};
use crate::error::{Result, VisionError};
use crate::geometry::{degrees, inverse_affine_matrix};
use crate::image::Image;
use crate::point_ops::equalize;
use crate::resample::InterpolationMode;
use crate::torch_draws::randint;
use crate::torch_rng::TorchRng;
use crate::transform::{expect_image, Sample, Transform};
use rand::RngCore;
use std::any::Any;
use torchlight_base::seed::Rng;

/// `uniform_real_distribution<double>(0, 1)`: 53 bits of one 64-bit draw (as `torch_draws`).
fn rand_f64<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() & ((1 << 53) - 1)) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// ATen's `normal_distribution<double>(0, 1)`: Box-Muller from two uniform doubles, the
/// second value kept in `cached` (the generator's `next_double_normal_sample`) for the next.
fn normal_f64<R: RngCore + ?Sized>(rng: &mut R, cached: &mut Option<f64>) -> f64 {
    if let Some(v) = cached.take() {
        return v;
    }
    let u1 = rand_f64(rng);
    let u2 = rand_f64(rng);
    let r = (-2.0 * (-u2).ln_1p()).sqrt();
    let theta = 2.0 * std::f64::consts::PI * u1;
    *cached = Some(r * theta.sin());
    r * theta.cos()
}

/// ATen's `sample_gamma<double>` (Marsaglia and Tsang, with its `float` literals widened as
/// C++ widens them).
fn sample_gamma<R: RngCore + ?Sized>(alpha: f64, rng: &mut R, cached: &mut Option<f64>) -> f64 {
    let mut scale = 1.0f64;
    let mut alpha = alpha;
    if alpha < 1.0 {
        if alpha == 0.0 {
            return 0.0;
        }
        scale *= (1.0 - rand_f64(rng)).powf(1.0 / alpha);
        alpha += 1.0;
    }
    let d = alpha - f64::from(1.0f32 / 3.0f32);
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let (x, y) = loop {
            let x = normal_f64(rng, cached);
            let y = 1.0 + c * x;
            if y > 0.0 {
                break (x, y);
            }
        };
        let v = y * y * y;
        let u = 1.0 - rand_f64(rng);
        let xx = x * x;
        if u < 1.0 - f64::from(0.0331f32) * xx * xx {
            return scale * d * v;
        }
        if u.ln() < 0.5 * xx + d * (1.0 - v + v.ln()) {
            return scale * d * v;
        }
    }
}

/// `torch._sample_dirichlet(torch.tensor(alphas))` (float32, CPU): one gamma draw per value in
/// order (at least the smallest positive double), each divided by their sum in `f64`, cast to
/// `f32` and kept in `[f32::MIN_POSITIVE, 1 - 2^-24]`. `cached_normal` is the generator's
/// cached second normal (`None` after `torch.manual_seed`), carried from one call to the next
/// as torch's generator carries it.
pub fn sample_dirichlet<R: RngCore + ?Sized>(
    rng: &mut R,
    alphas: &[f32],
    cached_normal: &mut Option<f64>,
) -> Vec<f32> {
    let gammas: Vec<f64> = alphas
        .iter()
        .map(|&a| sample_gamma(f64::from(a), rng, cached_normal).max(f64::MIN_POSITIVE))
        .collect();
    let sum = gammas.iter().fold(0.0, |s, g| s + g);
    let max = 1.0 - f32::EPSILON / 2.0;
    gammas.iter().map(|g| ((g / sum) as f32).max(f32::MIN_POSITIVE).min(max)).collect()
}

/// torchvision's `F.affine`/`F.rotate` on a `uint8` tensor with fill `None`: the inverse
/// matrix in `float32`, `_gen_affine_grid` (pixel-centre grid times the matrix scaled by half
/// the size, summed in order as ATen's small `bmm` sums), `grid_sample(padding_mode="zeros",
/// align_corners=False)` as libtorch's AVX2/AVX-512 kernel computes it (fused multiply-adds in
/// the unnormalisation and the bilinear sum; nearest rounds half to even), then `round` to `u8`.
fn grid_transform(image: &Image, matrix: [f64; 6], interpolation: InterpolationMode) -> Image {
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let theta = matrix.map(|v| v as f32);
    let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
    // rescaled_theta[k][j] = theta[j][k] / [0.5 w, 0.5 h][j]
    let r = [[theta[0] / hw, theta[3] / hh], [theta[1] / hw, theta[4] / hh], [theta[2] / hw, theta[5] / hh]];
    let xs = torch_linspace_f32(-(w as f64) * 0.5 + 0.5, w as f64 * 0.5 + 0.5 - 1.0, w);
    let ys = torch_linspace_f32(-(h as f64) * 0.5 + 0.5, h as f64 * 0.5 + 0.5 - 1.0, h);
    let (sx, sy) = (w as f32 / 2.0, h as f32 / 2.0);
    let src = image.pixels();
    let mut out = vec![0u8; w * h * c];
    let at = |yy: i64, xx: i64, ch: usize| -> f32 {
        if xx >= 0 && (xx as usize) < w && yy >= 0 && (yy as usize) < h {
            f32::from(src[(yy as usize * w + xx as usize) * c + ch])
        } else {
            0.0
        }
    };
    for (i, &y0) in ys.iter().enumerate() {
        for (j, &x0) in xs.iter().enumerate() {
            let g = |k: usize| 0.0f32 + x0 * r[0][k] + y0 * r[1][k] + r[2][k];
            let x = (g(0) + 1.0).mul_add(sx, -0.5);
            let y = (g(1) + 1.0).mul_add(sy, -0.5);
            let d = (i * w + j) * c;
            if interpolation == InterpolationMode::Nearest {
                let (xi, yi) = (x.round_ties_even() as i64, y.round_ties_even() as i64);
                for ch in 0..c {
                    out[d + ch] = at(yi, xi, ch) as u8;
                }
                continue;
            }
            let (xw, yn) = (x.floor(), y.floor());
            let (wd, nd) = (x - xw, y - yn);
            let (e, s) = (1.0 - wd, 1.0 - nd);
            let (nw, ne, sw, se) = (s * e, s * wd, nd * e, nd * wd);
            let (xw, yn) = (xw as i64, yn as i64);
            for ch in 0..c {
                let v = at(yn + 1, xw + 1, ch).mul_add(
                    se,
                    at(yn + 1, xw, ch).mul_add(sw, at(yn, xw + 1, ch).mul_add(ne, at(yn, xw, ch) * nw)),
                );
                out[d + ch] = v.round_ties_even() as u8;
            }
        }
    }
    Image::new(w, h, c, out)
}

/// `_blend(img1, img2, ratio)` on `uint8` tensors: `ratio * a + (1 - ratio) * b` in `float32`
/// (each product and the sum one ATen op), clamped to `[0, 255]`, truncated to `u8`; `other`
/// gives `b` for a pixel's byte index.
fn blend(image: &mut Image, ratio: f64, other: impl Fn(usize) -> f32) {
    let (r, q) = (ratio as f32, (1.0 - ratio) as f32);
    for (i, v) in image.pixels_mut().iter_mut().enumerate() {
        *v = (r * f32::from(*v) + q * other(i)).clamp(0.0, 255.0) as u8;
    }
}

/// `rgb_to_grayscale` on a `uint8` tensor: `(0.2989 r + 0.587 g + 0.114 b)` in `float32`,
/// truncated to `u8`, one value per pixel.
fn grayscale(image: &Image) -> Vec<u8> {
    image
        .pixels()
        .chunks_exact(3)
        .map(|p| {
            (0.2989f32 * f32::from(p[0]) + 0.587f32 * f32::from(p[1]) + 0.114f32 * f32::from(p[2])) as u8
        })
        .collect()
}

/// torchvision's `adjust_sharpness` degenerate image on a `uint8` tensor: the 3x3 kernel (5 in
/// the centre, 1 around, over 13) on the inner pixels, rounded, the border kept. The float sum
/// is never within its error of a half (`s / 13` is at least `1 / 26` from one), so the
/// integer `round(s / 13)` is torchvision's byte.
fn blurred(image: &Image) -> Image {
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let src = image.pixels();
    let mut out = image.clone();
    let dst = out.pixels_mut();
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for ch in 0..c {
                let mut s = 0u32;
                for dy in 0..3 {
                    for dx in 0..3 {
                        let v = u32::from(src[((y + dy - 1) * w + x + dx - 1) * c + ch]);
                        s += if dy == 1 && dx == 1 { 5 * v } else { v };
                    }
                }
                dst[(y * w + x) * c + ch] = ((2 * s + 13) / 26) as u8;
            }
        }
    }
    out
}

/// torchvision's `_apply_op(img, op_name, magnitude, interpolation, fill=None)` on a `uint8`
/// tensor (what AugMix runs on a PIL image's pixels): affine and rotate through `grid_sample`
/// (nearest or bilinear only, as torchvision's tensor path), brightness, saturation, contrast
/// and sharpness as `float32` blends truncated to `u8`, posterize as a bit mask (0 bits gives
/// 0), solarize `v >= threshold`, autocontrast per channel in `float32`, equalize by histogram.
///
/// # Errors
/// An interpolation other than nearest or bilinear on a geometric op.
pub fn apply_op_tensor(
    image: Image,
    op: AugmentOp,
    magnitude: f64,
    interpolation: InterpolationMode,
) -> Result<Image> {
    use AugmentOp::*;
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let geometric = |matrix| {
        if !matches!(interpolation, InterpolationMode::Nearest | InterpolationMode::Bilinear) {
            return Err(unsupported(interpolation));
        }
        Ok(grid_transform(&image, matrix, interpolation))
    };
    let centre = [-(w as f64) * 0.5, -(h as f64) * 0.5];
    let mut image = match op {
        ShearX => {
            return geometric(inverse_affine_matrix(
                centre,
                0.0,
                [0.0; 2],
                1.0,
                [degrees(magnitude.atan()), 0.0],
            ))
        }
        ShearY => {
            return geometric(inverse_affine_matrix(
                centre,
                0.0,
                [0.0; 2],
                1.0,
                [0.0, degrees(magnitude.atan())],
            ))
        }
        TranslateX => {
            return geometric(inverse_affine_matrix([0.0; 2], 0.0, [magnitude.trunc(), 0.0], 1.0, [0.0; 2]))
        }
        TranslateY => {
            return geometric(inverse_affine_matrix([0.0; 2], 0.0, [0.0, magnitude.trunc()], 1.0, [0.0; 2]))
        }
        Rotate => return geometric(inverse_affine_matrix([0.0; 2], -magnitude, [0.0; 2], 1.0, [0.0; 2])),
        _ => image,
    };
    match op {
        Brightness => blend(&mut image, 1.0 + magnitude, |_| 0.0),
        Color if c == 3 => {
            let gray = grayscale(&image);
            blend(&mut image, 1.0 + magnitude, |i| f32::from(gray[i / 3]));
        }
        Contrast => {
            let values: Vec<u8> = if c == 3 { grayscale(&image) } else { image.pixels().to_vec() };
            // Integers below 2^24 in all: the float32 sum is exact in any order.
            let sum = values.iter().map(|&v| f32::from(v)).sum::<f32>();
            let mean = sum / values.len() as f32;
            blend(&mut image, 1.0 + magnitude, |_| mean);
        }
        Sharpness if w > 2 && h > 2 => {
            let degenerate = blurred(&image);
            let d = degenerate.pixels();
            blend(&mut image, 1.0 + magnitude, |i| f32::from(d[i]));
        }
        Posterize => {
            let bits = magnitude.trunc() as i64;
            if !(0..=8).contains(&bits) {
                return Err(VisionError::Transform {
                    transform: "posterize",
                    message: format!("bits must be between 0 and 8, got {bits}"),
                });
            }
            let mask = (-(1i64 << (8 - bits))) as u8;
            image.pixels_mut().iter_mut().for_each(|v| *v &= mask);
        }
        Solarize => {
            let t = magnitude as f32;
            image.pixels_mut().iter_mut().for_each(|v| {
                if f32::from(*v) >= t {
                    *v = 255 - *v
                }
            });
        }
        AutoContrast => {
            let (mut lo, mut hi) = (vec![255u8; c], vec![0u8; c]);
            for px in image.pixels().chunks_exact(c) {
                for (k, &v) in px.iter().enumerate() {
                    lo[k] = lo[k].min(v);
                    hi[k] = hi[k].max(v);
                }
            }
            let params: Vec<(f32, f32)> = (0..c)
                .map(|k| {
                    // `bound / t` is `t.reciprocal() * bound` in torch: two roundings.
                    let scale = (1.0 / (f32::from(hi[k]) - f32::from(lo[k]))) * 255.0;
                    if scale.is_finite() {
                        (f32::from(lo[k]), scale)
                    } else {
                        (0.0, 1.0)
                    }
                })
                .collect();
            for px in image.pixels_mut().chunks_exact_mut(c) {
                for (v, &(lo, scale)) in px.iter_mut().zip(&params) {
                    *v = ((f32::from(*v) - lo) * scale).clamp(0.0, 255.0) as u8;
                }
            }
        }
        Equalize => equalize(&mut image),
        Invert => image.pixels_mut().iter_mut().for_each(|v| *v = 255 - *v),
        _ => {}
    }
    Ok(image)
}

fn unsupported(mode: InterpolationMode) -> VisionError {
    VisionError::Transform {
        transform: "AugMix",
        message: format!("interpolation {mode}: torchvision's tensor ops take nearest or bilinear"),
    }
}

/// `torchvision.transforms.AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0,
/// all_ops=True, interpolation=BILINEAR)` on a PIL image.
///
/// The draws, in torchvision's order: the Beta weight of the original and the mix as
/// `_sample_dirichlet([alpha, alpha])`, the chains' weights as `_sample_dirichlet([alpha] *
/// mixture_width)` times the second; then per chain its depth (`randint(1, 4)` when
/// `chain_depth <= 0`) and per op `randint(ops)`, for ops with magnitudes a bin
/// `randint(severity)` of 10, for signed ops `randint(2)` (negated when 1). Each chain starts
/// from the original; `mix = w0 * image + sum(w_i * chain_i)` in `float32`, truncated to `u8`.
#[derive(Debug, Clone, PartialEq)]
pub struct AugMix {
    severity: usize,
    mixture_width: usize,
    chain_depth: i64,
    alpha: f64,
    all_ops: bool,
    interpolation: InterpolationMode,
}

impl Default for AugMix {
    fn default() -> Self {
        AugMix {
            severity: 3,
            mixture_width: 3,
            chain_depth: -1,
            alpha: 1.0,
            all_ops: true,
            interpolation: InterpolationMode::Bilinear,
        }
    }
}

impl AugMix {
    /// `severity` in `1..=10` (torchvision's range), the rest torchvision's defaults.
    ///
    /// # Errors
    /// A severity outside `1..=10`.
    pub fn new(severity: usize) -> Result<Self> {
        if !(1..=10).contains(&severity) {
            return Err(VisionError::Transform {
                transform: "AugMix",
                message: format!("severity must be between 1 and 10, got {severity}"),
            });
        }
        Ok(AugMix { severity, ..Self::default() })
    }

    /// The number of chains mixed (3 in torchvision).
    pub fn with_mixture_width(mut self, mixture_width: usize) -> Self {
        self.mixture_width = mixture_width;
        self
    }

    /// The ops per chain; 0 or less draws it from `1..=3` per chain (torchvision's -1).
    pub fn with_chain_depth(mut self, chain_depth: i64) -> Self {
        self.chain_depth = chain_depth;
        self
    }

    /// The Dirichlet/Beta concentration (1.0 in torchvision).
    pub fn with_alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }

    /// Whether brightness, colour, contrast and sharpness take part (true in torchvision).
    pub fn with_all_ops(mut self, all_ops: bool) -> Self {
        self.all_ops = all_ops;
        self
    }

    /// The sampling of the geometric ops: nearest or bilinear (the default), the modes of
    /// torchvision's tensor ops; with another, a geometric op is an error when it runs, as in
    /// torchvision.
    pub fn with_interpolation(mut self, interpolation: InterpolationMode) -> Self {
        self.interpolation = interpolation;
        self
    }

    /// The ops of AugMix's space in torchvision's order with their 10 magnitudes on an image of
    /// `height x width` (empty for ops without one) and whether each takes a sign.
    pub fn space(all_ops: bool, height: usize, width: usize) -> Vec<(AugmentOp, Vec<f32>, bool)> {
        use AugmentOp::*;
        let lin = |a, b| torch_linspace_f32(a, b, 10);
        let d = (9.0f64 / 4.0) as f32;
        let bits = (0..10).map(|i| 4.0 - (i as f32 / d).round_ties_even()).collect();
        let mut ops = vec![
            (ShearX, lin(0.0, 0.3), true),
            (ShearY, lin(0.0, 0.3), true),
            (TranslateX, lin(0.0, width as f64 / 3.0), true),
            (TranslateY, lin(0.0, height as f64 / 3.0), true),
            (Rotate, lin(0.0, 30.0), true),
            (Posterize, bits, false),
            (Solarize, lin(255.0, 0.0), false),
            (AutoContrast, vec![], false),
            (Equalize, vec![], false),
        ];
        if all_ops {
            ops.extend([
                (Brightness, lin(0.0, 0.9), true),
                (Color, lin(0.0, 0.9), true),
                (Contrast, lin(0.0, 0.9), true),
                (Sharpness, lin(0.0, 0.9), true),
            ]);
        }
        ops
    }

    /// The transform with draws from any generator: with a [`crate::TorchGenerator`] seeded
    /// as `torch.manual_seed(s)`, torchvision's image for that seed. Torch keeps a spare normal
    /// in its generator between calls; this call starts without one (as after `manual_seed`):
    /// [`AugMix::apply_with_spare`] (or a [`crate::TorchRng`]) carries it.
    ///
    /// # Errors
    /// As [`apply_op_tensor`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        self.apply_with_spare(image, rng, &mut None)
    }

    /// [`AugMix::apply_with`] with torch's spare normal (`next_double_normal_sample`) taken
    /// from and left in `spare_normal`, so consecutive calls repeat torch's consecutive calls.
    ///
    /// # Errors
    /// As [`apply_op_tensor`].
    pub fn apply_with_spare<R: RngCore + ?Sized>(
        &self,
        image: Image,
        rng: &mut R,
        spare_normal: &mut Option<f64>,
    ) -> Result<Image> {
        let space = Self::space(self.all_ops, image.height(), image.width());
        let cached = spare_normal;
        let a = self.alpha as f32;
        let m = sample_dirichlet(rng, &[a, a], cached);
        let weights: Vec<f32> =
            sample_dirichlet(rng, &vec![a; self.mixture_width], cached).iter().map(|w| w * m[1]).collect();
        let mut mix: Vec<f32> = image.pixels().iter().map(|&v| m[0] * f32::from(v)).collect();
        for &weight in &weights {
            let depth = if self.chain_depth > 0 { self.chain_depth } else { randint(rng, 1, 4) };
            let mut aug = image.clone();
            for _ in 0..depth {
                let (op, magnitudes, signed) = &space[randint(rng, 0, space.len() as i64) as usize];
                let mut magnitude = if magnitudes.is_empty() {
                    0.0
                } else {
                    f64::from(magnitudes[randint(rng, 0, self.severity as i64) as usize])
                };
                if *signed && randint(rng, 0, 2) != 0 {
                    magnitude = -magnitude;
                }
                aug = apply_op_tensor(aug, *op, magnitude, self.interpolation)?;
            }
            for (m, &v) in mix.iter_mut().zip(aug.pixels()) {
                *m += weight * f32::from(v);
            }
        }
        let pixels = mix.iter().map(|&v| v as u8).collect();
        Ok(Image::new(image.width(), image.height(), image.channels(), pixels))
    }
}

impl Transform for AugMix {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "AugMix")?;
        Ok(Sample::Image(self.apply_with(image, rng)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        Some(expect_image(input, "AugMix").and_then(|image| Ok(Sample::Image(self.apply_with(image, g)?))))
    }

    fn apply_torch_rng(&self, input: Sample, g: &mut TorchRng) -> Option<Result<Sample>> {
        let (generator, spare) = g.parts();
        Some(
            expect_image(input, "AugMix")
                .and_then(|image| Ok(Sample::Image(self.apply_with_spare(image, generator, spare)?))),
        )
    }
}
