//! `torchlight eval --calibrate`: temperature scaling fitted on the run's validation split,
//! and the calibration of the validation and evaluated data before and after it.

use crate::loaded::Loaded;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Device, Tensor};
use torchlight_recipes::image::{evaluate_with_logits, loader, open_splits, Evaluated};
use torchlight_recipes::text;
use torchlight_train::{
    calibration_scores, fit_temperature, plot_reliability, reliability_bins, CalibrationScores, Progress,
    ReliabilityPanel, CALIBRATION_BINS, TEMPERATURE_RANGE,
};

/// The calibration of one split before and after dividing its logits by the temperature.
pub struct SplitCalibration {
    /// Images, or documents for a text model.
    pub count: i64,
    /// `images` or `documents`: the JSON key of `count`.
    pub unit: &'static str,
    pub before: CalibrationScores,
    pub after: CalibrationScores,
}

impl SplitCalibration {
    fn of(logits: &Tensor, labels: &Tensor, temperature: f64, unit: &'static str) -> Self {
        SplitCalibration {
            count: labels.size()[0],
            unit,
            before: calibration_scores(logits, labels),
            after: calibration_scores(&(logits / temperature), labels),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let scores = |s: &CalibrationScores| serde_json::json!({ "ece": s.ece, "mce": s.mce, "nll": s.nll, "brier": s.brier });
        serde_json::json!({
            self.unit: self.count,
            "before": scores(&self.before),
            "after": scores(&self.after),
        })
    }
}

/// The temperature, where its validation split came from, and both splits' calibration.
pub struct Calibrated {
    pub temperature: f64,
    pub val_root: PathBuf,
    pub val: SplitCalibration,
    pub data: SplitCalibration,
    pub png: PathBuf,
    /// The checkpoint folder the temperature was stored in ([`store_temperature`]).
    pub stored_in: Option<PathBuf>,
}

impl Calibrated {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "temperature": self.temperature,
            "at_search_bound": self.at_bound(),
            "method": "NLL minimised over log T on the validation split (safeguarded Newton)",
            "bins": CALIBRATION_BINS,
            "val_root": self.val_root,
            "val": self.val.to_json(),
            "data": self.data.to_json(),
            "reliability_png": self.png,
            "stored_in": self.stored_in,
        })
    }

    /// Whether the fit stopped at a bound of [`TEMPERATURE_RANGE`]: the validation NLL keeps
    /// falling beyond it (a model barely better than chance, or separable logits).
    pub fn at_bound(&self) -> bool {
        self.temperature == TEMPERATURE_RANGE.0 || self.temperature == TEMPERATURE_RANGE.1
    }

    /// The lines `eval` prints.
    pub fn lines(&self, data_name: &str) -> Vec<String> {
        let mut out = vec![
            format!(
                "\ncalibration: temperature T = {:.4} (fitted on {} validation {} of {})",
                self.temperature,
                self.val.count,
                self.val.unit,
                self.val_root.display()
            ),
            format!("{:<6} {:<7} {:>8} {:>8} {:>8} {:>8}", "split", "logits", "ECE", "MCE", "NLL", "Brier"),
        ];
        if self.at_bound() {
            out.push(format!(
                "T is at the end of the searched range [{}, {}]: the validation NLL keeps falling beyond it",
                TEMPERATURE_RANGE.0, TEMPERATURE_RANGE.1
            ));
        }
        for (name, split) in [("val", &self.val), (data_name, &self.data)] {
            for (when, s) in [("z", &split.before), ("z / T", &split.after)] {
                out.push(format!(
                    "{name:<6} {when:<7} {:>8.4} {:>8.4} {:>8.4} {:>8.4}",
                    s.ece, s.mce, s.nll, s.brier
                ));
            }
        }
        out.push(format!("reliability diagram: {}", self.png.display()));
        if let Some(dir) = &self.stored_in {
            out.push(format!(
                "temperature stored in {}: predict and export divide the logits by it",
                dir.display()
            ));
        }
        out
    }
}

