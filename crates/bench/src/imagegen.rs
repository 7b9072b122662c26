//! A deterministic ImageFolder of photo-like JPEGs (smooth lighting, textured regions, noise,
//! ~500x400), so decoding and resampling cost what camera photos cost, unlike flat synthetic
//! shapes that JPEG compresses to almost nothing.

use anyhow::{Context, Result};
use image::codecs::jpeg::JpegEncoder;
use std::path::Path;

/// SplitMix64: a tiny seeded generator, enough for pixels.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// One `width x height` RGB image for `seed`: a two-colour lighting gradient, a few blurred
/// blobs with sinusoidal texture, and per-pixel noise.
pub fn photo_like(seed: u64, width: u32, height: u32) -> image::RgbImage {
    let mut rng = Rng(seed);
    let base: [[f32; 3]; 2] = [
        [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0],
        [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0],
    ];
    let angle = rng.unit() * std::f32::consts::TAU;
    let (dx, dy) = (angle.cos(), angle.sin());
    let blobs: Vec<([f32; 2], f32, [f32; 3], f32)> = (0..6)
        .map(|_| {
            let centre = [rng.unit() * width as f32, rng.unit() * height as f32];
            let radius = 30.0 + rng.unit() * 120.0;
            let colour = [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0];
            let freq = 0.05 + rng.unit() * 0.3;
            (centre, radius, colour, freq)
        })
        .collect();
    let (w, h) = (width as f32, height as f32);
    image::RgbImage::from_fn(width, height, |x, y| {
        let (xf, yf) = (x as f32, y as f32);
        let t = ((xf / w - 0.5) * dx + (yf / h - 0.5) * dy + 0.5).clamp(0.0, 1.0);
        let mut px = [0f32; 3];
        for c in 0..3 {
            px[c] = base[0][c] * (1.0 - t) + base[1][c] * t;
        }
        for (centre, radius, colour, freq) in &blobs {
            let d2 = (xf - centre[0]).powi(2) + (yf - centre[1]).powi(2);
            let a = (-d2 / (2.0 * radius * radius)).exp();
            let texture = 0.75 + 0.25 * (xf * freq).sin() * (yf * freq * 0.7).cos();
            for c in 0..3 {
                px[c] = px[c] * (1.0 - a) + colour[c] * texture * a;
            }
        }
        let noise = (rng.unit() - 0.5) * 24.0;
        image::Rgb(px.map(|v| (v + noise).clamp(0.0, 255.0) as u8))
    })
}

/// Writes `count` photo-like JPEGs (quality 90) under `root/class_<k>/<i>.jpg` over `classes`
/// classes, sizes varying around 500x400, on every core (each image depends on its index
/// alone, so the files are the same whatever the thread count). Skips the work when
/// `root/.complete` records the same count, so the set is generated once and cached.
pub fn write_photo_folder(root: &Path, count: usize, classes: usize) -> Result<()> {
    let marker = root.join(".complete");
    let stamp = format!("{count} {classes} v1\n");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(());
    }
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("{}", root.display()))?;
    }
    for k in 0..classes.min(count) {
        let dir = root.join(format!("class_{k:02}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    }
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(count.max(1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..count).step_by(threads).try_for_each(|i| write_photo(root, i, classes))
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("an image writer panicked"))
    })?;
    std::fs::write(&marker, stamp)?;
    Ok(())
}

/// Image `i` of the folder: `root/class_<i % classes>/<i>.jpg`.
fn write_photo(root: &Path, i: usize, classes: usize) -> Result<()> {
    let mut rng = Rng(i as u64 ^ 0xB3AC_4EAD);
    let width = 460 + (rng.next() % 81) as u32;
    let height = 360 + (rng.next() % 81) as u32;
    let img = photo_like(i as u64, width, height);
    let path = root.join(format!("class_{:02}", i % classes)).join(format!("{i:05}.jpg"));
    let file = std::fs::File::create(&path).with_context(|| format!("{}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&img)
        .with_context(|| format!("encoding {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_deterministic_and_not_flat() {
        let a = photo_like(3, 64, 48);
        assert_eq!(a, photo_like(3, 64, 48));
        assert_ne!(a, photo_like(4, 64, 48));
        let first = a.get_pixel(0, 0);
        assert!(a.pixels().any(|p| p != first));
    }

    #[test]
    fn folder_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("set");
        write_photo_folder(&root, 4, 2).unwrap();
        let jpgs = std::fs::read_dir(root.join("class_00")).unwrap().count();
        assert_eq!(jpgs, 2);
        let modified = std::fs::metadata(root.join("class_00/00000.jpg")).unwrap().modified().unwrap();
        write_photo_folder(&root, 4, 2).unwrap();
        let again = std::fs::metadata(root.join("class_00/00000.jpg")).unwrap().modified().unwrap();
        assert_eq!(modified, again);
    }
}
