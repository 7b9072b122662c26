//! Test-time augmentation (`torchlight eval --tta`, `predict --tta`): an image classifier run on
//! several views of each image, made from its evaluation transform by torchvision's own
//! transforms, and the **softmax probabilities averaged** over the views (not the logits).
//!
//! The views ([`Tta::views`]), for an evaluation transform `Resize(R) -> CenterCrop(C) ->
//! ToTensor -> Normalize` ([`EvalPreprocessing`]):
//! - `hflip` (2 views): the evaluation transform's output, and that output flipped left to right
//!   (`RandomHorizontalFlip(p=1.0)` after it).
//! - `five_crop` (5): `Resize(R) -> FiveCrop(C)` in place of `Resize(R) -> CenterCrop(C)`, as
//!   torchvision's `FiveCrop` docs show it: the four corners and the centre of the resized
//!   image (the centre view is the evaluation transform's).
//! - `ten_crop` (10): `Resize(R) -> TenCrop(C)`: those five and the five of the resized image
//!   flipped left to right.
//! - `multi_scale` (3): the evaluation transform with the resize side at `C` (the whole centre
//!   square, crop_pct 1), at `R`, and at `R * 256 / 224` (one more of torchvision's
//!   crop-to-resize steps, crop_pct 0.875 of `R`), duplicates dropped; the crop stays `C`, so
//!   every view is the model's input size (a ViT's too).
//!
//! Each view is evaluated over the whole folder through the recipe's loader and the Trainer's
//! evaluation loop, as `torchlight eval` evaluates the evaluation transform alone.

use super::data::{loader, Split};
use super::evaluate::evaluate_with_logits;
use crate::config::TrainConfig;
use crate::error::Result;
use std::path::Path;
use std::sync::Arc;
use tch::{Device, Kind, Tensor};
use torchlight_data::Subset;
use torchlight_nn::Module;
use torchlight_tensor::seed::rng_from_seed;
use torchlight_train::{ClassificationMetrics, MetricsSummary, Progress, TrainError};
use torchlight_vision::{
    Compose, CropMode, EvalPreprocessing, FiveCrop, Image, ImageFolder, Normalize, RandomHorizontalFlip,
    Resize, Sample, TenCrop, ToTensor, Transform, VisionError, FIVE_CROP_NAMES,
};

/// Which views test-time augmentation averages over (the module docs define each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tta {
    /// The evaluation transform and its horizontal flip.
    HFlip,
    /// torchvision's `FiveCrop` of the resized image.
    FiveCrop,
    /// torchvision's `TenCrop` of the resized image (the five and those of its mirror image).
    TenCrop,
    /// The evaluation transform at three resize sides around the crop.
    MultiScale,
}

/// The names `--tta` takes, in [`Tta`]'s order.
pub const TTA_NAMES: [&str; 4] = ["hflip", "five_crop", "ten_crop", "multi_scale"];

/// What is averaged, in the words `eval` and `predict` report it with.
pub const TTA_AVERAGES: &str = "softmax probabilities";

