//! `ToTensor`: `u8` HWC image to float CHW in `[0, 1]`, as `torchvision.transforms.ToTensor`.

use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::{Sample, TensorImage, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// `torchvision.transforms.ToTensor()`: `[H, W, C]` `u8` to `[C, H, W]` `f32`, each value
/// `v as f32 / 255.0` (the same single float32 division torchvision does, so the result is
/// bit-identical).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToTensor;

impl ToTensor {
    /// Converts `image`.
    pub fn convert(&self, image: &Image) -> TensorImage {
        let lut: Vec<[f32; 256]> = vec![std::array::from_fn(|v| v as f32 / 255.0); image.channels()];
        to_chw_with(image, &lut)
    }
}

/// `image` in CHW layout, mapping channel `c`'s value `v` to `lut[c][v]` (one pass over the
/// pixels: ToTensor and Normalize are per-channel functions of a `u8`).
pub(crate) fn to_chw_with(image: &Image, lut: &[[f32; 256]]) -> TensorImage {
    let (c, h, w) = (image.channels(), image.height(), image.width());
    let plane = h * w;
    let mut data = vec![0f32; c * plane];
    let pixels = image.pixels();
    if c == 3 {
        let (r, rest) = data.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (i, px) in pixels.chunks_exact(3).enumerate() {
            r[i] = lut[0][px[0] as usize];
            g[i] = lut[1][px[1] as usize];
            b[i] = lut[2][px[2] as usize];
        }
    } else {
        for (ch, lut) in lut.iter().enumerate().take(c) {
            for (i, d) in data[ch * plane..(ch + 1) * plane].iter_mut().enumerate() {
                *d = lut[pixels[i * c + ch] as usize];
            }
        }
    }
    TensorImage { channels: c, height: h, width: w, data }
}

impl Transform for ToTensor {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        match input {
            Sample::Image(image) => Ok(Sample::Tensor(self.convert(&image))),
            Sample::Tensor(_) => Err(VisionError::Transform {
                transform: "ToTensor",
                message: "the input is already a tensor".into(),
            }),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
