//! `torchlight doctor`: the seed documents' "why does my model not train" checklist, run in
//! order, cheapest first: (1) the data, (2) one batch through the model, (3) overfitting one
//! batch, (4) a short real run. Each check gives a [`Finding`]: PASS / WARN / FAIL, the figure
//! it measured and one suggested fix.
//!
//! Images also get the two augmentation restraint checks ([`check_augmentation`] in stage
//! 1, with the grid `augmented_samples.png` in `DoctorOptions::out`; [`augmentation_ab`] after
//! the short run: the same run without augmentation).
//!
//! Image and text configs (`train.task`) differ in stages 1 and 2 ([`check_data`] /
//! [`check_text_data`], [`check_batch`] / [`check_text_batch`]); stages 3 and 4
//! ([`overfit_batch`], [`short_run`]) are generic over the model and batch the classification
//! task takes, and run the same `StepRunner` for both.

mod augmentation;
mod batch;
mod data;
mod overfit;
mod short_run;
mod text;
mod text_data;

pub use augmentation::{augmentation_ab, check_augmentation, AUGMENTED_SAMPLES};
pub use batch::{check_batch, check_text_batch};
pub use data::check_data;
pub use overfit::overfit_batch;
pub use short_run::{short_run, stall_finding};
pub use text_data::check_text_data;
use text_data::text_data;

use crate::config::{TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::image::{eval_preprocessing, loader, open_splits};
use crate::model::{build_model, check_batch_norm_batches, model_architecture};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::Arc;
use torchlight_data::Subset;
use torchlight_tensor::seed_everything;
use torchlight_train::{Batch, StepConfig};
use torchlight_vision::ImageFolder;

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Nothing wrong.
    Pass,
    /// Not run, because an earlier check failed.
    Skip,
    /// Suspicious; training may still work.
    Warn,
    /// Training will not work as set up.
    Fail,
}

impl Status {
    /// `PASS`, `SKIP`, `WARN`, `FAIL`.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// 1 data, 2 one batch, 3 overfit one batch, 4 short run.
    pub stage: u8,
    /// A stable name (`class_balance`, `split_leak`, `grad_flow`, ...).
    pub check: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was measured, in words and numbers.
    pub figure: String,
    /// One suggested fix, when the status is not PASS.
    pub fix: Option<String>,
    /// The measurements as data (for `--json`).
    pub data: Value,
}

impl Finding {
    pub(crate) fn new(stage: u8, check: &'static str, status: Status, figure: impl Into<String>) -> Self {
        Finding { stage, check, status, figure: figure.into(), fix: None, data: Value::Null }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        if self.status != Status::Pass {
            self.fix = Some(fix.into());
        }
        self
    }

    pub(crate) fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }
}

/// Every finding of a doctor run, in checklist order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DoctorReport {
    /// The findings.
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// The finding of `check` (the first, if several).
    pub fn get(&self, check: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }

    /// The worst status of all findings (PASS for an empty report).
    pub fn worst(&self) -> Status {
        self.findings.iter().map(|f| f.status).max().unwrap_or(Status::Pass)
    }

    /// One block per finding: `[stage] STATUS check: figure`, then `fix: ...`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let _ = writeln!(out, "[{}] {:4}  {}: {}", f.stage, f.status.label(), f.check, f.figure);
            if let Some(fix) = &f.fix {
                let _ = writeln!(out, "          fix: {fix}");
            }
        }
        out
    }
}

