//! The evaluation preprocessing an exported model expects, written into the exported files
//! (ONNX `metadata_props`, the TorchScript sidecar) so a deployer need not guess it. The
//! description itself is torchlight-vision's [`EvalPreprocessing`], the type that also builds
//! the transform; [`Preprocessing`] is its older, interpolation-less form.

use torchlight_vision::{EvalPreprocessing, InterpolationMode};

/// The evaluation preprocessing as this crate described it before [`EvalPreprocessing`]:
/// `Resize(resize) -> CenterCrop(crop) -> ToTensor() -> Normalize(mean, std)`, bilinear.
///
/// Kept so code building it field by field goes on compiling; it converts into the
/// [`EvalPreprocessing`] it stands for (`EvalPreprocessing::from`), and its metadata is that
/// type's, key for key. New code uses [`EvalPreprocessing`] (re-exported here), which
/// [`OnnxOptions::with_preprocessing`](crate::OnnxOptions::with_preprocessing) takes as well.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preprocessing {
    /// The shorter side after resizing, e.g. 256 for a 224 crop.
    pub resize: u32,
    /// The side of the square centre crop: the model's input size.
    pub crop: u32,
    /// Per-channel mean subtracted after scaling to `[0, 1]`.
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by.
    pub std: [f32; 3],
}

impl Preprocessing {
    /// The interpolation of the resize, in torchvision's name (`"bilinear"`).
    pub const INTERPOLATION: &'static str = "bilinear";

    /// [`EvalPreprocessing::metadata`] of the preprocessing this stands for.
    pub fn metadata(&self) -> Vec<(String, String)> {
        EvalPreprocessing::from(*self).metadata()
    }
}

impl From<Preprocessing> for EvalPreprocessing {
    /// The same steps, with bilinear interpolation (the only one `Preprocessing` described).
    fn from(p: Preprocessing) -> Self {
        EvalPreprocessing {
            resize: p.resize as usize,
            interpolation: InterpolationMode::Bilinear,
            crop: p.crop as usize,
            mean: p.mean,
            std: p.std,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipe_names_every_step_a_deployer_needs() {
        let p =
            Preprocessing { resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] };
        let m: std::collections::HashMap<String, String> = p.metadata().into_iter().collect();
        assert_eq!(m["resize_shorter_side"], "256");
        assert_eq!(m["resize_interpolation"], Preprocessing::INTERPOLATION);
        assert_eq!(m["center_crop"], "[224, 224]");
        assert_eq!(m["mean"], "[0.485, 0.456, 0.406]");
        assert!(m["torchvision"]
            .starts_with("transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)"));
        assert_eq!(m.len(), 11);
    }

    /// The old form and the vision description it converts to write the same metadata, and
    /// torchvision's preset at 224 is the old CLI's `Preprocessing { resize: 256, crop: 224 }`.
    #[test]
    fn the_old_form_is_the_eval_preprocessing_it_stands_for() {
        for (resize, crop) in [(256, 224), (73, 64), (36, 32), (235, 224)] {
            let old = Preprocessing { resize, crop, mean: [0.5, 0.25, 0.125], std: [0.2, 1.0, 3.5] };
            let new = EvalPreprocessing::from(old);
            assert_eq!(
                (new.resize, new.crop, new.mean, new.std),
                (resize as usize, crop as usize, old.mean, old.std)
            );
            assert_eq!(old.metadata(), new.metadata());
        }
        let old = Preprocessing {
            resize: 256,
            crop: 224,
            mean: torchlight_vision::IMAGENET_MEAN,
            std: torchlight_vision::IMAGENET_STD,
        };
        assert_eq!(EvalPreprocessing::from(old), EvalPreprocessing::classification(224));
    }
}
