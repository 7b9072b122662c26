//! `torchlight tune lr`: the lr range test ([`Trainer::lr_find`]) on exactly what `fit` would
//! train (the config's model, param groups, optimizer, loss, Mixup/CutMix, AMP, accumulation
//! and clipping, the training split through the recipe's own train loader), writing
//! `lr_finder.png` and suggesting `optim.lr`. No run folder is made.

use crate::config::{format_lr, TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::image::{apply_pretrained_cfg, open_splits, sharded_loader};
use crate::model::{build_model, check_batch_norm_batches, model_architecture};
use crate::optimizer::build_optimizer;
use std::path::{Path, PathBuf};
use tch::Tensor;
use torchlight_tensor::seed_everything;
use torchlight_train::{LrFindConfig, LrFinder, Progress, Trainer};

/// The plot's file name in the output folder.
pub const LR_FINDER_PNG: &str = "lr_finder.png";

/// What [`lr_find`] measured and suggests.
#[derive(Debug, Clone)]
pub struct LrFindReport {
    /// The curve, in units of `optim.lr` (the head's lr; see [`lr_find`]).
    pub finder: LrFinder,
    /// The config's `optim.lr` when the test ran.
    pub current_lr: f64,
    /// Where the plot was written.
    pub plot: PathBuf,
}

impl LrFindReport {
    /// The suggested `optim.lr`, if the curve had enough points.
    pub fn suggestion(&self) -> Option<f64> {
        self.finder.suggestion()
    }

    /// The config line to use: `optim.lr = 3.16e-3`.
    pub fn config_line(&self) -> Option<String> {
        self.suggestion().map(|lr| format!("optim.lr = {}", format_lr(lr)))
    }
}

/// Runs the lr range test for `config` (`train.task = "image"`) and draws its curve as
/// `out/lr_finder.png` (the folder is made if missing).
///
/// Every param group keeps its ratio to `optim.lr` (a fine-tuned backbone at a tenth of it, a
/// layer-wise decay), so the swept and suggested lr is `optim.lr`'s. Callbacks do not run, as
/// in Lightning's finder: a backbone `fit` would freeze for its first epochs
/// (`model.freeze_epochs`) trains during the test at its group's lr.
pub fn lr_find(
    mut config: TrainConfig,
    finder: &LrFindConfig,
    out: &Path,
    progress: &Progress,
) -> Result<LrFindReport> {
    config.validate()?;
    if config.train.task != TaskKind::Image {
        return Err(RecipeError::InvalidConfig {
            field: "train.task".into(),
            value: format!("{:?}", config.train.task.name()),
            reason: "the lr finder runs the image recipe; for a text config run the range test with \
                     Trainer::lr_find from the library"
                .into(),
        });
    }
    if let Some(line) = apply_pretrained_cfg(&mut config)? {
        progress.line(&line);
        config.validate()?;
    }
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    let per_rank = torchlight_data::Dataset::len(&splits.train);
    check_batch_norm_batches(&config, per_rank.min(config.train.batch_size))?;
    let t = &config.train;
    seed_everything(t.seed);
    let device = t.device_spec()?.resolve()?;
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    let task = crate::image::training_task(&config, &splits, num_classes, device)?;
    let mut train_loader = sharded_loader(splits.train, &config, true, device, None)?;
    let head = model_architecture(&config)?.head();
    let mut model = build_model(&config, num_classes, device)?;
    let mut optimizer = build_optimizer(&config, model.as_ref(), head)?;
    // The test sweeps the largest group's lr; optim.lr is the head's.
    let largest = optimizer.lrs().into_iter().fold(0.0f64, f64::max);
    let scale = if largest > 0.0 { config.optim.lr / largest } else { 1.0 };
    let mut builder = Trainer::builder()
        .device(device)
        .step_config(crate::doctor::step_config(&config))
        .data_seed(t.seed)
        .progress(progress.clone());
    if let Some(mix) = crate::image::batch_mixing(&config, num_classes)? {
        builder = builder.batch_transform::<(Tensor, Tensor)>(mix);
    }
    let mut trainer = builder.build()?;
    progress.line(&format!(
        "lr range test: {} steps of {} images{}, lr {:.1e} to {:.1e} ({}), {} training images",
        finder.num_training,
        t.batch_size,
        if t.accumulation_steps > 1 {
            format!(" x {} accumulated", t.accumulation_steps)
        } else {
            String::new()
        },
        finder.min_lr,
        finder.max_lr,
        finder.mode.name(),
        per_rank
    ));
    let mut found = trainer.lr_find(model.as_mut(), &task, optimizer.as_mut(), &mut train_loader, finder)?;
    if scale != 1.0 {
        for lr in &mut found.lrs {
            *lr *= scale;
        }
    }
    std::fs::create_dir_all(out).map_err(|e| RecipeError::io(out, e))?;
    let plot = out.join(LR_FINDER_PNG);
    found.plot(&plot)?;
    Ok(LrFindReport { finder: found, current_lr: config.optim.lr, plot })
}
