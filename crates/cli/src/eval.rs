//! `torchlight eval`.

use crate::calibrate::{calibrate, store_temperature};
use crate::loaded::load;
use crate::outln;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlight_data::Subset;
use torchlight_recipes::image::{
    eval_preprocessing, evaluate, evaluate_tta, evaluate_with_logits, loader, Evaluated, Tta, TtaEvaluated,
    TTA_AVERAGES, TTA_NAMES,
};
use torchlight_recipes::text;
use torchlight_tensor::DeviceSpec;
use torchlight_train::{
    plot_confusion_matrix, plot_errors, worst_misclassified, ClassificationReport, ErrorTile, Misclassified,
    Progress,
};
use torchlight_vision::{decode_file_with, DecodeOptions, ImageFolder};

/// Options of `torchlight eval`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint folder, or a run folder (its best checkpoint is used, `best_ema` when the run
    /// selected its EMA weights).
    #[arg(long)]
    checkpoint: PathBuf,
    /// An ImageFolder of class folders, or a root whose `test/` is evaluated; for a text
    /// checkpoint, a TextFolder the same way (`<class>/*.txt`), tokenized with the tokenizer
    /// the checkpoint carries and cut to its `text.max_len`.
    #[arg(long)]
    data: PathBuf,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Also draw the confusion matrix to this PNG file.
    #[arg(long)]
    confusion_png: Option<PathBuf>,
    /// Also fit a temperature on the run's validation split (of --data when it is a split root
    /// with train/, else of the run's data.root) and report ECE, MCE, NLL and Brier score of
    /// the validation and evaluated data before and after dividing the logits by it. The
    /// temperature is stored in the evaluated checkpoint (its model card, `meta.json`, replaced
    /// atomically), and `predict` and `export` then divide the logits by it; eval itself
    /// reports the model's own logits.
    #[arg(long)]
    calibrate: bool,
    /// Where --calibrate draws its reliability diagram; default `reliability.png` in the
    /// --report folder when one is given (beside `report.json`), else in the current folder.
    #[arg(long, value_name = "PNG")]
    reliability_png: Option<PathBuf>,
    /// Also write the per-class report (precision, recall, F1 and support per class, their
    /// macro and weighted averages: scikit-learn's `classification_report`; and the
    /// most-confused class pairs) into this folder as `report.json` and `report.csv`; for an
    /// image checkpoint also `errors.png`, the 16 misclassified images with the highest
    /// confidence in their wrong class (true class, predicted class, confidence, file), where
    /// label errors show first (not with --tta, whose views have no one image to show).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Test-time augmentation (image checkpoints): evaluate every view and average their
    /// softmax probabilities (not logits). `hflip`: the evaluation transform and its
    /// horizontal flip; `five_crop` / `ten_crop`: torchvision's FiveCrop / TenCrop of the
    /// crop size in place of the centre crop, after the same resize; `multi_scale`: the
    /// evaluation transform with the resize side at the crop size, the resize and resize *
    /// 256/224. Each view's accuracy and the averaged one are reported; accuracy, loss,
    /// report and confusion matrix are the averaged prediction's.
    #[arg(long, value_name = "VIEWS", value_parser = clap::builder::PossibleValuesParser::new(TTA_NAMES), conflicts_with = "calibrate")]
    tta: Option<String>,
    /// Print the results as JSON (the count under `images`, or `documents` for a text model;
    /// the per-class report under `report`; with --tta, the views under `tta`).
    #[arg(long)]
    json: bool,
}

/// The most-confused class pairs printed and written (`report.json`'s `most_confused`).
const MOST_CONFUSED: usize = 10;

/// The misclassified images `--report` draws into `errors.png`, most confident first.
const WORST_ERRORS: usize = 16;

