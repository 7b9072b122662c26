//! `ColorJitter`: random brightness, contrast, saturation and hue in a random order, with
//! PIL's `ImageEnhance` blends and HSV round trip as torchvision uses them on PIL images.

use crate::error::Result;
use crate::grayscale::{luma, luma_plane};
use crate::image::Image;
use crate::random_resized_crop::uniform;
use crate::transform::{expect_image, Sample, Transform};
use rand::Rng as _;
use std::any::Any;
use torchlight_base::seed::Rng;

/// PIL's `Image.blend(degenerate, image, factor)` on `u8`: `d + factor * (x - d)` in `f32`,
/// truncated toward zero and clipped to `[0, 255]` (Pillow's `ImagingBlend`).
#[inline]
fn blend(d: u8, x: u8, factor: f32) -> u8 {
    let v = d as f32 + factor * (x as i32 - d as i32) as f32;
    if v <= 0.0 {
        0
    } else if v >= 255.0 {
        255
    } else {
        v as u8
    }
}

/// `adjust_brightness` on a PIL image (`ImageEnhance.Brightness`): blends with black.
pub fn adjust_brightness(image: &mut Image, factor: f64) {
    let f = factor as f32;
    image.pixels_mut().iter_mut().for_each(|v| *v = blend(0, *v, f));
}

/// `adjust_contrast` on a PIL image (`ImageEnhance.Contrast`): blends with the image's mean
/// luma, rounded (`int(mean + 0.5)`).
pub fn adjust_contrast(image: &mut Image, factor: f64) {
    let plane = luma_plane(image);
    let mean = plane.iter().map(|&v| v as u64).sum::<u64>() as f64 / plane.len().max(1) as f64;
    let m = (mean + 0.5) as u8;
    let f = factor as f32;
    image.pixels_mut().iter_mut().for_each(|v| *v = blend(m, *v, f));
}

/// `adjust_saturation` on a PIL image (`ImageEnhance.Color`): blends each pixel with its
/// luma. No effect on 1-channel images.
pub fn adjust_saturation(image: &mut Image, factor: f64) {
    if image.channels() != 3 {
        return;
    }
    let f = factor as f32;
    for p in image.pixels_mut().chunks_exact_mut(3) {
        let l = luma(p[0], p[1], p[2]);
        for v in p.iter_mut() {
            *v = blend(l, *v, f);
        }
    }
}

/// `adjust_sharpness` on a PIL image (`ImageEnhance.Sharpness`): blends with the image
/// smoothed by `ImageFilter.SMOOTH` (3x3 kernel `[1 1 1; 1 5 1; 1 1 1] / 13`, as `f32` weights,
/// summed in `f32` from the row below to the row above as Pillow's `ImagingFilter3x3`, plus 0.5,
/// truncated and clipped; the border pixels, and images under 3x3, kept as they are).
pub fn adjust_sharpness(image: &mut Image, factor: f64) {
    let (w, h, c) = (image.width(), image.height(), image.channels());
    if w < 3 || h < 3 {
        return;
    }
    let (edge, centre) = ((1.0f64 / 13.0) as f32, (5.0f64 / 13.0) as f32);
    let src = image.pixels().to_vec();
    let f = factor as f32;
    let at = |x: usize, y: usize, ch: usize| src[(y * w + x) * c + ch] as f32;
    let out = image.pixels_mut();
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for ch in 0..c {
                let row = |yy: usize, k1: f32| {
                    at(x - 1, yy, ch) * edge + at(x, yy, ch) * k1 + at(x + 1, yy, ch) * edge
                };
                let mut ss = 0.5f32;
                ss += row(y + 1, edge);
                ss += row(y, centre);
                ss += row(y - 1, edge);
                let smooth = if ss <= 0.0 {
                    0
                } else if ss >= 255.0 {
                    255
                } else {
                    ss as u8
                };
                let i = (y * w + x) * c + ch;
                out[i] = blend(smooth, src[i], f);
            }
        }
    }
    // The border's degenerate pixel is the pixel itself, so the blend keeps it.
}

