//! The `.json` sidecar `torchlight export --format torchscript` writes next to a TorchScript
//! file, read back and checked field by field: it is a text file a deployer may edit.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use torchlight_recipes::{MAX_CLASSES, MAX_IMAGE_SIZE};
use torchlight_vision::{CropMode, EvalPreprocessing, InterpolationMode};

/// The largest `resize_shorter_side`: twice the largest input side (timm's `crop_pct` resizes
/// above the crop; a shorter side of 16K pixels is already a 768 MiB RGB image when square).
const MAX_RESIZE: u64 = 2 * MAX_IMAGE_SIZE as u64;

/// A TorchScript file's sidecar: the classes, the evaluation preprocessing and the decoding
/// settings of the run it was exported from.
#[derive(Debug)]
pub struct Sidecar {
    /// Where it was read from (named in every error about it).
    pub path: PathBuf,
    /// Class names, in the model's output order.
    pub classes: Vec<String>,
    /// Resize, crop and normalisation, from `resize_shorter_side`, `resize_interpolation`,
    /// `center_crop`, `mean` and `std`; sidecars older than those keys get torchvision's
    /// classification preset at `image_size`, which is what they were exported with.
    pub preprocessing: EvalPreprocessing,
    /// The pixel limit of the run it was exported from (absent in older sidecars).
    pub max_image_pixels: Option<u64>,
    /// Whether the run turned images by their EXIF orientation (absent in older sidecars:
    /// they did).
    pub exif_transpose: Option<bool>,
    /// Whether the module outputs class probabilities (`output` = `"probabilities"`, written
    /// by `export --tta hflip`, whose graph averages the softmax of the image and its mirror
    /// image) rather than logits (`"logits"`, or absent).
    pub probabilities: bool,
}

impl Sidecar {
    /// The sidecar of the TorchScript file `model` (`model.pt` -> `model.json`).
    pub fn of(model: &Path) -> Result<Sidecar> {
        let path = model.with_extension("json");
        // Checked before opening: opening a FIFO blocks, and a device may never end.
        if let Ok(meta) = std::fs::metadata(&path) {
            if !meta.is_file() {
                bail!(
                    "{}: the TorchScript file's sidecar is not a regular file (a folder, FIFO or device)",
                    path.display()
                );
            }
        }
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("{}: the TorchScript file's sidecar is needed for class names", path.display())
        })?;
        Sidecar::parse(&path, &text)
    }

    /// Reads the sidecar text `text` of `path`. Every field is checked for its type and range,
    /// and the error names the file and the field.
    pub fn parse(path: &Path, text: &str) -> Result<Sidecar> {
        let value: Value = serde_json::from_str(text).with_context(|| format!("{}", path.display()))?;
        let Value::Object(fields) = value else {
            bail!("{}: expected a JSON object (the sidecar torchlight export writes)", path.display());
        };
        let f = Fields { path, fields: &fields };
        let classes = f.classes()?;
        let image_size = f
            .positive("image_size", u64::from(MAX_IMAGE_SIZE))?
            .ok_or_else(|| f.bad("image_size", "missing (the side of the model's square input)"))?
            as usize;
        let default = EvalPreprocessing::classification(image_size);
        let crop_mode = match f.word("crop_mode")? {
            None | Some("center") => CropMode::Center,
            Some("squash") => CropMode::Squash,
            Some(other) => {
                return Err(
                    f.bad("crop_mode", &format!("\"{other}\" is not supported (\"center\" or \"squash\")"))
                )
            }
        };
        let resize = match crop_mode {
            CropMode::Center => {
                f.positive("resize_shorter_side", MAX_RESIZE)?.map_or(default.resize, |v| v as usize)
            }
            // Both sides to one size: `resize_size` is `[s, s]`.
            CropMode::Squash => {
                let want = "a list [s, s] of two equal positive whole numbers (crop_mode \"squash\")";
                let value = fields
                    .get("resize_size")
                    .ok_or_else(|| f.bad("resize_size", &format!("missing: {want}")))?;
                match value.as_array().map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()).as_deref() {
                    Some([Some(h), Some(w)]) if h == w && *h > 0 && *h <= MAX_RESIZE => *h as usize,
                    _ => return Err(f.bad("resize_size", &format!("{value} is not {want}"))),
                }
            }
        };
        let interpolation = match f.word("resize_interpolation")? {
            None => default.interpolation,
            Some(mode) => InterpolationMode::from_name(mode).ok_or_else(|| {
                let names: Vec<String> =
                    InterpolationMode::ALL.iter().map(|m| format!("\"{}\"", m.name())).collect();
                f.bad(
                    "resize_interpolation",
                    &format!("\"{mode}\" is not supported (one of {})", names.join(", ")),
                )
            })?,
        };
        if let Some(value) = fields.get("resize_antialias") {
            if value != &Value::Bool(true) {
                return Err(f.bad("resize_antialias", &format!("{value} is not supported (only true)")));
            }
        }
        if let Some(value) = fields.get("center_crop") {
            let want = serde_json::json!([image_size, image_size]);
            if value != &want {
                return Err(
                    f.bad("center_crop", &format!("{value} is not [image_size, image_size] = {want}"))
                );
            }
        }
        for (field, want) in [("color_order", "RGB"), ("input_layout", "NCHW"), ("input_scale", "1/255")] {
            if let Some(got) = f.word(field)? {
                if got != want {
                    return Err(f.bad(field, &format!("\"{got}\" is not supported (only \"{want}\")")));
                }
            }
        }
        let mean = f.triple("mean", false)?.unwrap_or(default.mean);
        let std = f.triple("std", true)?.unwrap_or(default.std);
        let max_image_pixels = match fields.get("max_image_pixels") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64().ok_or_else(|| f.bad("max_image_pixels", &format!("{v} is not a whole number")))?,
            ),
        };
        let exif_transpose = match fields.get("exif_transpose") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_bool().ok_or_else(|| f.bad("exif_transpose", &format!("{v} is not true or false")))?,
            ),
        };
        let probabilities = match f.word("output")? {
            None | Some("logits") => false,
            Some("probabilities") => true,
            Some(other) => {
                return Err(f.bad("output", &format!("\"{other}\" is not \"logits\" or \"probabilities\"")))
            }
        };
        let preprocessing = EvalPreprocessing { resize, interpolation, mean, std, crop_mode, ..default };
        Ok(Sidecar {
            path: path.to_path_buf(),
            classes,
            preprocessing,
            max_image_pixels,
            exif_transpose,
            probabilities,
        })
    }

    /// The model's input side (`image_size`, the centre crop).
    pub fn image_size(&self) -> usize {
        self.preprocessing.crop
    }
}