impl Tta {
    /// Its `--tta` name.
    pub fn name(self) -> &'static str {
        TTA_NAMES[self as usize]
    }

    /// Parses a `--tta` name.
    ///
    /// # Errors
    /// A message listing the names when `name` is none of them.
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name {
            "hflip" => Ok(Tta::HFlip),
            "five_crop" => Ok(Tta::FiveCrop),
            "ten_crop" => Ok(Tta::TenCrop),
            "multi_scale" => Ok(Tta::MultiScale),
            _ => Err(format!("unknown test-time augmentation `{name}`: use one of {}", TTA_NAMES.join(", "))),
        }
    }

    /// The views of `preprocessing` this augmentation averages over, each a transform from a
    /// decoded RGB image to the model's normalised `[3, C, C]` input.
    ///
    /// # Errors
    /// For `five_crop` and `ten_crop`, [`VisionError::Transform`] when the resize side is
    /// smaller than the crop (a `crop_pct` above 1): `FiveCrop` does not pad as `CenterCrop`
    /// does.
    pub fn views(self, preprocessing: &EvalPreprocessing) -> Result<Vec<TtaView>> {
        let p = preprocessing;
        let view = |name: String, is_eval: bool, transform: Compose| TtaView { name, is_eval, transform };
        Ok(match self {
            Tta::HFlip => vec![
                view("eval".into(), true, p.transform()),
                view("hflip".into(), false, p.transform().then(RandomHorizontalFlip::new(1.0))),
            ],
            Tta::FiveCrop | Tta::TenCrop => {
                let transform = if self == Tta::FiveCrop { "FiveCrop" } else { "TenCrop" };
                if p.resize < p.crop {
                    return Err(VisionError::Transform {
                        transform,
                        message: format!(
                            "the evaluation resize {} is smaller than the {} crop (a crop_pct above 1); it does not \
                             pad as CenterCrop does",
                            p.resize, p.crop
                        ),
                    }
                    .into());
                }
                let ten = TenCrop::new(p.crop);
                let (names, crops): (Vec<String>, Vec<_>) = if self == Tta::FiveCrop {
                    let five = FiveCrop::new(p.crop);
                    FIVE_CROP_NAMES.iter().enumerate().map(|(i, n)| (n.to_string(), five.view(i))).unzip()
                } else {
                    ten.names().into_iter().enumerate().map(|(i, n)| (n, ten.view(i))).unzip()
                };
                names
                    .into_iter()
                    .zip(crops)
                    .map(|(name, crop)| {
                        let is_eval = name == "center";
                        view(name, is_eval, with_crop(p, crop))
                    })
                    .collect()
            }
            Tta::MultiScale => multi_scale_resizes(p)
                .into_iter()
                .map(|resize| {
                    let scaled = EvalPreprocessing { resize, ..*p };
                    view(format!("resize_{resize}"), resize == p.resize, scaled.transform())
                })
                .collect(),
        })
    }
}

impl std::str::FromStr for Tta {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Tta::parse(s)
    }
}

/// `multi_scale`'s resize sides for an evaluation transform resizing to `R` and cropping `C`:
/// `C`, `R` and `R * 256 / 224` (integer division), ascending, duplicates dropped. For
/// torchvision's preset at 224: 224, 256, 292.
pub fn multi_scale_resizes(preprocessing: &EvalPreprocessing) -> Vec<usize> {
    let (r, c) = (preprocessing.resize, preprocessing.crop);
    let mut sides = vec![c, r, r * 256 / 224];
    sides.sort_unstable();
    sides.dedup();
    sides
}

/// The evaluation transform with `crop` in place of its `CenterCrop`.
fn with_crop(p: &EvalPreprocessing, crop: impl Transform + 'static) -> Compose {
    let resize = match p.crop_mode {
        CropMode::Center => Resize::new(p.resize),
        CropMode::Squash => Resize::exact(p.resize, p.resize),
    };
    Compose::default()
        .then(resize.with_interpolation(p.interpolation))
        .then(crop)
        .then(ToTensor)
        .then(Normalize::new(&p.mean, &p.std))
}

/// One view of a test-time augmentation: its name (`eval`, `hflip`, `top_left`, ...,
/// `resize_256`) and its transform.
#[derive(Debug, Clone)]
pub struct TtaView {
    /// How the view is reported.
    pub name: String,
    /// Whether the view is the evaluation transform itself (`hflip`'s `eval`, the crops'
    /// `center`, `multi_scale`'s resize `R`), against which the averaged accuracy's gain is
    /// reported.
    pub is_eval: bool,
    /// Decoded RGB image to the normalised `[3, C, C]` input.
    pub transform: Compose,
}

impl TtaView {
    /// The view of `image` as a `[3, H, W]` float tensor (CPU).
    ///
    /// # Errors
    /// When the transform fails on the image.
    pub fn apply(&self, image: Image) -> Result<Tensor> {
        let out = self.transform.apply(Sample::Image(image), &mut rng_from_seed(0))?;
        let t = out.into_tensor().ok_or_else(|| VisionError::Transform {
            transform: "test-time view",
            message: format!("view `{}` did not produce a tensor", self.name),
        })?;
        Ok(Tensor::from_slice(&t.data).view([t.channels as i64, t.height as i64, t.width as i64]))
    }
}

