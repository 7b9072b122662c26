//! `EvalPreprocessing`: the one description of an image classifier's evaluation
//! preprocessing (resize, centre crop, normalisation), its transform and its metadata.

use crate::center_crop::CenterCrop;
use crate::compose::Compose;
use crate::error::{Result, VisionError};
use crate::normalize::{Normalize, IMAGENET_MEAN, IMAGENET_STD};
use crate::resize::{InterpolationMode, Resize};
use crate::to_tensor::ToTensor;

/// How a classifier's evaluation inputs are made from an RGB image:
/// `Resize(resize) -> CenterCrop(crop) -> ToTensor() -> Normalize(mean, std)`, torchvision's
/// `ImageClassification` preset (what `weights.transforms()` returns) and timm's
/// `transforms_imagenet_eval` with its default `crop_mode="center"`.
///
/// `Resize(resize)` scales the shorter side to `resize` pixels and the other in proportion
/// (truncated) with `interpolation` (bilinear by default; antialiased, as torchvision and PIL
/// do);
/// `CenterCrop(crop)` keeps the central `crop x crop` (zero-padded where the image is
/// smaller); `ToTensor` divides `u8` values by 255 into `[0, 1]` in CHW layout; `Normalize`
/// subtracts `mean` and divides by `std` per channel. [`EvalPreprocessing::transform`] builds
/// that pipeline, [`EvalPreprocessing::metadata`] describes it for a deployer (what an exported
/// model carries).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalPreprocessing {
    /// The shorter side after resizing, e.g. 256 for a 224 crop.
    pub resize: usize,
    /// How the resize samples the image.
    pub interpolation: InterpolationMode,
    /// The side of the square centre crop: the model's input size.
    pub crop: usize,
    /// Per-channel RGB mean subtracted after scaling to `[0, 1]`.
    pub mean: [f32; 3],
    /// Per-channel RGB standard deviation divided by.
    pub std: [f32; 3],
    /// How the resize treats the aspect ratio: timm's `crop_mode`.
    pub crop_mode: CropMode,
}

/// timm's evaluation `crop_mode` (`transforms_imagenet_eval`): what `resize` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CropMode {
    /// `center`: the shorter side to `resize`, the other in proportion (torchvision's preset and
    /// timm's default), then the centre crop.
    #[default]
    Center,
    /// `squash`: both sides to `resize` (`Resize((resize, resize))`, the aspect ratio not kept),
    /// then the centre crop.
    Squash,
}

impl CropMode {
    /// timm's name: `center`, `squash`.
    pub fn name(self) -> &'static str {
        match self {
            CropMode::Center => "center",
            CropMode::Squash => "squash",
        }
    }
}

impl EvalPreprocessing {
    /// torchvision's classification preset at `image_size`: resize the shorter side to
    /// `image_size * 256 / 224` (integer division: 256 for 224, as torchvision's reference
    /// recipes), bilinear, centre crop `image_size`, ImageNet's mean and std.
    pub fn classification(image_size: usize) -> Self {
        EvalPreprocessing {
            resize: image_size * 256 / 224,
            interpolation: InterpolationMode::Bilinear,
            crop: image_size,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
            crop_mode: CropMode::Center,
        }
    }

    /// timm's evaluation transform for a model whose `pretrained_cfg` has `input_size`
    /// `(3, image_size, image_size)` and `crop_pct`: resize the shorter side to
    /// `floor(image_size / crop_pct)` (timm's `scale_size`, in `f64` as Python computes it:
    /// 256 for 224 at 0.875, 235 at 0.95), centre crop `image_size`; bilinear and ImageNet's
    /// mean and std, `transforms_imagenet_eval`'s defaults (set the fields for a model's own).
    ///
    /// # Errors
    /// [`VisionError::Config`] when `image_size` is 0 (field `image_size`), or `crop_pct` is not
    /// a positive finite number or leaves no pixel to resize to (field `crop_pct`).
    pub fn from_crop_pct(image_size: usize, crop_pct: f64) -> Result<Self> {
        if image_size == 0 {
            return Err(VisionError::Config { field: "image_size", reason: "must be positive".into() });
        }
        if !(crop_pct.is_finite() && crop_pct > 0.0) {
            return Err(VisionError::Config {
                field: "crop_pct",
                reason: format!("{crop_pct} is not a positive finite fraction"),
            });
        }
        let resize = (image_size as f64 / crop_pct).floor();
        if resize < 1.0 || resize > usize::MAX as f64 {
            return Err(VisionError::Config {
                field: "crop_pct",
                reason: format!("{crop_pct} makes the resize of a {image_size} crop {resize} pixels"),
            });
        }
        Ok(EvalPreprocessing { resize: resize as usize, ..Self::classification(image_size) })
    }

