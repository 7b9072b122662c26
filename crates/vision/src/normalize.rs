//! `Normalize`: per-channel `(x - mean) / std`, and the ImageNet mean/std.

use crate::chw::to_chw_with;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::{Sample, TensorImage, Transform};
use std::any::Any;
use torchlight_base::seed::Rng;

/// The per-channel RGB mean of ImageNet's training images in `[0, 1]`, what torchvision's
/// pretrained models expect (`[0.485, 0.456, 0.406]`).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// The per-channel RGB standard deviation matching [`IMAGENET_MEAN`] (`[0.229, 0.224, 0.225]`).
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// `torchvision.transforms.Normalize(mean, std)` on a float `[C, H, W]` tensor: each value
/// becomes `(x - mean[c]) / std[c]` in `f32`, the subtraction then the division as torchvision
/// does them, so results are bit-identical.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// Normalizes with per-channel `mean` and `std`.
    ///
    /// # Panics
    /// If the lengths differ or a std is not positive (torchvision raises on a zero std).
    pub fn new(mean: &[f32], std: &[f32]) -> Self {
        assert_eq!(mean.len(), std.len(), "Normalize mean and std lengths differ");
        assert!(std.iter().all(|&s| s > 0.0), "Normalize std must be positive, got {std:?}");
        Normalize { mean: mean.to_vec(), std: std.to_vec() }
    }

    /// `Normalize(IMAGENET_MEAN, IMAGENET_STD)`.
    pub fn imagenet() -> Self {
        Self::new(&IMAGENET_MEAN, &IMAGENET_STD)
    }

    /// The per-channel means.
    pub fn mean(&self) -> &[f32] {
        &self.mean
    }

    /// The per-channel standard deviations.
    pub fn std(&self) -> &[f32] {
        &self.std
    }

    fn stats(&self, channels: usize) -> Result<(&[f32], &[f32])> {
        // torchvision broadcasts a single mean/std over all channels.
        if self.mean.len() == channels || self.mean.len() == 1 {
            Ok((&self.mean, &self.std))
        } else {
            Err(VisionError::Transform {
                transform: "Normalize",
                message: format!("{} means for a {channels}-channel image", self.mean.len()),
            })
        }
    }

    /// Normalizes `tensor` in place.
    ///
    /// # Errors
    /// [`VisionError::Transform`] if the channel count differs from the number of means.
    pub fn normalize(&self, tensor: &mut TensorImage) -> Result<()> {
        let (mean, std) = self.stats(tensor.channels)?;
        let plane = tensor.height * tensor.width;
        for c in 0..tensor.channels {
            let (m, s) = (mean[c.min(mean.len() - 1)], std[c.min(std.len() - 1)]);
            for x in &mut tensor.data[c * plane..(c + 1) * plane] {
                *x = (*x - m) / s;
            }
        }
        Ok(())
    }

    /// `ToTensor` then `Normalize` in one pass: each channel's 256 possible results are
    /// computed once (with the same float operations, so the output is bit-identical to the
    /// two steps) and the pixels are mapped through that table.
    pub fn to_tensor_normalized(&self, image: &Image) -> Result<TensorImage> {
        let (mean, std) = self.stats(image.channels())?;
        let lut: Vec<[f32; 256]> = (0..image.channels())
            .map(|c| {
                let (m, s) = (mean[c.min(mean.len() - 1)], std[c.min(std.len() - 1)]);
                std::array::from_fn(|v| (v as f32 / 255.0 - m) / s)
            })
            .collect();
        Ok(to_chw_with(image, &lut))
    }
}

impl Transform for Normalize {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        match input {
            Sample::Tensor(mut tensor) => {
                self.normalize(&mut tensor)?;
                Ok(Sample::Tensor(tensor))
            }
            Sample::Image(_) => Err(VisionError::Transform {
                transform: "Normalize",
                message: "works on tensors; place it after ToTensor".into(),
            }),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }
}
