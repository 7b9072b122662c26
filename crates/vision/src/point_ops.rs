//! torchvision's integer point ops on `u8` images, as on PIL images (`PIL.ImageOps`): each
//! builds Pillow's 256-entry lookup table per channel and maps the pixels through it, so the
//! bytes are Pillow's exactly. 1-channel images are PIL's `L`, 3-channel ones `RGB`.

use crate::error::{Result, VisionError};
use crate::image::Image;

/// Maps channel `c` of every pixel through `luts[c]`.
fn apply_luts(image: &mut Image, luts: &[[u8; 256]]) {
    let channels = image.channels();
    for px in image.pixels_mut().chunks_exact_mut(channels) {
        for (v, lut) in px.iter_mut().zip(luts) {
            *v = lut[*v as usize];
        }
    }
}

fn apply_lut(image: &mut Image, lut: &[u8; 256]) {
    for v in image.pixels_mut() {
        *v = lut[*v as usize];
    }
}

/// One 256-bin histogram per channel (PIL's `image.histogram()`, split by band).
fn histograms(image: &Image) -> Vec<[u64; 256]> {
    let channels = image.channels();
    let mut h = vec![[0u64; 256]; channels];
    for px in image.pixels().chunks_exact(channels) {
        for (c, &v) in px.iter().enumerate() {
            h[c][v as usize] += 1;
        }
    }
    h
}

/// `F.invert` on a PIL image (`ImageOps.invert`): `255 - v`.
pub fn invert(image: &mut Image) {
    for v in image.pixels_mut() {
        *v = 255 - *v;
    }
}

/// `F.posterize(img, bits)` on a PIL image (`ImageOps.posterize`): keeps the `bits` high bits.
///
/// # Errors
/// When `bits` is not in `1..=8` (Pillow's `ValueError`; torchvision passes 0 on to Pillow).
pub fn posterize(image: &mut Image, bits: u32) -> Result<()> {
    if !(1..=8).contains(&bits) {
        return Err(VisionError::Transform {
            transform: "posterize",
            message: format!("bits must be between 1 and 8, got {bits}"),
        });
    }
    let mask = !((1u32 << (8 - bits)) - 1) as u8;
    for v in image.pixels_mut() {
        *v &= mask;
    }
    Ok(())
}

/// `F.solarize(img, threshold)` on a PIL image (`ImageOps.solarize`): `v` below `threshold`,
/// else `255 - v` (`threshold` may be fractional, as the policies pass it).
pub fn solarize(image: &mut Image, threshold: f64) {
    let mut lut = [0u8; 256];
    for (i, out) in lut.iter_mut().enumerate() {
        *out = if (i as f64) < threshold { i as u8 } else { 255 - i as u8 };
    }
    apply_lut(image, &lut);
}

/// `F.autocontrast` on a PIL image (`ImageOps.autocontrast()`, no cutoff): per channel,
/// stretches `[lo, hi]` (the smallest and largest values present) to `[0, 255]` by
/// `int(v * scale + offset)` with `scale = 255 / (hi - lo)`, `offset = -lo * scale` in `f64`;
/// a channel with one value is kept.
pub fn autocontrast(image: &mut Image) {
    let luts: Vec<[u8; 256]> = histograms(image)
        .iter()
        .map(|h| {
            let mut lut = [0u8; 256];
            let lo = h.iter().position(|&n| n != 0).unwrap_or(255);
            let hi = h.iter().rposition(|&n| n != 0).unwrap_or(0);
            if hi <= lo {
                for (i, out) in lut.iter_mut().enumerate() {
                    *out = i as u8;
                }
            } else {
                let scale = 255.0 / (hi - lo) as f64;
                let offset = -(lo as f64) * scale;
                for (i, out) in lut.iter_mut().enumerate() {
                    // Python's int() truncates toward zero; then the clamp.
                    *out = ((i as f64 * scale + offset).trunc()).clamp(0.0, 255.0) as u8;
                }
            }
            lut
        })
        .collect();
    apply_luts(image, &luts);
}

/// `F.equalize` on a PIL image (`ImageOps.equalize`): per channel, with `step = (pixels -
/// count of the largest value present) // 255`, value `i` maps to `(step // 2 + pixels below
/// i) // step`, clipped to 255 as `Image.point` clips; a channel with one value, or a zero
/// step, is kept.
pub fn equalize(image: &mut Image) {
    let luts: Vec<[u8; 256]> = histograms(image)
        .iter()
        .map(|h| {
            let mut lut = [0u8; 256];
            for (i, out) in lut.iter_mut().enumerate() {
                *out = i as u8;
            }
            let present: Vec<u64> = h.iter().copied().filter(|&n| n != 0).collect();
            if present.len() > 1 {
                let step = (present.iter().sum::<u64>() - present[present.len() - 1]) / 255;
                if step != 0 {
                    let mut n = step / 2;
                    for (i, out) in lut.iter_mut().enumerate() {
                        *out = (n / step).min(255) as u8;
                        n += h[i];
                    }
                }
            }
            lut
        })
        .collect();
    apply_luts(image, &luts);
}
