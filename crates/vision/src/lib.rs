//! `torchlight-vision`: ImageFolder, image decoding and torchvision-style transforms on `u8`
//! images, matched against torchvision.
//!
//! Images are decoded to RGB `u8` ([`Image`], HWC) and stay `u8` through the spatial and
//! colour transforms, as PIL images do in torchvision; [`ToTensor`] turns them into float CHW
//! ([`TensorImage`]) and [`Normalize`] standardises them. [`ImageFolder`] is a
//! `torchlight_data::Dataset` yielding `(Array, class_index)` for the data crate's DataLoader.
//! [`Transform`] says what a step provides (and how one of your own takes part in crop-box
//! decoding and fusion); [`EvalPreprocessing`] describes a classifier's evaluation transform.
//!
//! ```no_run
//! use torchlight_vision::{
//!     Compose, ImageFolder, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToTensor,
//!     IMAGENET_MEAN, IMAGENET_STD,
//! };
//! let train = ImageFolder::new("data/train")?.with_transform(
//!     Compose::default()
//!         .then(RandomResizedCrop::new(224))
//!         .then(RandomHorizontalFlip::default())
//!         .then(ToTensor)
//!         .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
//! );
//! # Ok::<(), torchlight_vision::VisionError>(())
//! ```

mod augmix;
mod auto_augment;
mod bmp;
mod center_crop;
mod chw;
mod color_jitter;
mod compose;
mod crop_box;
mod crop_decode;
mod decode;
mod decode_options;
mod error;
mod eval_preprocessing;
mod five_crop;
mod flip;
mod gaussian_blur;
mod geometry;
mod gif;
mod grayscale;
mod image;
mod image_folder;
mod jpeg_segments;
#[cfg(feature = "libjpeg-turbo")]
mod libjpeg;
mod mean_std;
mod normalize;
mod orientation;
mod perspective;
mod point_ops;
mod py_random;
mod random_affine;
mod random_apply;
mod random_crop;
mod random_erasing;
mod random_resized_crop;
mod resample;
mod resize;
mod tiff;
mod to_tensor;
pub mod torch_draws;
mod torch_rng;
mod transform;

pub use augmix::{apply_op_tensor, sample_dirichlet, AugMix};
pub use auto_augment::{
    apply_op, apply_op_with, torch_linspace_f32, AugmentOp, AutoAugment, AutoAugmentPolicy, RandAugment,
    TrivialAugmentWide, AUGMENT_OPS,
};
pub use center_crop::CenterCrop;
pub use color_jitter::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, adjust_sharpness, ColorJitter,
};
pub use compose::Compose;
pub use crop_box::CropBox;
pub use crop_decode::decode_bytes_crop;
pub use decode::{
    decode_bytes, decode_bytes_with, decode_file, decode_file_with, image_dimensions,
    image_dimensions_of_bytes, jpeg_decoder, IMG_EXTENSIONS,
};
pub use decode_options::{DecodeOptions, PixelCheck, DEFAULT_MAX_IMAGE_PIXELS, PIL_MAX_IMAGE_PIXELS};
pub use error::{Result, VisionError};
pub use eval_preprocessing::{CropMode, EvalPreprocessing};
pub use five_crop::{CropView, FiveCrop, TenCrop, FIVE_CROP_NAMES};
pub use flip::{hflip, vflip, RandomHorizontalFlip, RandomVerticalFlip};
pub use gaussian_blur::{gaussian_blur, GaussianBlur};
pub use geometry::{
    affine, affine_nearest, affine_transform, affine_with, inverse_affine_matrix, rotate, rotate_with,
};
pub use grayscale::{Grayscale, RandomGrayscale};
pub use image::Image;
pub use image_folder::{ImageFolder, SplitFolders};
pub use mean_std::{dataset_mean_std, MeanStd};
pub use normalize::{Normalize, IMAGENET_MEAN, IMAGENET_STD};
pub use perspective::{perspective, perspective_coeffs, perspective_transform, RandomPerspective};
pub use point_ops::{autocontrast, equalize, invert, posterize, solarize};
pub use py_random::{py_choice_index, py_getrandbits, py_randbelow, py_random, py_shuffle, PyRandom};
pub use random_affine::{AffineParams, RandomAffine, RandomRotation};
pub use random_apply::{RandomApply, RandomChoice, RandomOrder};
pub use random_crop::{pad, PaddingMode, RandomCrop};
pub use random_erasing::{EraseValue, ErasingParams, RandomErasing};
pub use random_resized_crop::RandomResizedCrop;
pub use resize::{InterpolationMode, Resize, ResizeSize};
pub use to_tensor::ToTensor;
pub use torch_rng::TorchRng;
pub use torchlight_data::TorchGenerator;
pub use transform::{LeadingCrop, Sample, TensorImage, Transform};

/// The resampling kernels, exposed so tests can run each against the scalar reference; not a
/// stable API (the transforms pick the kernel themselves).
#[doc(hidden)]
pub mod __resample {
    pub use crate::resample::{resize_bilinear_with, resize_with, Kernel, Rect};
}