/// Bounds and thresholds of a doctor run.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Optimizer steps of the overfit-one-batch check; 60.
    pub overfit_steps: usize,
    /// The overfit check passes once the batch's loss is below this; 0.1.
    pub overfit_loss: f64,
    /// Steps of the short real run; 30.
    pub run_steps: usize,
    /// Largest-to-smallest class count ratio above which a split is imbalanced; 3.
    pub imbalance_ratio: f64,
    /// Share of step time spent waiting for data above which the run is data-starved; 0.6
    /// (the seed's "accelerator below 40% busy").
    pub stall_share: f64,
    /// A layer whose gradient norm stays below this vanishes; 1e-7.
    pub vanishing_norm: f64,
    /// A layer whose gradient norm exceeds this explodes; 1e3.
    pub exploding_norm: f64,
    /// Text: the share of training documents `text.max_len` may cut before
    /// `length_truncation` warns; 0.1 (10%).
    pub truncation_share: f64,
    /// Text: the share of the validation split's tokens the training vocabulary may not know
    /// before `unknown_tokens` warns; 0.05 (5%).
    pub unknown_share: f64,
    /// Images: training images `augmentation_strength` draws, a class at a time; 8.
    pub augment_images: usize,
    /// Images: views of each image `augmentation_strength` measures and draws; 8.
    pub augment_views: usize,
    /// Images: the mean distortion of the train transform's views above which
    /// `augmentation_strength` warns ([`check_augmentation`]); 0.35.
    pub augment_distortion: f64,
    /// Images: the same on a small set (see `small_set`); 0.3.
    pub augment_distortion_small: f64,
    /// Images: a smallest class with fewer training images than this is a small set; 100.
    pub small_set: usize,
    /// Images: the share by which the loss must fall without augmentation before
    /// `augmentation_ab` blames the augmentation ([`augmentation_ab`]); 0.1.
    pub ab_min_fall: f64,
    /// Images: `augmentation_ab` passes when the loss falls with augmentation by at least this
    /// share of its fall without; 0.25.
    pub ab_ratio: f64,
    /// The report folder: `augmentation_strength` draws [`AUGMENTED_SAMPLES`] there; none
    /// writes nothing.
    pub out: Option<std::path::PathBuf>,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            overfit_steps: 60,
            overfit_loss: 0.1,
            run_steps: 30,
            imbalance_ratio: 3.0,
            stall_share: 0.6,
            vanishing_norm: 1e-7,
            exploding_norm: 1e3,
            truncation_share: 0.1,
            unknown_share: 0.05,
            augment_images: 8,
            augment_views: 8,
            augment_distortion: 0.35,
            augment_distortion_small: 0.3,
            small_set: 100,
            ab_min_fall: 0.1,
            ab_ratio: 0.25,
            out: None,
        }
    }
}

/// The training step every stage uses: the config's AMP, accumulation, clipping and
/// non-finite policy, as `torchlight train` would run it.
pub(crate) fn step_config(config: &TrainConfig) -> StepConfig {
    let t = &config.train;
    StepConfig {
        amp: t.amp,
        accumulation: t.accumulation_steps,
        grad_clip: t.grad_clip,
        on_nonfinite: t.on_nonfinite,
        ..StepConfig::default()
    }
}

