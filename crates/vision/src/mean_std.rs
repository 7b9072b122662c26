//! `MeanStd`: a dataset's own per-channel mean and standard deviation, for `Normalize` when
//! training from scratch instead of with ImageNet's statistics.

use crate::error::{Result, VisionError};
use torchlight_base::seed::rng_from_seed;
use torchlight_data::{Array, Buffer, Dataset};

/// Accumulates per-channel sums over images in `[0, 1]` scale, in `f64`.
///
/// U8 arrays are read as `[H, W, C]` with values `v / 255` (what `ImageFolder` yields without
/// a transform); F32 arrays as `[C, H, W]` (after `ToTensor`). The standard deviation is the
/// population one over all pixels of all images, what the usual
/// `torch.stack(all pixels).std(dim)` recipes compute (up to the n / (n - 1) factor, which is
/// negligible over a dataset's pixels).
#[derive(Debug, Clone, Default)]
pub struct MeanStd {
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
    count: u64,
}

impl MeanStd {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one image.
    ///
    /// # Errors
    /// [`VisionError::Config`] for an array that is not 3-dimensional, has an I64 buffer, or
    /// has another channel count than the images before it.
    pub fn update(&mut self, array: &Array) -> Result<()> {
        let bad = |reason: String| VisionError::Config { field: "array", reason };
        if array.shape.len() != 3 {
            return Err(bad(format!("expected a 3-d image, got shape {:?}", array.shape)));
        }
        let (channels, hwc) = match &array.buffer {
            Buffer::U8(_) => (array.shape[2], true),
            Buffer::F32(_) => (array.shape[0], false),
            Buffer::I64(_) => return Err(bad("I64 arrays are not images".into())),
        };
        if self.sum.is_empty() {
            self.sum = vec![0.0; channels];
            self.sum_sq = vec![0.0; channels];
        } else if self.sum.len() != channels {
            return Err(bad(format!("{channels} channels after images of {}", self.sum.len())));
        }
        let plane = array.buffer.len() / channels.max(1);
        match &array.buffer {
            Buffer::U8(v) => {
                debug_assert!(hwc);
                // Per-channel histograms: exact integer sums, then one conversion.
                let mut hist = vec![[0u64; 256]; channels];
                for px in v.chunks_exact(channels) {
                    for (h, &x) in hist.iter_mut().zip(px) {
                        h[x as usize] += 1;
                    }
                }
                for (c, h) in hist.iter().enumerate() {
                    for (value, &n) in h.iter().enumerate() {
                        let x = value as f64 / 255.0;
                        self.sum[c] += n as f64 * x;
                        self.sum_sq[c] += n as f64 * x * x;
                    }
                }
            }
            Buffer::F32(v) => {
                for (c, chunk) in v.chunks_exact(plane).enumerate() {
                    for &x in chunk {
                        self.sum[c] += x as f64;
                        self.sum_sq[c] += x as f64 * x as f64;
                    }
                }
            }
            Buffer::I64(_) => unreachable!("rejected above"),
        }
        self.count += plane as u64;
        Ok(())
    }

    /// The per-channel `(mean, std)` so far (empty before any image).
    pub fn finish(&self) -> (Vec<f32>, Vec<f32>) {
        let n = self.count.max(1) as f64;
        let mean: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        let std =
            self.sum_sq.iter().zip(&mean).map(|(sq, m)| (sq / n - m * m).max(0.0).sqrt() as f32).collect();
        (mean.into_iter().map(|m| m as f32).collect(), std)
    }
}

/// The per-channel `(mean, std)` of every image of `dataset` (see [`MeanStd`]), e.g. an
/// `ImageFolder` without random transforms. Samples are loaded with a fixed generator, so
/// the result is reproducible.
///
/// # Errors
/// The first sample that fails to load, as [`VisionError::Data`] naming it.
pub fn dataset_mean_std<D: Dataset<Item = (Array, i64)>>(dataset: &D) -> Result<(Vec<f32>, Vec<f32>)> {
    let mut acc = MeanStd::new();
    let mut rng = rng_from_seed(0);
    for index in 0..dataset.len() {
        let (array, _) = dataset.get(index, &mut rng)?;
        acc.update(&array)?;
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hwc_u8_and_chw_f32_agree() {
        // Two pixels: (0, 255, 51) and (255, 255, 102).
        let u8s = Array { shape: vec![1, 2, 3], buffer: Buffer::U8(vec![0, 255, 51, 255, 255, 102]) };
        let f32s = Array { shape: vec![3, 1, 2], buffer: Buffer::F32(vec![0.0, 1.0, 1.0, 1.0, 0.2, 0.4]) };
        for a in [u8s, f32s] {
            let mut acc = MeanStd::new();
            acc.update(&a).unwrap();
            let (mean, std) = acc.finish();
            let want_mean = [0.5, 1.0, 0.3];
            let want_std = [0.5, 0.0, 0.1];
            for c in 0..3 {
                assert!(
                    (mean[c] - want_mean[c]).abs() < 1e-6 && (std[c] - want_std[c]).abs() < 1e-6,
                    "{mean:?} {std:?}"
                );
            }
        }
    }
}