/// The data root whose validation split calibrates: `data` itself when it is a split root as
/// `train --data` takes (holds `train/`; for a text model also a records file or a folder of
/// `train.<ext>`), else the run's `data.root`.
fn val_root(data: &Path, loaded: &Loaded) -> Result<PathBuf> {
    let text = loaded.tokenizer.is_some();
    let is_root =
        |p: &Path| p.join("train").is_dir() || (text && torchlight_text::records_files(p).is_some());
    if is_root(data) {
        return Ok(data.to_path_buf());
    }
    let root = &loaded.card.config.data.root;
    if is_root(root) {
        return Ok(root.clone());
    }
    let holds = if text { "train/, train.<csv|tsv|jsonl> or is a records file" } else { "train/" };
    bail!(
        "--calibrate needs the run's validation split: neither --data {} nor the checkpoint's data.root {} holds {holds}; pass the run's data root as --data",
        data.display(),
        root.display()
    )
}

/// Fits the temperature on the validation split of the run's data (the recipe's split: `val/`,
/// or the seeded part of `train/`; for a text model the text recipe's), then scores that split and the `evaluated` data before and
/// after, and draws `png`.
pub fn calibrate(
    loaded: &Loaded,
    data: &Path,
    evaluated: &Evaluated,
    data_name: &str,
    png: &Path,
    device: Device,
    progress: &Progress,
) -> Result<Calibrated> {
    let (logits, labels) = (&evaluated.logits, &evaluated.labels);
    let root = val_root(data, loaded)?;
    let mut config = loaded.card.config.clone();
    config.data.root = root.clone();
    let n = loaded.card.classes.len();
    let check = |classes: &[String]| {
        if classes != loaded.card.classes {
            bail!(
                "{}: classes [{}] do not match the checkpoint's [{}]",
                root.display(),
                classes.join(", "),
                loaded.card.classes.join(", ")
            );
        }
        Ok(())
    };
    let model = loaded.model.as_ref();
    let unit = if loaded.tokenizer.is_some() { "documents" } else { "images" };
    let val = if let Some(tokenizer) = &loaded.tokenizer {
        let (mut batches, classes) = text::val_loader(&config, Arc::clone(tokenizer), device)?;
        check(&classes)?;
        text::evaluate_with_logits(model, &mut batches, device, &config, n, progress)?
    } else {
        let splits = open_splits(&config)?;
        check(&splits.classes)?;
        let mut batches = loader(splits.val, &config, false, device)?;
        evaluate_with_logits(model, &mut batches, device, &config, n, progress)?
    };
    let temperature = fit_temperature(&val.logits, &val.labels)?;
    let panel = |split: &str, z: &Tensor, y: &Tensor, t: Option<f64>| {
        let scaled = t.map_or_else(|| z.shallow_clone(), |t| z / t);
        let ece = calibration_scores(&scaled, y).ece;
        let title = match t {
            Some(t) => format!("{split}, logits / T (T = {t:.3}): ECE {ece:.4}"),
            None => format!("{split}, logits: ECE {ece:.4}"),
        };
        ReliabilityPanel { title, bins: reliability_bins(&scaled, y, CALIBRATION_BINS) }
    };
    let panels = [
        panel("val", &val.logits, &val.labels, None),
        panel("val", &val.logits, &val.labels, Some(temperature)),
        panel(data_name, logits, labels, None),
        panel(data_name, logits, labels, Some(temperature)),
    ];
    if let Some(dir) = png.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The --report folder it defaults into is made later, by the report.
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    plot_reliability(&panels, png)?;
    Ok(Calibrated {
        temperature,
        val_root: root,
        val: SplitCalibration::of(&val.logits, &val.labels, temperature, unit),
        data: SplitCalibration::of(logits, labels, temperature, unit),
        png: png.to_path_buf(),
        stored_in: None,
    })
}

/// Stores `temperature` in the checkpoint `loaded` was read from, as the model card's
/// `temperature` (the `temperature` key of `meta.json`'s `config`), through
/// [`torchlight_checkpoint::update_config`]: the folder restaged with the same tensor files and
/// swapped in atomically, and refused if it was saved over since it was loaded (the
/// temperature belongs to the weights it was fitted with). Returns the folder.
pub fn store_temperature(loaded: &Loaded, temperature: f64) -> Result<PathBuf> {
    let Some((dir, meta)) = &loaded.saved else {
        bail!("{}: not a checkpoint folder, so the temperature cannot be stored", loaded.from.dir.display());
    };
    let mut config = meta.config.clone();
    let Some(card) = config.as_object_mut() else {
        bail!("{}: the checkpoint's config is not a model card", dir.display());
    };
    card.insert("temperature".into(), serde_json::json!(temperature));
    torchlight_checkpoint::update_config(dir, meta, config)
        .with_context(|| format!("storing the temperature in {}", dir.display()))?;
    Ok(dir.clone())
}
