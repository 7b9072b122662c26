//! `to_chw_with`: a `u8` HWC image to float CHW through one lookup table per channel, the pass
//! `ToTensor` and `Normalize`'s fused `ToTensor` + `Normalize` share.

use crate::image::Image;
use crate::transform::TensorImage;

/// `image` in CHW layout, mapping channel `c`'s value `v` to `lut[c][v]` (one table lookup per
/// value: ToTensor and Normalize are per-channel functions of a `u8`).
pub(crate) fn to_chw_with(image: &Image, lut: &[[f32; 256]]) -> TensorImage {
    let (c, h, w) = (image.channels(), image.height(), image.width());
    let plane = h * w;
    let pixels = image.pixels();
    // Plane by plane into reserved memory: each value is written once (no zero fill first),
    // and the pixels (a quarter of the output's bytes) stay in cache between the planes.
    let mut data = Vec::with_capacity(c * plane);
    for (ch, lut) in lut.iter().enumerate().take(c) {
        data.extend(pixels.chunks_exact(c).map(|px| lut[px[ch] as usize]));
    }
    debug_assert_eq!(data.len(), c * plane);
    TensorImage { channels: c, height: h, width: w, data }
}