/// Every view of `image`, stacked `[V, 3, H, W]` (CPU), for one forward pass.
///
/// # Errors
/// When a view's transform fails on the image.
pub fn view_batch(image: &Image, views: &[TtaView]) -> Result<Tensor> {
    let views = views.iter().map(|v| v.apply(image.clone())).collect::<Result<Vec<_>>>()?;
    Ok(Tensor::stack(&views, 0))
}

/// The mean over the first dimension of the softmax (over the last) of `logits` `[V, ...,
/// C]`: the test-time prediction from `V` views' logits, in `f32`.
pub fn average_softmax(logits: &Tensor) -> Tensor {
    logits.to_kind(Kind::Float).softmax(-1, Kind::Float).mean_dim(0, false, Kind::Float)
}

/// One view's results over the evaluated folder.
#[derive(Debug)]
pub struct ViewResult {
    /// The view's name.
    pub name: String,
    /// Whether it is the evaluation transform itself.
    pub is_eval: bool,
    /// Loss, accuracies and confusion matrix of the view alone.
    pub summary: MetricsSummary,
}

/// What [`evaluate_tta`] returns.
#[derive(Debug)]
pub struct TtaEvaluated {
    /// The augmentation.
    pub tta: Tta,
    /// Each view's results, in [`Tta::views`]' order.
    pub views: Vec<ViewResult>,
    /// The averaged prediction's results: accuracy from the argmax of the mean probabilities,
    /// loss the mean negative log of the mean probability of the true class.
    pub averaged: MetricsSummary,
    /// The mean probabilities `[N, C]` (`f32`, CPU), in the folder's order.
    pub probabilities: Tensor,
    /// The labels `[N]` (`i64`, CPU).
    pub labels: Tensor,
}

impl TtaEvaluated {
    /// The view that is the evaluation transform itself.
    pub fn eval_view(&self) -> Option<&ViewResult> {
        self.views.iter().find(|v| v.is_eval)
    }
}

/// Evaluates a classifier on every view of `tta` over the ImageFolder `dir` (opened with the
/// recipe's pixel limit and EXIF setting) and on the average of their softmax probabilities.
/// `config.train.amp` and `config.train.top_k` apply, as in [`super::evaluate`].
///
/// # Errors
/// As [`Tta::views`], opening the folder and [`super::evaluate`].
pub fn evaluate_tta(
    model: &dyn Module,
    dir: &Path,
    tta: Tta,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
) -> Result<TtaEvaluated> {
    let views = tta.views(&super::eval_preprocessing(config))?;
    let mut results = Vec::with_capacity(views.len());
    let mut logits = Vec::with_capacity(views.len());
    let mut labels: Option<Tensor> = None;
    for view in views {
        let folder = ImageFolder::new(dir)?
            .with_max_pixels(config.data.pixel_limit())
            .with_exif_transpose(config.data.exif_transpose)
            .with_transform(view.transform);
        let n = torchlight_data::Dataset::len(&folder);
        let split: Split = Subset::new(Arc::new(folder), (0..n).collect())?;
        let mut batches = loader(split, config, false, device)?;
        let e = evaluate_with_logits(model, &mut batches, device, config, num_classes, progress)?;
        match &labels {
            None => labels = Some(e.labels),
            Some(l) => assert!(l.equal(&e.labels), "every view is evaluated in the folder's order"),
        }
        logits.push(e.logits);
        results.push(ViewResult { name: view.name, is_eval: view.is_eval, summary: e.summary });
    }
    let labels = labels.expect("every augmentation has views");
    let probabilities = average_softmax(&Tensor::stack(&logits, 0));
    let averaged = summary_of_probabilities(&probabilities, &labels, num_classes, config.train.top_k)?;
    Ok(TtaEvaluated { tta, views: results, averaged, probabilities, labels })
}

