//! The `Transform` trait and `Sample`, the value that flows through a pipeline: a `u8`
//! [`Image`] until `ToTensor`, a float [`TensorImage`] after.

use crate::crop_box::CropBox;
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
/// Transforms are shared by loader threads, hence `Send + Sync`. This trait is the whole
/// contract between a transform and the rest of the crate: [`crate::Compose`] and
/// [`crate::ImageFolder`] learn what a step can do from these methods alone, so a transform of
/// your own takes part in everything a built-in one does.
///
/// # What a transform provides
///
/// Required:
/// - [`apply`](Transform::apply): the transform itself, on one [`Sample`].
/// - [`as_any`](Transform::as_any): `self` (the body is always `self`), so a step's
///   [`fuse`](Transform::fuse) can recognise the step after it, and users can inspect the
///   steps of a [`crate::Compose`].
///
/// Provided, opting out by default:
/// - [`leading_crop`](Transform::leading_crop): `Some(self)` when the transform starts by
///   keeping a box of the image whose position follows from the image's size and the random
///   draws alone ([`LeadingCrop`]: the box, then what the transform does with its pixels).
///   `ImageFolder` then reads the size from a JPEG's header and decodes only the box.
///   Built-in: [`crate::RandomResizedCrop`], [`crate::CenterCrop`], and a `Compose` whose
///   first step has one.
/// - [`fuse`](Transform::fuse): a cheaper transform doing this step and the next in one, which
///   `Compose` runs instead of the pair. Built-in: `Resize` with a following `CenterCrop` (only
///   the kept pixels are resampled), `ToTensor` with a following `Normalize` (one lookup-table
///   pass).
///
/// # Invariants
///
/// A transform of your own must keep these, or crop-box decoding and fusion change its results
/// (`tests/it/contract.rs` checks 2 and 3 for every built-in transform):
/// 1. A random transform draws only from the `rng` it is given, which the DataLoader seeds per
///    sample from (seed, epoch, index), so augmentation does not depend on the worker count.
/// 2. A fused transform gives the same output, bit for bit, and makes the same draws as the
///    two steps it replaces, on every input (errors included).
/// 3. For a [`LeadingCrop`], on every image of `height x width`, drawing
///    `b = crop_box(height, width, rng)` and then `apply_cropped(image.crop(b), rng)` gives the
///    same output bit for bit, and leaves `rng` in the same state, as `apply(image, rng)`; the
///    box is inside the image and not empty.
pub trait Transform: Debug + Send + Sync {
    /// Transforms one sample.
    ///
    /// # Errors
    /// [`crate::VisionError::Transform`] when the input cannot be handled (a spatial transform
    /// given a tensor, a crop larger than the image, ...).
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample>;

    /// The transform as `Any` (`self`), so the step before it can recognise it in
    /// [`Transform::fuse`] (`next.as_any().downcast_ref::<CenterCrop>()`).
    fn as_any(&self) -> &dyn Any;

    /// The box this transform starts by keeping, when it follows from the image size and the
    /// random draws alone: return `Some(self)` from a type implementing [`LeadingCrop`].
    /// `None` (the default) decodes the whole image before [`Transform::apply`].
    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        None
    }

    /// This step and `next` as one transform, when that is cheaper; `None` (the default) runs
    /// them one after the other. [`crate::Compose`] offers each step the one after it, then
    /// offers the fused result the step after that. The fused transform must equal `self`
    /// then `next` bit for bit, with the same draws (and, to keep crop-box decoding, offer the
    /// same [`Transform::leading_crop`] as `self`).
    fn fuse(&self, next: &dyn Transform) -> Option<Box<dyn Transform>> {
        let _ = next;
        None
    }

    /// The transform with torchvision's random draws, made from `g` as torch's CPU generator
    /// makes them: with a [`crate::TorchGenerator`] seeded as `torch.manual_seed(s)`, the
    /// output torchvision's transform gives after that call (what `torchlight augment
    /// --torch-seed` shows). A transform that draws nothing gives `Some(apply(..))`.
    ///
    /// `None` (the default): the transform has no such path; [`crate::Compose::apply_torch`]
    /// then names it. Built-in: every random transform (RandomResizedCrop, RandomCrop, the
    /// flips, ColorJitter, RandomGrayscale, RandomRotation, RandomAffine, RandomPerspective,
    /// GaussianBlur, RandomApply, AutoAugment, TrivialAugmentWide, RandAugment, AugMix,
    /// RandomErasing) and the deterministic ones (Resize, CenterCrop, Grayscale, ToTensor,
    /// Normalize), but not RandomChoice and RandomOrder, which torchvision draws from Python's
    /// `random` (their `apply_with` takes a [`crate::PyRandom`] beside torch's generator).
    fn apply_torch(&self, input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        let _ = (input, g);
        None
    }

    /// [`Transform::apply_torch`] with torch's whole generator state ([`crate::TorchRng`]: the
    /// stream and the spare normal torch keeps between calls), for a transform whose draws use
    /// the spare (AugMix's Dirichlet weights). The default runs `apply_torch` on the stream.
    fn apply_torch_rng(&self, input: Sample, g: &mut crate::TorchRng) -> Option<Result<Sample>> {
        self.apply_torch(input, g)
    }
}

/// [`Transform::apply`] of a transform that draws nothing, for its [`Transform::apply_torch`].
pub(crate) fn apply_drawing_nothing(t: &dyn Transform, input: Sample) -> Option<Result<Sample>> {
    Some(t.apply(input, &mut torchlight_base::seed::rng_from_seed(0)))
}

/// A transform that starts by keeping a box of the image whose position follows from the
/// image's size and the random draws alone, split into the box and the rest, so a dataset can
/// decode only the box (see [`Transform::leading_crop`] and invariant 3 of [`Transform`]).
pub trait LeadingCrop: Send + Sync {
    /// The box kept of an image of `height x width`, drawn from `rng` with exactly the calls
    /// [`Transform::apply`] makes before it crops; inside the image and not empty.
    fn crop_box(&self, height: usize, width: usize, rng: &mut Rng) -> CropBox;

    /// What the transform gives for the pixels of the box [`LeadingCrop::crop_box`] returned
    /// (`region` is exactly that box), making the draws `apply` makes after choosing it.
    ///
    /// # Errors
    /// As [`Transform::apply`].
    fn apply_cropped(&self, region: Image, rng: &mut Rng) -> Result<Sample>;
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