pub fn run(args: Args) -> Result<()> {
    let device = args.device.parse::<DeviceSpec>()?.resolve()?;
    let loaded = load(&args.checkpoint, device)?;
    let config = &loaded.card.config;
    let classes = &loaded.card.classes;
    let dir = data_folder(&args.data)?;
    let progress = if args.json { Progress::quiet() } else { Progress::auto() };
    let tta = args.tta.as_deref().map(Tta::parse).transpose().map_err(anyhow::Error::msg)?;
    let mut tta_result: Option<TtaEvaluated> = None;
    let reliability_png = args.reliability_png.clone().unwrap_or_else(|| {
        args.report.as_deref().unwrap_or(std::path::Path::new("")).join("reliability.png")
    });
    // What is counted: a text model reads documents, an image model images.
    // An image evaluation's files and logits, for `errors.png` (`--report`).
    let mut image_logits: Option<(Vec<(PathBuf, i64)>, Evaluated)> = None;
    let (m, calibrated, unit) = if let Some(tokenizer) = &loaded.tokenizer {
        if tta.is_some() {
            bail!(
                "--tta: {} is a text checkpoint; test-time augmentation makes views of images (image checkpoints only)",
                loaded.from.dir.display()
            );
        }
        let folder = text::open_eval_folder(&dir, config, classes)?;
        check_classes(&dir, folder.classes(), classes)?;
        let mut batches = text::eval_loader(folder, Arc::clone(tokenizer), config, device)?;
        let model = loaded.model.as_ref();
        let (m, calibrated) = if args.calibrate {
            let e =
                text::evaluate_with_logits(model, &mut batches, device, config, classes.len(), &progress)?;
            let name = if dir.ends_with("test") { "test" } else { "data" };
            let c = calibrate(&loaded, &args.data, &e, name, &reliability_png, device, &progress)?;
            (e.summary, Some(c))
        } else {
            (text::evaluate(model, &mut batches, device, config, classes.len(), &progress)?, None)
        };
        (m, calibrated, "documents")
    } else {
        let folder = ImageFolder::new(&dir)?
            .with_max_pixels(config.data.pixel_limit())
            .with_exif_transpose(config.data.exif_transpose)
            .with_transform(eval_preprocessing(config).transform());
        check_classes(&dir, folder.classes(), classes)?;
        if let Some(tta) = tta {
            let e = evaluate_tta(loaded.model.as_ref(), &dir, tta, device, config, classes.len(), &progress)?;
            let m = e.averaged.clone();
            tta_result = Some(e);
            (m, None, "images")
        } else {
            let n = torchlight_data::Dataset::len(&folder);
            let samples = folder.samples().to_vec();
            let split = Subset::new(Arc::new(folder), (0..n).collect())?;
            let mut batches = loader(split, config, false, device)?;
            let (m, calibrated) = if args.calibrate || args.report.is_some() {
                let e = evaluate_with_logits(
                    loaded.model.as_ref(),
                    &mut batches,
                    device,
                    config,
                    classes.len(),
                    &progress,
                )?;
                let name = if dir.ends_with("test") { "test" } else { "data" };
                let c = if args.calibrate {
                    Some(calibrate(&loaded, &args.data, &e, name, &reliability_png, device, &progress)?)
                } else {
                    None
                };
                let m = e.summary.clone();
                image_logits = Some((samples, e));
                (m, c)
            } else {
                (
                    evaluate(loaded.model.as_ref(), &mut batches, device, config, classes.len(), &progress)?,
                    None,
                )
            };
            (m, calibrated, "images")
        }
    };
    // The temperature travels with the checkpoint: predict and export apply it.
    let calibrated = match calibrated {
        Some(mut c) => {
            c.stored_in = Some(store_temperature(&loaded, c.temperature)?);
            Some(c)
        }
        None => None,
    };
    if let Some(png) = &args.confusion_png {
        plot_confusion_matrix(&m.confusion, classes, png)?;
    }
    let per_class = m.confusion.per_class_accuracy();
    let support = m.confusion.support();
    let report = ClassificationReport::from_confusion(&m.confusion);
    let mut errors = None;
    if let Some(out) = &args.report {
        write_report(&report, classes, out)?;
        if let Some((samples, e)) = &image_logits {
            // Ranked by the confidence predict reports: the logits divided by the temperature
            // the checkpoint now holds, if any.
            let temperature = calibrated.as_ref().map(|c| c.temperature).or(loaded.card.temperature);
            errors = Some(write_errors_png(samples, e, temperature, classes, config, out)?);
        }
    }
    if args.json {
        let mut json = serde_json::json!({
            "checkpoint": loaded.from.to_json(),
            "data": dir,
            unit: m.count,
            "loss": m.loss,
            "accuracy": m.top1,
            format!("top{}_accuracy", m.k): m.topk,
            "classes": classes,
            "per_class_accuracy": per_class,
            "support": support,
            "confusion_matrix": m.confusion.rows(),
            "report": report.to_json(classes, MOST_CONFUSED),
        });
        if let Some(c) = &calibrated {
            json["calibration"] = c.to_json();
        }
        if let Some(e) = &errors {
            json["errors"] = e.to_json(classes);
        }
        if let Some(t) = &tta_result {
            json["tta"] = tta_json(t);
        }
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(());
    }
    outln!("{}", loaded.from)?;
    outln!("{}: {} {unit}", dir.display(), m.count)?;
    outln!("accuracy {:.4}   top{} {:.4}   loss {:.4}", m.top1, m.k, m.topk, m.loss)?;
    if let Some(t) = &tta_result {
        for line in tta_lines(t) {
            outln!("{line}")?;
        }
    }
    let width = classes.iter().map(String::len).max().unwrap_or(5).max(5);
    outln!("")?;
    for line in report.to_text(classes, MOST_CONFUSED).lines() {
        outln!("{line}")?;
    }
    outln!("\nconfusion matrix (rows: true class, columns: predicted)")?;
    for (name, row) in classes.iter().zip(m.confusion.rows()) {
        let cells: Vec<String> = row.iter().map(|c| format!("{c:>6}")).collect();
        outln!("{name:<width$}  {}", cells.join(""))?;
    }
    if let Some(e) = &errors {
        outln!(
            "\n{}: the {} most confident of {} misclassified images",
            e.png.display(),
            e.worst.len(),
            e.wrong
        )?;
    }
    if let Some(c) = &calibrated {
        let name = if dir.ends_with("test") { "test" } else { "data" };
        for line in c.lines(name) {
            outln!("{line}")?;
        }
    }
    Ok(())
}