    /// The transform: `Resize(resize)` (`Resize((resize, resize))` under [`CropMode::Squash`]),
    /// `CenterCrop(crop)`, `ToTensor`, `Normalize(mean, std)`
    /// as a [`Compose`], which runs it as two fused steps (resize and crop, then the
    /// normalised tensor). Its output is a float `[3, crop, crop]` tensor.
    ///
    /// # Panics
    /// If `resize` or `crop` is 0, or a `std` is not positive (as `Resize`, `CenterCrop` and
    /// `Normalize` refuse them).
    pub fn transform(&self) -> Compose {
        let resize = match self.crop_mode {
            CropMode::Center => Resize::new(self.resize),
            CropMode::Squash => Resize::exact(self.resize, self.resize),
        };
        Compose::default()
            .then(resize.with_interpolation(self.interpolation))
            .then(CenterCrop::new(self.crop))
            .then(ToTensor)
            .then(Normalize::new(&self.mean, &self.std))
    }

    /// The preprocessing as `(key, value)` pairs for a deployer (what `torchlight-export`
    /// writes into ONNX `metadata_props` and the TorchScript sidecar), values as JSON text where
    /// they are numbers or lists: `resize_shorter_side` (`"256"`), `resize_interpolation`
    /// (`"bilinear"`, [`InterpolationMode::name`]), `resize_antialias` (`"true"`), `center_crop` (`"[224, 224]"`, height and
    /// width), `color_order` (`"RGB"`), `input_layout` (`"NCHW"`), `input_scale` (`"1/255"`:
    /// `u8` values to `[0, 1]` before normalising), `mean` and `std` (`"[0.485, ...]"`),
    /// `preprocessing` (the steps in words) and `torchvision` (the same as Python code).
    pub fn metadata(&self) -> Vec<(String, String)> {
        let list = |v: &[f32; 3]| format!("[{}, {}, {}]", v[0], v[1], v[2]);
        let (mean, std) = (list(&self.mean), list(&self.std));
        let interpolation = self.interpolation.name();
        // torchvision's Resize defaults to bilinear; another mode is named in the code.
        let size_code = match self.crop_mode {
            CropMode::Center => self.resize.to_string(),
            CropMode::Squash => format!("({0}, {0})", self.resize),
        };
        let resize_code = match self.interpolation {
            InterpolationMode::Bilinear => format!("transforms.Resize({size_code})"),
            mode => {
                format!("transforms.Resize({size_code}, interpolation=transforms.{})", mode.torchvision())
            }
        };
        // PIL's nearest maps coordinates: there is no filter to widen.
        let sampling = match self.interpolation {
            InterpolationMode::Nearest => interpolation.to_string(),
            _ => format!("{interpolation}, antialiased"),
        };
        let (resize_entry, resize_words) = match self.crop_mode {
            CropMode::Center => (
                ("resize_shorter_side", self.resize.to_string()),
                format!(
                    "resize the shorter side to {} ({sampling}; the other side in proportion, truncated)",
                    self.resize
                ),
            ),
            CropMode::Squash => (
                ("resize_size", format!("[{0}, {0}]", self.resize)),
                format!(
                    "resize to {0}x{0} ({sampling}; the aspect ratio not kept: timm's crop_mode \"squash\")",
                    self.resize
                ),
            ),
        };
        let mut entries = vec![
            resize_entry,
            ("resize_interpolation", interpolation.to_string()),
            ("resize_antialias", "true".to_string()),
            ("center_crop", format!("[{}, {}]", self.crop, self.crop)),
            ("color_order", "RGB".to_string()),
            ("input_layout", "NCHW".to_string()),
            ("input_scale", "1/255".to_string()),
            ("mean", mean.clone()),
            ("std", std.clone()),
            (
                "preprocessing",
                format!(
                    "decode to RGB; {resize_words}; center-crop {}x{}; scale u8 values by 1/255; normalise with mean \
                     {mean} and std {std}; NCHW float32",
                    self.crop, self.crop
                ),
            ),
            (
                "torchvision",
                format!(
                    "transforms.Compose([{resize_code}, transforms.CenterCrop({}), transforms.ToTensor(), \
                     transforms.Normalize(mean={mean}, std={std})])",
                    self.crop
                ),
            ),
        ];
        if self.crop_mode != CropMode::Center {
            entries.insert(1, ("crop_mode", self.crop_mode.name().to_string()));
        }
        entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key and value, in order, exactly as `torchlight-export` wrote them before this
    /// type existed (its `Preprocessing::metadata`).
    #[test]
    fn the_metadata_is_what_export_always_wrote() {
        let got = EvalPreprocessing::classification(224).metadata();
        let want = [
            ("resize_shorter_side", "256"),
            ("resize_interpolation", "bilinear"),
            ("resize_antialias", "true"),
            ("center_crop", "[224, 224]"),
            ("color_order", "RGB"),
            ("input_layout", "NCHW"),
            ("input_scale", "1/255"),
            ("mean", "[0.485, 0.456, 0.406]"),
            ("std", "[0.229, 0.224, 0.225]"),
            (
                "preprocessing",
                "decode to RGB; resize the shorter side to 256 (bilinear, antialiased; the other side in \
                 proportion, truncated); center-crop 224x224; scale u8 values by 1/255; normalise with mean \
                 [0.485, 0.456, 0.406] and std [0.229, 0.224, 0.225]; NCHW float32",
            ),
            (
                "torchvision",
                "transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), \
                 transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])",
            ),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn another_interpolation_is_named_in_the_metadata_and_the_code() {
        let p = EvalPreprocessing {
            interpolation: InterpolationMode::Bicubic,
            ..EvalPreprocessing::classification(224)
        };
        let m: std::collections::HashMap<_, _> = p.metadata().into_iter().collect();
        assert_eq!(m["resize_interpolation"], "bicubic");
        assert!(m["preprocessing"].contains("(bicubic, antialiased;"), "{}", m["preprocessing"]);
        assert!(
            m["torchvision"].starts_with(
                "transforms.Compose([transforms.Resize(256, interpolation=transforms.InterpolationMode.BICUBIC), "
            ),
            "{}",
            m["torchvision"]
        );
        let nearest = EvalPreprocessing { interpolation: InterpolationMode::Nearest, ..p }.metadata();
        assert!(nearest[9].1.contains("(nearest; the other side"), "{}", nearest[9].1);
    }

    /// timm's `squash`: both sides resized, said in the metadata (`crop_mode`, `resize_size`
    /// in place of `resize_shorter_side`) and the code; the transform is `Resize((s, s))`.
    #[test]
    fn squash_resizes_both_sides_and_says_so() {
        let p = EvalPreprocessing {
            resize: 42,
            crop_mode: CropMode::Squash,
            ..EvalPreprocessing::classification(40)
        };
        let m: std::collections::HashMap<_, _> = p.metadata().into_iter().collect();
        assert_eq!((m["crop_mode"].as_str(), m["resize_size"].as_str()), ("squash", "[42, 42]"));
        assert!(!m.contains_key("resize_shorter_side"));
        assert!(
            m["torchvision"].starts_with("transforms.Compose([transforms.Resize((42, 42)), "),
            "{}",
            m["torchvision"]
        );
        let image = crate::Image::new(60, 30, 3, (0..60 * 30 * 3).map(|i| (i % 251) as u8).collect());
        let out = crate::Transform::apply(
            &p.transform(),
            crate::Sample::Image(image),
            &mut torchlight_base::seed::rng_from_seed(0),
        )
        .unwrap()
        .into_tensor()
        .unwrap();
        assert_eq!((out.height, out.width), (40, 40));
    }
}
