//! The `Transform` trait and `Sample`, the value that flows through a pipeline: a `u8`
//! [`Image`] until `ToTensor`, a float [`TensorImage`] after.

use crate::error::Result;
use crate::image::Image;
use std::any::Any;
use std::fmt::Debug;
use torchlight_base::seed::Rng;
use torchlight_data::{Array, Buffer};

/// A float image in CHW layout, `[channels, height, width]`, what `ToTensor` makes and
/// `Normalize` works on. A host buffer, not a tch tensor, so loader workers can make it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorImage {
    /// Number of channels (3 for RGB).
    pub channels: usize,
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// `channels * height * width` values, row-major CHW.
    pub data: Vec<f32>,
}

impl TensorImage {
    /// The image as an F32 `[C, H, W]` [`Array`].
    pub fn into_array(self) -> Array {
        Array { shape: vec![self.channels, self.height, self.width], buffer: Buffer::F32(self.data) }
    }
}

/// What a transform takes and gives: like torchvision's transforms, which take a PIL image
/// before `ToTensor` and a tensor after it.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample {
    /// A `u8` HWC image (a PIL image in torchvision).
    Image(Image),
    /// A float CHW image (a tensor in torchvision).
    Tensor(TensorImage),
}

impl Sample {
    /// U8 `[H, W, C]` for an image, F32 `[C, H, W]` for a tensor.
    pub fn into_array(self) -> Array {
        match self {
            Sample::Image(image) => image.into_array(),
            Sample::Tensor(tensor) => tensor.into_array(),
        }
    }

    /// The image, if this is still one.
    pub fn into_image(self) -> Option<Image> {
        match self {
            Sample::Image(image) => Some(image),
            Sample::Tensor(_) => None,
        }
    }

    /// The tensor, if `ToTensor` has run.
    pub fn into_tensor(self) -> Option<TensorImage> {
        match self {
            Sample::Image(_) => None,
            Sample::Tensor(tensor) => Some(tensor),
        }
    }
}

/// One step of an image pipeline, like a torchvision transform.
///
/// Random transforms draw only from `rng`, which the DataLoader seeds per sample from
/// (seed, epoch, index), so augmentation does not depend on the worker count. Transforms are
/// shared by loader threads, hence `Send + Sync`.
pub trait Transform: Debug + Send + Sync {
    /// Transforms one sample.
    ///
    /// # Errors
    /// [`crate::VisionError::Transform`] when the input cannot be handled (a spatial transform
    /// given a tensor, a crop larger than the image, ...).
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample>;

    /// The transform as `Any`, so [`crate::Compose`] can recognise pairs it can fuse.
    fn as_any(&self) -> &dyn Any;
}

/// The `u8` image of `input`, or a `Transform` error naming `transform` when `ToTensor` has
/// already run.
pub(crate) fn expect_image(input: Sample, transform: &'static str) -> Result<Image> {
    match input {
        Sample::Image(image) => Ok(image),
        Sample::Tensor(_) => Err(crate::error::VisionError::Transform {
            transform,
            message: "works on u8 images; place it before ToTensor".into(),
        }),
    }
}