/// `eval --json`'s `tta`: the augmentation, what is averaged, each view's figures, the
/// averaged prediction's and its accuracy gain over the evaluation transform's view.
fn tta_json(t: &TtaEvaluated) -> serde_json::Value {
    let figures = |m: &torchlight_train::MetricsSummary| {
        serde_json::json!({
            "accuracy": m.top1,
            format!("top{}_accuracy", m.k): m.topk,
            "loss": m.loss,
        })
    };
    let views: Vec<_> = t
        .views
        .iter()
        .map(|v| {
            let mut j = figures(&v.summary);
            j["name"] = v.name.clone().into();
            j["is_eval_transform"] = v.is_eval.into();
            j
        })
        .collect();
    serde_json::json!({
        "mode": t.tta.name(),
        "averages": TTA_AVERAGES,
        "views": views,
        "averaged": figures(&t.averaged),
        "accuracy_gain": t.eval_view().map(|v| t.averaged.top1 - v.summary.top1),
    })
}

/// The text form of [`tta_json`]: one row per view, then the average.
fn tta_lines(t: &TtaEvaluated) -> Vec<String> {
    let width = t.views.iter().map(|v| v.name.len()).max().unwrap_or(0).max("averaged".len());
    let mut lines = vec![
        String::new(),
        format!(
            "test-time augmentation {}: {} averaged over {} views",
            t.tta.name(),
            TTA_AVERAGES,
            t.views.len()
        ),
        format!("  {:<width$}  accuracy  loss", "view"),
    ];
    for v in &t.views {
        let mark = if v.is_eval { "   (the evaluation transform)" } else { "" };
        lines.push(format!("  {:<width$}  {:.4}    {:.4}{mark}", v.name, v.summary.top1, v.summary.loss));
    }
    let gain = t
        .eval_view()
        .map(|v| format!("   ({:+.4} over the evaluation transform)", t.averaged.top1 - v.summary.top1));
    lines.push(format!(
        "  {:<width$}  {:.4}    {:.4}{}",
        "averaged",
        t.averaged.top1,
        t.averaged.loss,
        gain.unwrap_or_default()
    ));
    lines
}

/// Writes `report.json` and `report.csv` into `dir` (made if missing), each through a
/// temporary file renamed into place.
fn write_report(report: &ClassificationReport, classes: &[String], dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("could not create --report folder {}", dir.display()))?;
    let json = serde_json::to_string_pretty(&report.to_json(classes, MOST_CONFUSED))? + "\n";
    for (name, text) in [("report.json", json), ("report.csv", report.to_csv(classes))] {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).with_context(|| format!("could not write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("could not write {}", path.display()))?;
    }
    Ok(())
}

/// `errors.png` of `--report`: the worst misclassified images, and what they are.
struct Errors {
    png: PathBuf,
    /// Misclassified images in all.
    wrong: usize,
    /// The drawn ones, most confident first, with their files.
    worst: Vec<(PathBuf, Misclassified)>,
    temperature: Option<f64>,
}

