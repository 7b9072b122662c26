//! The evaluation preprocessing an exported model expects, written into the exported files
//! (ONNX `metadata_props`, the TorchScript sidecar) so a deployer need not guess it.

/// torchvision's evaluation recipe for an image classifier:
/// `Resize(resize) -> CenterCrop(crop) -> ToTensor() -> Normalize(mean, std)`, on RGB images.
///
/// `Resize(resize)` scales the shorter side to `resize` pixels and the other in proportion
/// (truncated), with bilinear interpolation and antialiasing as torchvision (and PIL) do;
/// `ToTensor` divides `u8` values by 255 into `[0, 1]` and makes the layout CHW.
#[derive(Debug, Clone, PartialEq)]
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
    /// The interpolation of the resize, in torchvision's name.
    pub const INTERPOLATION: &'static str = "bilinear";

    /// The recipe as `(key, value)` pairs, values as JSON text where they are numbers or
    /// lists: `resize_shorter_side` (`"256"`), `resize_interpolation` (`"bilinear"`),
    /// `resize_antialias` (`"true"`), `center_crop` (`"[224, 224]"`, height and width),
    /// `color_order` (`"RGB"`), `input_layout` (`"NCHW"`), `input_scale` (`"1/255"`: `u8`
    /// values to `[0, 1]` before normalising), `mean` and `std` (`"[0.485, ...]"`),
    /// `preprocessing` (the steps in words) and `torchvision` (the same as Python code).
    pub fn metadata(&self) -> Vec<(String, String)> {
        let list = |v: &[f32; 3]| format!("[{}, {}, {}]", v[0], v[1], v[2]);
        let (mean, std) = (list(&self.mean), list(&self.std));
        let entries = [
            ("resize_shorter_side", self.resize.to_string()),
            ("resize_interpolation", Self::INTERPOLATION.to_string()),
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
                    "decode to RGB; resize the shorter side to {} (bilinear, antialiased; the other side in \
                     proportion, truncated); center-crop {}x{}; scale u8 values by 1/255; normalise with mean {mean} \
                     and std {std}; NCHW float32",
                    self.resize, self.crop, self.crop
                ),
            ),
            (
                "torchvision",
                format!(
                    "transforms.Compose([transforms.Resize({}), transforms.CenterCrop({}), transforms.ToTensor(), \
                     transforms.Normalize(mean={mean}, std={std})])",
                    self.resize, self.crop
                ),
            ),
        ];
        entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
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
        assert_eq!(m["resize_interpolation"], "bilinear");
        assert_eq!(m["center_crop"], "[224, 224]");
        assert_eq!(m["mean"], "[0.485, 0.456, 0.406]");
        assert!(m["torchvision"]
            .starts_with("transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)"));
        assert_eq!(m.len(), 11);
    }
}