/// Pillow's `rgb2hsv` for one pixel (`u8` H, S, V).
fn rgb_to_hsv(r: u8, g: u8, b: u8) -> [u8; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    if maxc == minc {
        return [0, 0, maxc];
    }
    let cr = (maxc - minc) as f32;
    let s = cr / maxc as f32;
    let rc = (maxc - r) as f32 / cr;
    let gc = (maxc - g) as f32 / cr;
    let bc = (maxc - b) as f32 / cr;
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + rc as f64 - bc as f64) as f32
    } else {
        (4.0 + gc as f64 - rc as f64) as f32
    };
    let h = ((h as f64 / 6.0 + 1.0) % 1.0) as f32;
    let clip = |v: f64| (v as i32).clamp(0, 255) as u8;
    [clip(h as f64 * 255.0), clip(s as f64 * 255.0), maxc]
}

/// Pillow's `hsv2rgb` for one pixel.
fn hsv_to_rgb(h: u8, s: u8, v: u8) -> [u8; 3] {
    if s == 0 {
        return [v, v, v];
    }
    let hh = h as f32 as f64 * 6.0 / 255.0;
    let i = hh.floor() as i32;
    let f = (hh - i as f32 as f64) as f32;
    let fs = (s as f32 as f64 / 255.0) as f32;
    let vf = v as f32 as f64;
    let clip = |x: f64| (x.round() as i32).clamp(0, 255) as u8;
    let p = clip(vf * (1.0 - fs as f64));
    let q = clip(vf * (1.0 - (fs * f) as f64));
    let t = clip(vf * (1.0 - fs as f64 * (1.0 - f as f64)));
    match i % 6 {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

/// `adjust_hue` on a PIL image: to PIL's HSV, hue shifted by `int(factor * 255)` modulo 256,
/// back to RGB. `factor` in `[-0.5, 0.5]`; no effect on 1-channel images.
///
/// # Panics
/// If `factor` is outside `[-0.5, 0.5]`, as torchvision raises.
pub fn adjust_hue(image: &mut Image, factor: f64) {
    assert!((-0.5..=0.5).contains(&factor), "hue factor {factor} is not in [-0.5, 0.5]");
    if image.channels() != 3 {
        return;
    }
    let shift = (factor * 255.0) as i32 as u8;
    for p in image.pixels_mut().chunks_exact_mut(3) {
        let [h, s, v] = rgb_to_hsv(p[0], p[1], p[2]);
        p.copy_from_slice(&hsv_to_rgb(h.wrapping_add(shift), s, v));
    }
}

/// `torchvision.transforms.ColorJitter(brightness, contrast, saturation, hue)` on PIL images.
///
/// A jitter `b` means a factor uniform in `[max(0, 1 - b), 1 + b]` (hue: a shift uniform in
/// `[-h, h]`, `h <= 0.5`); 0 disables that adjustment. Each call draws a random order of the four
/// adjustments and the enabled factors, as torchvision's `get_params` does, then applies them
/// with PIL's arithmetic (see [`adjust_brightness`] and friends).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ColorJitter {
    brightness: Option<(f64, f64)>,
    contrast: Option<(f64, f64)>,
    saturation: Option<(f64, f64)>,
    hue: Option<(f64, f64)>,
}

fn factor_range(name: &str, jitter: f64) -> Option<(f64, f64)> {
    assert!(jitter >= 0.0, "ColorJitter {name} must be non-negative, got {jitter}");
    (jitter > 0.0).then(|| ((1.0 - jitter).max(0.0), 1.0 + jitter))
}

impl ColorJitter {
    /// Jitters with the given amounts (0 disables one), like `ColorJitter(b, c, s, h)`.
    ///
    /// # Panics
    /// If an amount is negative or `hue > 0.5`.
    pub fn new(brightness: f64, contrast: f64, saturation: f64, hue: f64) -> Self {
        assert!((0.0..=0.5).contains(&hue), "ColorJitter hue must be in [0, 0.5], got {hue}");
        ColorJitter {
            brightness: factor_range("brightness", brightness),
            contrast: factor_range("contrast", contrast),
            saturation: factor_range("saturation", saturation),
            hue: (hue > 0.0).then_some((-hue, hue)),
        }
    }

    /// Draws the order (a permutation of 0 = brightness, 1 = contrast, 2 = saturation,
    /// 3 = hue) and the factors of the enabled adjustments.
    pub fn get_params(&self, rng: &mut Rng) -> ([usize; 4], [Option<f64>; 4]) {
        let mut order = [0, 1, 2, 3];
        for i in (1..4).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        let draw = |r: Option<(f64, f64)>, rng: &mut Rng| r.map(|(lo, hi)| uniform(rng, lo, hi));
        let b = draw(self.brightness, rng);
        let c = draw(self.contrast, rng);
        let s = draw(self.saturation, rng);
        let h = draw(self.hue, rng);
        (order, [b, c, s, h])
    }
}

impl Transform for ColorJitter {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let mut image = expect_image(input, "ColorJitter")?;
        let (order, factors) = self.get_params(rng);
        for i in order {
            match (i, factors[i]) {
                (0, Some(f)) => adjust_brightness(&mut image, f),
                (1, Some(f)) => adjust_contrast(&mut image, f),
                (2, Some(f)) => adjust_saturation(&mut image, f),
                (3, Some(f)) => adjust_hue(&mut image, f),
                _ => {}
            }
        }
        Ok(Sample::Image(image))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        Some(expect_image(input, "ColorJitter").map(|image| Sample::Image(self.apply_with(image, g))))
    }
}

