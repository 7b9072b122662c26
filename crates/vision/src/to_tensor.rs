//! `ToTensor`: `u8` HWC image to float CHW in `[0, 1]`, as `torchvision.transforms.ToTensor`.

use crate::chw::to_chw_with;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::normalize::Normalize;
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

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }

    /// Fuses with a following [`Normalize`]: one lookup-table pass
    /// ([`Normalize::to_tensor_normalized`]).
    fn fuse(&self, next: &dyn Transform) -> Option<Box<dyn Transform>> {
        let normalize = next.as_any().downcast_ref::<Normalize>()?;
        Some(Box::new(ToTensorNormalize(normalize.clone())))
    }
}

/// `ToTensor` then `Normalize` through one lookup table (what [`ToTensor::fuse`] gives).
#[derive(Debug)]
struct ToTensorNormalize(Normalize);

impl Transform for ToTensorNormalize {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        match input {
            Sample::Image(image) => Ok(Sample::Tensor(self.0.to_tensor_normalized(&image)?)),
            // ToTensor's own error.
            tensor => ToTensor.apply(tensor, rng),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, _g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        crate::transform::apply_drawing_nothing(self, input)
    }
}