/// Loss, accuracies and confusion matrix of predicted `probabilities` `[N, C]`: the metrics of
/// the logits `log(p)`, whose softmax is `p` and whose cross-entropy is `-log p[label]`.
fn summary_of_probabilities(
    probabilities: &Tensor,
    labels: &Tensor,
    num_classes: usize,
    top_k: usize,
) -> Result<MetricsSummary> {
    if labels.numel() == 0 {
        return Err(TrainError::Metric {
            metric: "tta".into(),
            reason: "the evaluated data held no images".into(),
        }
        .into());
    }
    let log_p = probabilities.log();
    let loss = log_p.nll_loss(labels);
    let mut metrics = ClassificationMetrics::new(num_classes, top_k, Device::Cpu);
    metrics.update(&loss, &log_p, labels);
    Ok(metrics.compute())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_scale_sides_are_the_crop_the_resize_and_one_step_more() {
        assert_eq!(multi_scale_resizes(&EvalPreprocessing::classification(224)), [224, 256, 292]);
        assert_eq!(multi_scale_resizes(&EvalPreprocessing::classification(32)), [32, 36, 41]);
        // crop_pct 1: the resize is the crop, so one side fewer.
        let full = EvalPreprocessing { resize: 224, ..EvalPreprocessing::classification(224) };
        assert_eq!(multi_scale_resizes(&full), [224, 256]);
    }

    #[test]
    fn views_are_named_and_one_is_the_evaluation_transform() {
        let p = EvalPreprocessing::classification(32);
        for (tta, n) in [(Tta::HFlip, 2), (Tta::FiveCrop, 5), (Tta::TenCrop, 10), (Tta::MultiScale, 3)] {
            let views = tta.views(&p).unwrap();
            assert_eq!(views.len(), n, "{tta:?}");
            assert_eq!(views.iter().filter(|v| v.is_eval).count(), 1, "{tta:?}");
            assert_eq!(Tta::parse(tta.name()), Ok(tta));
        }
        assert!(Tta::parse("flip").unwrap_err().contains("hflip, five_crop, ten_crop, multi_scale"));
    }

    /// The view marked as the evaluation transform gives its output bit for bit, and `hflip`'s
    /// other view is that output mirrored.
    #[test]
    fn the_eval_view_is_the_eval_transform_and_hflip_mirrors_it() {
        let pixels: Vec<u8> = (0..50 * 37 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let image = Image::new(50, 37, 3, pixels);
        let p = EvalPreprocessing::classification(24);
        let want = TtaView { name: "eval".into(), is_eval: true, transform: p.transform() }
            .apply(image.clone())
            .unwrap();
        for tta in [Tta::HFlip, Tta::FiveCrop, Tta::TenCrop, Tta::MultiScale] {
            let views = tta.views(&p).unwrap();
            let eval = views.iter().find(|v| v.is_eval).unwrap();
            assert!(eval.apply(image.clone()).unwrap().equal(&want), "{tta:?}");
        }
        let flipped = Tta::HFlip.views(&p).unwrap()[1].apply(image.clone()).unwrap();
        assert!(flipped.equal(&want.flip([2])));
        let batch = view_batch(&image, &Tta::TenCrop.views(&p).unwrap()).unwrap();
        assert_eq!(batch.size(), [10, 3, 24, 24]);
    }

    #[test]
    fn averaging_is_of_probabilities_not_logits() {
        let logits = Tensor::from_slice(&[0.0f32, 10.0, 0.0, 0.0]).view([2, 2]);
        let p = Vec::<f32>::try_from(average_softmax(&logits)).unwrap();
        let s = 1.0 / (1.0 + (-10.0f32).exp());
        assert!(
            (p[0] - (1.0 - s + 0.5) / 2.0).abs() < 1e-6 && (p[1] - (s + 0.5) / 2.0).abs() < 1e-6,
            "{p:?}"
        );
    }

    #[test]
    fn crops_need_a_resize_at_least_the_crop() {
        let p = EvalPreprocessing { resize: 200, ..EvalPreprocessing::classification(224) };
        let err = Tta::FiveCrop.views(&p).unwrap_err().to_string();
        assert!(err.contains("FiveCrop: the evaluation resize 200 is smaller than the 224 crop"), "{err}");
    }
}