/// The sidecar's fields, with errors that name the file and the field.
struct Fields<'a> {
    path: &'a Path,
    fields: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn bad(&self, field: &str, reason: &str) -> anyhow::Error {
        anyhow::anyhow!("{}: field `{field}`: {reason}", self.path.display())
    }

    fn classes(&self) -> Result<Vec<String>> {
        let Some(value) = self.fields.get("classes") else {
            return Err(self.bad("classes", "missing (the class names, in the model's output order)"));
        };
        let Some(list) = value.as_array() else {
            return Err(self.bad("classes", &format!("expected a list of class names, got {value}")));
        };
        if list.is_empty() || list.len() > MAX_CLASSES {
            return Err(self.bad("classes", &format!("{} names; expected 1 to {MAX_CLASSES}", list.len())));
        }
        list.iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.bad("classes", &format!("entry {i} is {v}, not a name")))
            })
            .collect()
    }

    /// A whole number in `1..=max`, if present.
    fn positive(&self, field: &str, max: u64) -> Result<Option<u64>> {
        let Some(value) = self.fields.get(field) else { return Ok(None) };
        match value.as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.bad(field, &format!("{value} is not a whole number from 1 to {max}"))),
        }
    }

    /// A string, if present.
    fn word(&self, field: &str) -> Result<Option<&str>> {
        let Some(value) = self.fields.get(field) else { return Ok(None) };
        value.as_str().map(Some).ok_or_else(|| self.bad(field, &format!("{value} is not a string")))
    }

    /// Three finite float32 numbers (positive ones when `positive`), if present.
    fn triple(&self, field: &str, positive: bool) -> Result<Option<[f32; 3]>> {
        let Some(value) = self.fields.get(field) else { return Ok(None) };
        let what = if positive { "positive finite numbers" } else { "finite numbers" };
        let numbers: Option<Vec<f32>> = value
            .as_array()
            .map(|list| list.iter().map(|v| v.as_f64().map(|x| x as f32)).collect())
            .unwrap_or(None);
        match numbers.as_deref() {
            Some(&[a, b, c]) if [a, b, c].iter().all(|x| x.is_finite() && (!positive || *x > 0.0)) => {
                Ok(Some([a, b, c]))
            }
            _ => Err(self.bad(field, &format!("{value} is not 3 {what} (one per RGB channel)"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Sidecar> {
        Sidecar::parse(Path::new("m.json"), text)
    }

    /// A FIFO beside the TorchScript file is refused, not opened (which would block).
    #[cfg(unix)]
    #[test]
    fn a_fifo_sidecar_is_refused() {
        let dir = std::env::temp_dir().join(format!("tl-cli-sidecar-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("m.json");
        let _ = std::fs::remove_file(&json);
        assert!(std::process::Command::new("mkfifo").arg(&json).status().unwrap().success());
        let err = Sidecar::of(&dir.join("m.pt")).unwrap_err().to_string();
        assert!(err.contains("m.json") && err.contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_old_sidecar_gets_the_classification_preset() {
        let s = parse(r#"{"classes": ["a", "b"], "image_size": 32}"#).unwrap();
        assert_eq!(s.preprocessing, EvalPreprocessing::classification(32));
        assert_eq!((s.max_image_pixels, s.exif_transpose, s.probabilities), (None, None, false));
        let s = parse(r#"{"classes": ["a"], "image_size": 32, "output": "probabilities"}"#).unwrap();
        assert!(s.probabilities, "export --tta hflip's module outputs probabilities");
        assert!(!parse(r#"{"classes": ["a"], "image_size": 32, "output": "logits"}"#).unwrap().probabilities);
    }

    #[test]
    fn the_preprocessing_fields_are_used() {
        let s = parse(
            r#"{"classes": ["a"], "image_size": 32, "resize_shorter_side": 40, "center_crop": [32, 32],
                "mean": [0.5, 0.25, 0], "std": [1, 2, 0.5], "max_image_pixels": 9, "exif_transpose": false,
                "resize_interpolation": "bicubic"}"#,
        )
        .unwrap();
        let want = EvalPreprocessing {
            resize: 40,
            interpolation: InterpolationMode::Bicubic,
            mean: [0.5, 0.25, 0.0],
            std: [1.0, 2.0, 0.5],
            ..EvalPreprocessing::classification(32)
        };
        assert_eq!(s.preprocessing, want);
        assert_eq!((s.max_image_pixels, s.exif_transpose), (Some(9), Some(false)));
        // timm's squash crop, as export writes it.
        let squash = EvalPreprocessing { crop_mode: CropMode::Squash, ..want };
        let mut json = serde_json::json!({"classes": ["a"], "image_size": 32});
        for (key, value) in squash.metadata() {
            json[&key] = serde_json::from_str(&value).unwrap_or(Value::String(value));
        }
        assert_eq!(parse(&json.to_string()).unwrap().preprocessing, squash);
        json["resize_size"] = serde_json::json!([40, 41]);
        let e = parse(&json.to_string()).unwrap_err().to_string();
        assert!(e.contains("`resize_size`: [40,41] is not"), "{e}");
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (r#"{"image_size": 32}"#, "`classes`: missing"),
            (r#"{"classes": [], "image_size": 32}"#, "`classes`"),
            (r#"{"classes": ["a", 3], "image_size": 32}"#, "`classes`: entry 1"),
            (r#"{"classes": ["a"]}"#, "`image_size`: missing"),
            (r#"{"classes": ["a"], "image_size": 0}"#, "`image_size`: 0 is not a whole number"),
            (r#"{"classes": ["a"], "image_size": "32"}"#, "`image_size`"),
            (r#"{"classes": ["a"], "image_size": 32, "resize_shorter_side": 0}"#, "`resize_shorter_side`"),
            (r#"{"classes": ["a"], "image_size": 32, "std": [0, 0, 0]}"#, "`std`: [0,0,0] is not 3 positive"),
            (r#"{"classes": ["a"], "image_size": 32, "std": [1, 1]}"#, "`std`"),
            (r#"{"classes": ["a"], "image_size": 32, "mean": "0.5"}"#, "`mean`: \"0.5\" is not 3 finite"),
            (r#"{"classes": ["a"], "image_size": 32, "mean": [1e39, 0, 0]}"#, "`mean`"),
            (r#"{"classes": ["a"], "image_size": 32, "center_crop": [40, 40]}"#, "`center_crop`"),
            (
                r#"{"classes": ["a"], "image_size": 32, "resize_interpolation": "nearest-exact"}"#,
                "`resize_interpolation`: \"nearest-exact\" is not supported (one of \"nearest\", \"bilinear\"",
            ),
            (r#"{"classes": ["a"], "image_size": 32, "color_order": "BGR"}"#, "`color_order`"),
            (r#"{"classes": ["a"], "image_size": 32, "exif_transpose": "yes"}"#, "`exif_transpose`"),
            (r#"{"classes": ["a"], "image_size": 32, "max_image_pixels": -1}"#, "`max_image_pixels`"),
            (r#"{"classes": ["a"], "image_size": 32, "output": "probs"}"#, "`output`: \"probs\" is not"),
            (r#"[1]"#, "expected a JSON object"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.starts_with("m.json: ") && err.contains(want), "{text}: {err}");
        }
    }
}