impl ColorJitter {
    /// Jitters with factor ranges given outright, `None` disabling one, like
    /// `ColorJitter(brightness=(lo, hi), ..., hue=(lo, hi))`; a range of exactly `(1, 1)` (hue:
    /// `(0, 0)`) is disabled, as torchvision's `_check_input` makes it `None`.
    ///
    /// # Panics
    /// If a range is not ordered, a factor range goes below 0, or hue leaves `[-0.5, 0.5]`.
    pub fn with_ranges(
        brightness: Option<(f64, f64)>,
        contrast: Option<(f64, f64)>,
        saturation: Option<(f64, f64)>,
        hue: Option<(f64, f64)>,
    ) -> Self {
        let factor = |name: &str, r: Option<(f64, f64)>| {
            let (lo, hi) = r?;
            assert!(
                0.0 <= lo && lo <= hi && hi.is_finite(),
                "ColorJitter {name} range ({lo}, {hi}) must be ordered and non-negative"
            );
            (r != Some((1.0, 1.0))).then_some((lo, hi))
        };
        let hue = hue.and_then(|(lo, hi)| {
            assert!(
                -0.5 <= lo && lo <= hi && hi <= 0.5,
                "ColorJitter hue range ({lo}, {hi}) must be ordered within [-0.5, 0.5]"
            );
            (lo, hi).ne(&(0.0, 0.0)).then_some((lo, hi))
        });
        ColorJitter {
            brightness: factor("brightness", brightness),
            contrast: factor("contrast", contrast),
            saturation: factor("saturation", saturation),
            hue,
        }
    }

    /// torchvision's `get_params` with its generator calls from any generator: the order is
    /// `torch.randperm(4)` (CPU, under 20 elements: for each `i`, one 32-bit draw modulo
    /// `4 - i` picks the element swapped into place `i`), then each enabled factor
    /// `torch.empty(1).uniform_(lo, hi)` in float32, brightness, contrast, saturation, hue.
    pub fn get_params_with<R: rand::RngCore + ?Sized>(&self, rng: &mut R) -> ([usize; 4], [Option<f64>; 4]) {
        let mut order = [0, 1, 2, 3];
        for i in 0..3 {
            let z = (rng.next_u32() as usize) % (4 - i);
            order.swap(i, i + z);
        }
        let mut draw =
            |r: Option<(f64, f64)>| r.map(|(lo, hi)| f64::from(crate::torch_draws::uniform_f32(rng, lo, hi)));
        let b = draw(self.brightness);
        let c = draw(self.contrast);
        let s = draw(self.saturation);
        let h = draw(self.hue);
        (order, [b, c, s, h])
    }

    /// The jitter with torchvision's draws ([`ColorJitter::get_params_with`]) from any
    /// generator: with a [`crate::TorchGenerator`] seeded as `torch.manual_seed(s)`,
    /// torchvision's image for that seed. [`Transform::apply`] keeps its own draws.
    pub fn apply_with<R: rand::RngCore + ?Sized>(&self, mut image: Image, rng: &mut R) -> Image {
        let (order, factors) = self.get_params_with(rng);
        for i in order {
            match (i, factors[i]) {
                (0, Some(f)) => adjust_brightness(&mut image, f),
                (1, Some(f)) => adjust_contrast(&mut image, f),
                (2, Some(f)) => adjust_saturation(&mut image, f),
                (3, Some(f)) => adjust_hue(&mut image, f),
                _ => {}
            }
        }
        image
    }
}
