//! `torchlight eval`.

use crate::calibrate::calibrate;
use crate::loaded::load;
use crate::outln;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlight_data::Subset;
use torchlight_recipes::image::{
    eval_preprocessing, evaluate, evaluate_tta, evaluate_with_logits, loader, Tta, TtaEvaluated,
    TTA_AVERAGES, TTA_NAMES,
};
use torchlight_recipes::text;
use torchlight_tensor::DeviceSpec;
use torchlight_train::{plot_confusion_matrix, ClassificationReport, Progress};
use torchlight_vision::ImageFolder;

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
    /// the validation and evaluated data before and after dividing the logits by it (image
    /// checkpoints only).
    #[arg(long)]
    calibrate: bool,
    /// Where --calibrate draws its reliability diagram.
    #[arg(long, default_value = "reliability.png")]
    reliability_png: PathBuf,
    /// Also write the per-class report (precision, recall, F1 and support per class, their
    /// macro and weighted averages: scikit-learn's `classification_report`; and the
    /// most-confused class pairs) into this folder as `report.json` and `report.csv`.
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

pub fn run(args: Args) -> Result<()> {
    let device = args.device.parse::<DeviceSpec>()?.resolve()?;
    let loaded = load(&args.checkpoint, device)?;
    let config = &loaded.card.config;
    let classes = &loaded.card.classes;
    let dir = data_folder(&args.data)?;
    let progress = if args.json { Progress::quiet() } else { Progress::auto() };
    let tta = args.tta.as_deref().map(Tta::parse).transpose().map_err(anyhow::Error::msg)?;
    let mut tta_result: Option<TtaEvaluated> = None;
    // What is counted: a text model reads documents, an image model images.
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
            let c = calibrate(&loaded, &args.data, &e, name, &args.reliability_png, device, &progress)?;
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
            let split = Subset::new(Arc::new(folder), (0..n).collect())?;
            let mut batches = loader(split, config, false, device)?;
            let (m, calibrated) = if args.calibrate {
                let e = evaluate_with_logits(
                    loaded.model.as_ref(),
                    &mut batches,
                    device,
                    config,
                    classes.len(),
                    &progress,
                )?;
                let name = if dir.ends_with("test") { "test" } else { "data" };
                let c = calibrate(&loaded, &args.data, &e, name, &args.reliability_png, device, &progress)?;
                (e.summary, Some(c))
            } else {
                (
                    evaluate(loaded.model.as_ref(), &mut batches, device, config, classes.len(), &progress)?,
                    None,
                )
            };
            (m, calibrated, "images")
        }
    };
    if let Some(png) = &args.confusion_png {
        plot_confusion_matrix(&m.confusion, classes, png)?;
    }
    let per_class = m.confusion.per_class_accuracy();
    let support = m.confusion.support();
    let report = ClassificationReport::from_confusion(&m.confusion);
    if let Some(out) = &args.report {
        write_report(&report, classes, out)?;
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
