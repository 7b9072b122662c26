//! A deterministic synthetic image-classification set written as a real ImageFolder (JPEG and
//! PNG files of varied sizes, backgrounds and noise), for the demo and for tests: the whole
//! pipeline (decode, transforms, loader, model) runs on it for real, with no download.

use image::{ImageEncoder, Rgb, RgbImage};
use rand::Rng as _;
use std::fs;
use std::path::{Path, PathBuf};
use torchlight_tensor::seed::{derive_seed, rng_from_seed, Rng};

/// The shapes the generator draws; each is one class, its folder named by [`Shape::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A filled disc.
    Circle,
    /// A filled square, rotated.
    Square,
    /// A filled triangle, rotated.
    Triangle,
    /// A plus sign, rotated.
    Cross,
    /// An annulus.
    Ring,
    /// A five-pointed star, rotated.
    Star,
    /// A long bar, rotated.
    Bar,
    /// A filled square's outline only, rotated.
    Frame,
}

impl Shape {
    /// The class (folder) name.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Circle => "circle",
            Shape::Square => "square",
            Shape::Triangle => "triangle",
            Shape::Cross => "cross",
            Shape::Ring => "ring",
            Shape::Star => "star",
            Shape::Bar => "bar",
            Shape::Frame => "frame",
        }
    }

    /// Whether the point `(x, y)`, in the shape's own frame (centre 0, radius 1), is inside.
    fn contains(self, x: f32, y: f32) -> bool {
        let r = (x * x + y * y).sqrt();
        match self {
            Shape::Circle => r <= 1.0,
            Shape::Square => x.abs() <= 0.8 && y.abs() <= 0.8,
            Shape::Triangle => {
                // Equilateral, pointing up, inscribed in the unit circle.
                y >= -0.5 && (3f32.sqrt() * x + y) <= 1.0 && (-(3f32.sqrt()) * x + y) <= 1.0
            }
            Shape::Cross => (x.abs() <= 0.28 && y.abs() <= 1.0) || (y.abs() <= 0.28 && x.abs() <= 1.0),
            Shape::Ring => (0.6..=1.0).contains(&r),
            Shape::Star => {
                let angle = y.atan2(x) + std::f32::consts::FRAC_PI_2;
                let k = (angle * 5.0 / std::f32::consts::TAU).rem_euclid(1.0);
                let edge = 0.45 + 0.55 * (1.0 - 2.0 * (k - 0.5).abs()).powf(1.5);
                r <= edge
            }
            Shape::Bar => x.abs() <= 1.0 && y.abs() <= 0.22,
            Shape::Frame => x.abs().max(y.abs()) <= 0.85 && x.abs().max(y.abs()) >= 0.6,
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    /// The classes, in any order (ImageFolder sorts them by name).
    pub shapes: Vec<Shape>,
    /// Images per class in `train/`, `val/` and `test/` (a zero skips the split).
    pub per_class: [usize; 3],
    /// Image sides are drawn from this range (pixels, inclusive), width and height apart.
    pub size_range: (u32, u32),
    /// Everything is a function of this seed.
    pub seed: u64,
}

/// Writes `spec` as `<root>/{train,val,test}/<class>/<n>.{jpg,png}`; returns the files written.
/// The same spec writes the same bytes on every run and machine.
pub fn write_image_folder(root: &Path, spec: &SyntheticSpec) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (split_index, (split, count)) in ["train", "val", "test"].iter().zip(spec.per_class).enumerate() {
        for (class_index, shape) in spec.shapes.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let dir = root.join(split).join(shape.name());
            fs::create_dir_all(&dir)?;
            for n in 0..count {
                let seed = derive_seed(spec.seed, &[split_index as u64, class_index as u64, n as u64]);
                let mut rng = rng_from_seed(seed);
                let image = draw(*shape, spec.size_range, &mut rng);
                let path = if n % 3 == 2 {
                    dir.join(format!("{n:05}.png"))
                } else {
                    dir.join(format!("{n:05}.jpg"))
                };
                let mut bytes = Vec::new();
                let (raw, w, h) = (image.as_raw(), image.width(), image.height());
                let rgb = image::ExtendedColorType::Rgb8;
                let encoded = if path.extension().is_some_and(|e| e == "png") {
                    image::codecs::png::PngEncoder::new(&mut bytes).write_image(raw, w, h, rgb)
                } else {
                    let quality = rng.random_range(80..=95);
                    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, quality)
                        .write_image(raw, w, h, rgb)
                };
                encoded.map_err(std::io::Error::other)?;
                fs::write(&path, bytes)?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

fn random_color(rng: &mut Rng) -> [f32; 3] {
    [rng.random_range(0.0..255.0), rng.random_range(0.0..255.0), rng.random_range(0.0..255.0)]
}

/// One image: a gradient background with noise, and the shape in a contrasting colour at a
/// random position, scale and rotation.
fn draw(shape: Shape, (lo, hi): (u32, u32), rng: &mut Rng) -> RgbImage {
    let (w, h) = (rng.random_range(lo..=hi), rng.random_range(lo..=hi));
    let (c0, c1) = (random_color(rng), random_color(rng));
    let background_mean: f32 = (c0.iter().sum::<f32>() + c1.iter().sum::<f32>()) / 6.0;
    // A shape colour at least 90 grey levels from the background's mean, so it stays visible.
    let fg = loop {
        let c = random_color(rng);
        if ((c.iter().sum::<f32>() / 3.0) - background_mean).abs() > 90.0 {
            break c;
        }
    };
    let side = w.min(h) as f32;
    let radius = rng.random_range(0.22..0.42) * side;
    let cx = rng.random_range(radius..(w as f32 - radius).max(radius + 1.0));
    let cy = rng.random_range(radius..(h as f32 - radius).max(radius + 1.0));
    let angle: f32 = rng.random_range(0.0..std::f32::consts::TAU);
    let (sin, cos) = angle.sin_cos();
    let gradient_angle: f32 = rng.random_range(0.0..std::f32::consts::TAU);
    let (gs, gc) = gradient_angle.sin_cos();
    let noise = rng.random_range(4.0..20.0);
    let mut image = RgbImage::new(w, h);
    for (px, py, pixel) in image.enumerate_pixels_mut() {
        let (fx, fy) = (px as f32 + 0.5, py as f32 + 0.5);
        let t = (((fx / w as f32 - 0.5) * gc + (fy / h as f32 - 0.5) * gs) + 0.5).clamp(0.0, 1.0);
        let (dx, dy) = ((fx - cx) / radius, (fy - cy) / radius);
        let (sx, sy) = (dx * cos + dy * sin, -dx * sin + dy * cos);
        let inside = shape.contains(sx, sy);
        let mut rgb = [0u8; 3];
        for c in 0..3 {
            let base = if inside { fg[c] } else { c0[c] * (1.0 - t) + c1[c] * t };
            let jitter: f32 = rng.random_range(-noise..noise);
            rgb[c] = (base + jitter).clamp(0.0, 255.0) as u8;
        }
        *pixel = Rgb(rgb);
    }
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_cover_a_plausible_area_and_differ() {
        let area = |s: Shape| {
            let mut inside = 0;
            for i in 0..100 {
                for j in 0..100 {
                    inside += usize::from(s.contains(i as f32 / 50.0 - 1.0, j as f32 / 50.0 - 1.0));
                }
            }
            inside
        };
        let areas: Vec<usize> =
            [Shape::Circle, Shape::Square, Shape::Triangle, Shape::Ring].map(area).to_vec();
        assert!(areas.iter().all(|&a| (1000..9000).contains(&a)), "{areas:?}");
        assert_ne!(areas[0], areas[1]);
    }

    #[test]
    fn the_same_spec_writes_the_same_bytes() {
        let spec = SyntheticSpec {
            shapes: vec![Shape::Circle, Shape::Star],
            per_class: [3, 1, 0],
            size_range: (20, 40),
            seed: 5,
        };
        let base = std::env::temp_dir().join(format!("tl-synth-{}", std::process::id()));
        let a = write_image_folder(&base.join("a"), &spec).unwrap();
        let b = write_image_folder(&base.join("b"), &spec).unwrap();
        assert_eq!(a.len(), 8);
        for (pa, pb) in a.iter().zip(&b) {
            assert_eq!(std::fs::read(pa).unwrap(), std::fs::read(pb).unwrap(), "{}", pa.display());
        }
        assert!(base.join("a/train/star/00002.png").exists() && base.join("a/val/circle/00000.jpg").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