/// Runs the whole checklist for `config` (its data root, model, optimizer, batch and image
/// size, device; for `train.task = "text"` its TextFolder, tokenizer, `[text]` and text model).
/// Later stages are SKIPped when an earlier one failed in a way that would make them
/// meaningless (too few classes, unreadable files, labels out of range, non-finite forward).
pub fn doctor(config: &TrainConfig, options: &DoctorOptions) -> Result<DoctorReport> {
    config.validate()?;
    let device = config.train.device_spec()?.resolve()?;
    if config.train.task == TaskKind::Text {
        return text::doctor_text(config, options, device);
    }
    // The preprocessing a run would use: a Hub folder's pretrained_cfg fills the unset keys (a
    // folder that does not read is the model check's finding, not an error here).
    let resolved = crate::image::with_pretrained_cfg(config).unwrap_or_else(|_| config.clone());
    let config = &resolved;
    let mut report = DoctorReport { findings: check_data(config, options)? };
    if report.worst() == Status::Fail {
        report.findings.push(skipped(2, "one batch, overfit and short run not run: fix the data first"));
        return Ok(report);
    }
    report.findings.push(check_augmentation(config, options)?);
    let splits = open_splits(config)?;
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    let arch = model_architecture(config)?;
    let head = arch.head();
    // One fixed batch without augmentation: the training images through the eval transform.
    let plain = ImageFolder::new(config.data.train_dir())?
        .with_max_pixels(config.data.pixel_limit())
        .with_exif_transpose(config.data.exif_transpose)
        .with_transform(eval_preprocessing(config).transform());
    let n = torchlight_data::Dataset::len(&plain);
    let plain = Subset::new(Arc::new(plain), (0..n).collect())?;
    let mut plain_loader = loader(plain, config, true, device)?;
    let batch = plain_loader.epoch(0).next().ok_or_else(|| RecipeError::InvalidConfig {
        field: "data.root".into(),
        value: config.data.root.display().to_string(),
        reason: "train/ yields no batch".into(),
    })??;
    let (x, y) = batch.to_device(device);

    // A batch of one whose BatchNorm sees one value per channel fails every later stage as it
    // fails training (the training loader drops a short last batch).
    let smallest = torchlight_data::Dataset::len(&splits.train).min(config.train.batch_size);
    if let Err(e) = check_batch_norm_batches(config, smallest) {
        let reason = match &e {
            RecipeError::InvalidConfig { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        let (figure, fix) = reason.split_once(": use ").unwrap_or((reason.as_str(), "a larger batch"));
        report.findings.push(
            Finding::new(2, "batch_norm_batch", Status::Fail, figure).fix(format!("use {fix}")).data(
                serde_json::json!({ "smallest_batch": smallest, "image_size": config.data.image_size() }),
            ),
        );
        report.findings.push(skipped(3, "overfit and short run not run: fix the batch first"));
        return Ok(report);
    }

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    let batch = check_batch(model.as_ref(), arch.classifier(model.as_ref()), &x, &y, num_classes);
    let fatal = batch.iter().any(|f| f.status == Status::Fail);
    report.findings.extend(batch);
    if fatal {
        report.findings.push(skipped(3, "overfit and short run not run: fix the batch first"));
        return Ok(report);
    }

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    report.findings.push(overfit_batch(model.as_ref(), head, &(x, y), config, options)?);

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    // Enough epochs for `run_steps` batches, each from its own loader so the batches stream
    // lazily and the wait for each one is measured as training sees it.
    let train_indices = splits.train.indices().to_vec();
    let first = loader(splits.train, config, true, device)?;
    let epochs = options.run_steps.div_ceil(first.len().max(1)).max(1);
    let mut loaders = vec![first];
    for _ in 1..epochs {
        loaders.push(loader(open_splits(config)?.train, config, true, device)?);
    }
    let batches = loaders.iter_mut().enumerate().flat_map(|(e, l)| l.epoch(e as u64));
    let batches = batches.map(|b| b.map_err(RecipeError::from));
    let run = short_run(model.as_ref(), head, batches, config, device, options)?;
    let augmented = losses_of(&run);
    report.findings.extend(run);

    // The A/B: the same run, from the same initialisation, on the same images in the same
    // order through the eval transform instead.
    if let Some(augmented) = augmented {
        seed_everything(config.train.seed);
        let model = build_model(config, num_classes, device)?;
        let plain = || -> Result<Subset<ImageFolder>> {
            let folder = ImageFolder::new(config.data.train_dir())?
                .with_max_pixels(config.data.pixel_limit())
                .with_exif_transpose(config.data.exif_transpose)
                .with_transform(eval_preprocessing(config).transform());
            Ok(Subset::new(Arc::new(folder), train_indices.clone())?)
        };
        let mut loaders = Vec::new();
        for _ in 0..epochs {
            loaders.push(loader(plain()?, config, true, device)?);
        }
        let batches = loaders.iter_mut().enumerate().flat_map(|(e, l)| l.epoch(e as u64));
        let batches = batches.map(|b| b.map_err(RecipeError::from));
        // Only its losses are kept: its other findings repeat the augmented run's.
        let plain = losses_of(&short_run(model.as_ref(), head, batches, config, device, options)?);
        report.findings.push(augmentation_ab(&augmented, &plain.unwrap_or_default(), config, options));
    }
    Ok(report)
}

/// The losses of a short run, from its `loss_trend` finding (none when it stopped before, on a
/// frozen model).
fn losses_of(run: &[Finding]) -> Option<Vec<f64>> {
    let trend = run.iter().find(|f| f.check == "loss_trend")?;
    Some(trend.data["losses"].as_array()?.iter().map(|l| l.as_f64().unwrap_or(f64::NAN)).collect())
}

fn skipped(stage: u8, why: &str) -> Finding {
    Finding::new(stage, "skipped", Status::Skip, why)
}