impl Errors {
    fn to_json(&self, classes: &[String]) -> serde_json::Value {
        let worst: Vec<_> = self
            .worst
            .iter()
            .map(|(path, m)| {
                serde_json::json!({
                    "image": path,
                    "true": classes[m.label],
                    "predicted": classes[m.predicted],
                    "confidence": m.confidence,
                })
            })
            .collect();
        serde_json::json!({
            "png": self.png,
            "misclassified": self.wrong,
            "temperature": self.temperature,
            "worst": worst,
        })
    }
}

/// Draws `DIR/errors.png`: the [`WORST_ERRORS`] misclassified images of `samples` (the
/// evaluated folder's files, in the evaluation's order) with the highest confidence in their
/// wrong class, the softmax of the logits divided by `temperature` when there is one.
fn write_errors_png(
    samples: &[(PathBuf, i64)],
    evaluated: &Evaluated,
    temperature: Option<f64>,
    classes: &[String],
    config: &torchlight_recipes::TrainConfig,
    dir: &Path,
) -> Result<Errors> {
    let labels = Vec::<i64>::try_from(&evaluated.labels)?;
    let files: Vec<i64> = samples.iter().map(|(_, label)| *label).collect();
    if labels != files {
        bail!(
            "errors.png: the evaluation gave {} labels for {} images, not each image's in order (images skipped as unreadable?)",
            labels.len(),
            samples.len()
        );
    }
    let logits = match temperature {
        Some(t) => &evaluated.logits / t,
        None => evaluated.logits.shallow_clone(),
    };
    let wrong = worst_misclassified(&logits, &evaluated.labels, usize::MAX).len();
    let worst = worst_misclassified(&logits, &evaluated.labels, WORST_ERRORS);
    let decode = DecodeOptions::default()
        .with_max_pixels(config.data.pixel_limit())
        .with_exif_transpose(config.data.exif_transpose);
    let mut tiles = Vec::new();
    for m in &worst {
        let path = &samples[m.index].0;
        let image = decode_file_with(path, &decode)?;
        // `class/file`: the folder it sits in says its label.
        let name = path
            .strip_prefix(path.parent().and_then(Path::parent).unwrap_or(Path::new("")))
            .unwrap_or(path)
            .display()
            .to_string();
        tiles.push(ErrorTile {
            rgb: image.pixels().to_vec(),
            width: image.width() as u32,
            height: image.height() as u32,
            lines: vec![
                format!("true: {}", classes[m.label]),
                format!("predicted: {}", classes[m.predicted]),
                format!("confidence {:.1}%", 100.0 * m.confidence),
                name,
            ],
        });
    }
    let scaled = temperature.map_or_else(String::new, |t| format!(", logits / T, T = {t:.3}"));
    let title = format!(
        "Most confident errors: {} of {wrong} misclassified, of {} images{scaled}",
        worst.len(),
        samples.len()
    );
    let png = dir.join("errors.png");
    plot_errors(&title, &tiles, &png)?;
    let worst = worst.into_iter().map(|m| (samples[m.index].0.clone(), m)).collect();
    Ok(Errors { png, wrong, worst, temperature })
}

/// The classes of the evaluated folder must be the checkpoint's, in the same order.
fn check_classes(dir: &Path, found: &[String], classes: &[String]) -> Result<()> {
    if found != classes {
        bail!(
            "{}: classes [{}] do not match the checkpoint's [{}]",
            dir.display(),
            found.join(", "),
            classes.join(", ")
        );
    }
    Ok(())
}

/// The folder to evaluate: `data/test` when there is one, else `data` itself as an ImageFolder
/// (a TextFolder for a text model);
/// a split root without `test/` (only `train/`, `val/`) is an error that says what to pass.
fn data_folder(data: &Path) -> Result<PathBuf> {
    if data.join("test").is_dir() {
        return Ok(data.join("test"));
    }
    let splits: Vec<&str> = ["train", "val"].into_iter().filter(|s| data.join(s).is_dir()).collect();
    if !splits.is_empty() {
        let suggestion = data.join(if splits.contains(&"val") { "val" } else { "train" });
        bail!(
            "{} holds {} but no test/ split to evaluate; pass the split to evaluate as --data, e.g. --data {}",
            data.display(),
            splits.iter().map(|s| format!("{s}/")).collect::<Vec<_>>().join(" and "),
            suggestion.display()
        );
    }
    Ok(data.to_path_buf())
}
