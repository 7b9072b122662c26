//! The fit loop: a [`TrainConfig`] in; a trained, evaluated, checkpointed model and a run
//! folder out (`metrics.csv`, TensorBoard events, `curves.png`, checkpoints, the test set's
//! confusion matrix and `summary.json`).

use crate::config::{NonFiniteAction, OptimizerKind, SchedulerConfig, TrainConfig};
use crate::csv_log::{CsvLogger, EpochRecord};
use crate::error::{Result, TrainError};
use crate::guard;
use crate::metrics::{ClassificationMetrics, MetricsSummary};
use crate::plot::{plot_confusion_matrix, plot_curves};
use crate::progress::Progress;
use crate::run_dir::RunDir;
use crate::tfevents::EventWriter;
use serde::{Deserialize, Serialize};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};
use torchlight_checkpoint::{Checkpoint, CheckpointManager, MetricMode, Snapshot};
use torchlight_data::{DataLoader, DefaultCollate, Subset};
use torchlight_nn::{
    count_parameters, freeze_all_but, load_weights, named_parameters, resnet_by_name, to_device, unfreeze,
    CrossEntropyLoss, LoadOptions, Module, ResNet,
};
use torchlight_optim::{
    clip_grad_norm, split_weight_decay, Adam, AdamConfig, AdamW, CosineAnnealingLR, GradScaler,
    GradScalerConfig, LinearLR, LinearLRConfig, LrScheduler, MultiStepLR, OneCycleLR, OneCycleLRConfig,
    Optimizer, ParamGroup, SequentialLR, Sgd, SgdConfig, StepLR,
};
use torchlight_tensor::{
    autocast_if, ensure_finite, no_grad, seed_everything, to_device_non_blocking, DeviceSpec,
};
use torchlight_vision::{
    CenterCrop, Compose, ImageFolder, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize,
    SplitFolders, ToTensor, IMAGENET_MEAN, IMAGENET_STD,
};

/// An image split as the loaders see it.
pub type Split = Subset<ImageFolder>;
/// The loader of an image split: `(images [N, 3, S, S], labels [N])` batches.
pub type Loader = DataLoader<Split, DefaultCollate>;

/// torchvision's training preset: RandomResizedCrop, horizontal flip, ToTensor, ImageNet
/// normalisation. `min_scale` is RandomResizedCrop's lower area bound (torchvision: 0.08).
pub fn train_transform(image_size: usize, min_scale: f64) -> Compose {
    Compose::default()
        .then(RandomResizedCrop::new(image_size).with_scale(min_scale, 1.0))
        .then(RandomHorizontalFlip::default())
        .then(ToTensor)
        .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
}

/// torchvision's evaluation preset: resize the shorter side to `size * 256 / 224`, centre
/// crop, ToTensor, ImageNet normalisation.
pub fn eval_transform(image_size: usize) -> Compose {
    Compose::default()
        .then(Resize::new(image_size * 256 / 224))
        .then(CenterCrop::new(image_size))
        .then(ToTensor)
        .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
}

/// The splits of a data root and their class names: `train/`, `val/` (or a seeded stratified
/// part of `train/` when there is no `val/`) and the optional `test/`.
pub struct Splits {
    /// Training images, with the augmenting transform.
    pub train: Split,
    /// Validation images, with the evaluation transform.
    pub val: Split,
    /// Test images, with the evaluation transform.
    pub test: Option<Split>,
    /// Class names, sorted as torchvision's ImageFolder sorts them.
    pub classes: Vec<String>,
}

fn all(folder: ImageFolder) -> Result<Split> {
    let n = torchlight_data::Dataset::len(&folder);
    Ok(Subset::new(Arc::new(folder), (0..n).collect())?)
}

/// Opens the data root of `config` as [`Splits`].
pub fn open_splits(config: &TrainConfig) -> Result<Splits> {
    let root = &config.data.root;
    let size = config.data.image_size as usize;
    let pixels = config.data.pixel_limit();
    let folders = SplitFolders::open(root)?.with_max_pixels(pixels);
    let classes = folders.train.classes().to_vec();
    let test = folders.test.map(|t| all(t.with_transform(eval_transform(size)))).transpose()?;
    let (train, val) = match folders.val {
        Some(val) => (
            all(folders.train.with_transform(train_transform(size, config.data.min_crop_scale)))?,
            all(val.with_transform(eval_transform(size)))?,
        ),
        None => {
            let targets = folders.train.targets();
            let fraction = config.data.val_fraction;
            let parts = torchlight_data::stratified_split_indices(
                &targets,
                &[1.0 - fraction, fraction][..],
                config.train.seed,
            )?;
            let train_dir = config.data.train_dir();
            let train = ImageFolder::new(&train_dir)?
                .with_max_pixels(pixels)
                .with_transform(train_transform(size, config.data.min_crop_scale));
            let val =
                ImageFolder::new(&train_dir)?.with_max_pixels(pixels).with_transform(eval_transform(size));
            (Subset::new(Arc::new(train), parts[0].clone())?, Subset::new(Arc::new(val), parts[1].clone())?)
        }
    };
    Ok(Splits { train, val, test, classes })
}

/// A loader over `split`: shuffled with dropped ragged last batch for training, in order for
/// evaluation; pinned memory on CUDA.
pub fn loader(split: Split, config: &TrainConfig, train: bool, device: Device) -> Result<Loader> {
    let batch = config.train.batch_size;
    let n = torchlight_data::Dataset::len(&split);
    Ok(DataLoader::builder(split)
        .batch_size(batch)
        .shuffle(train)
        // A last batch of one image breaks BatchNorm in training mode, as in PyTorch.
        .drop_last(train && n > batch)
        .num_workers(config.data.workers)
        .persistent_workers(config.data.workers > 0)
        .pin_memory(device.is_cuda())
        .seed(config.train.seed)
        .build()?)
}

/// The model of `config` with `num_classes` outputs, its starting weights loaded (everything
/// but the head, which is new), on `device`.
pub fn build_model(config: &TrainConfig, num_classes: usize, device: Device) -> Result<ResNet> {
    let name = &config.model.name;
    let model = resnet_by_name(name, num_classes as i64).ok_or_else(|| TrainError::InvalidConfig {
        field: "model.name".into(),
        value: name.clone(),
        reason: "not a known architecture".into(),
    })?;
    if let Some(weights) = &config.model.pretrained {
        load_weights(&model, weights, &LoadOptions::strict().skip("fc."))?;
    }
    to_device(&model, device);
    Ok(model)
}

/// AdamW/Adam/SGD over four groups: backbone and head, each with and without weight decay
/// (no decay on biases and norm weights); the head at `lr`, the backbone at `backbone_lr`.
pub fn build_optimizer(config: &TrainConfig, model: &dyn Module) -> Result<Box<dyn Optimizer>> {
    let o = &config.optim;
    let (head, backbone): (Vec<_>, Vec<_>) =
        named_parameters(model).into_iter().partition(|(n, _)| n.starts_with("fc."));
    let mut parts = Vec::new();
    for (params, lr) in [(backbone, o.backbone_lr), (head, o.lr)] {
        let (decay, no_decay) = split_weight_decay(params);
        parts.push((decay, lr, o.weight_decay));
        parts.push((no_decay, lr, 0.0));
    }
    parts.retain(|(p, _, _)| !p.is_empty());
    Ok(match o.optimizer {
        OptimizerKind::AdamW | OptimizerKind::Adam => {
            let groups = parts
                .into_iter()
                .map(|(p, lr, wd)| {
                    let c = AdamConfig::adamw()
                        .with_lr(lr)
                        .with_weight_decay(wd)
                        .with_betas(o.betas[0], o.betas[1]);
                    ParamGroup::new(p, c)
                })
                .collect();
            if o.optimizer == OptimizerKind::AdamW {
                Box::new(AdamW::new(groups)?)
            } else {
                let groups = groups
                    .into_iter()
                    .map(|g| ParamGroup::new(g.params, g.config.with_decoupled_weight_decay(false)))
                    .collect();
                Box::new(Adam::new(groups)?)
            }
        }
        OptimizerKind::Sgd => Box::new(Sgd::new(
            parts
                .into_iter()
                .map(|(p, lr, wd)| {
                    ParamGroup::new(p, SgdConfig::new(lr).with_momentum(o.momentum).with_weight_decay(wd))
                })
                .collect(),
        )?),
    })
}

/// The lr schedule of `config`: linear warm-up (if any) then the configured schedule, stepped
/// per epoch, or OneCycleLR stepped per optimizer step. Returns it and whether it steps per batch.
pub fn build_scheduler(
    config: &TrainConfig,
    optimizer: &mut dyn Optimizer,
    steps_per_epoch: usize,
) -> Result<(Option<Box<dyn LrScheduler>>, bool)> {
    let epochs = config.train.epochs as u64;
    let warmup = config.optim.warmup_epochs as u64;
    if let SchedulerConfig::OneCycle { pct_start, div_factor, final_div_factor } = config.scheduler {
        let total = (epochs * steps_per_epoch as u64).max(1);
        let c = OneCycleLRConfig {
            pct_start,
            div_factor,
            final_div_factor,
            ..OneCycleLRConfig::new(optimizer.lrs(), total)
        };
        return Ok((Some(Box::new(OneCycleLR::new(optimizer, c)?)), true));
    }
    let main_epochs = epochs.saturating_sub(warmup).max(1);
    let main: Option<Box<dyn LrScheduler>> = match &config.scheduler {
        SchedulerConfig::None => None,
        SchedulerConfig::Step { step_size, gamma } => {
            Some(Box::new(StepLR::new(optimizer, *step_size as u64, *gamma)?))
        }
        SchedulerConfig::MultiStep { milestones, gamma } => Some(Box::new(MultiStepLR::new(
            optimizer,
            milestones.iter().map(|m| (*m as u64).saturating_sub(warmup)).collect(),
            *gamma,
        )?)),
        SchedulerConfig::Cosine { eta_min } => {
            Some(Box::new(CosineAnnealingLR::new(optimizer, main_epochs, *eta_min)?))
        }
        SchedulerConfig::OneCycle { .. } => unreachable!("handled above"),
    };
    if warmup == 0 {
        return Ok((main, false));
    }
    let warm: Box<dyn LrScheduler> =
        Box::new(LinearLR::new(optimizer, LinearLRConfig::warmup(0.01, warmup))?);
    Ok(match main {
        None => (Some(warm), false),
        Some(main) => (Some(Box::new(SequentialLR::new(optimizer, vec![warm, main], vec![warmup])?)), false),
    })
}

/// What one training epoch measured.
#[derive(Debug, Clone)]
pub struct EpochTrain {
    /// Loss and accuracy over the epoch.
    pub metrics: MetricsSummary,
    /// Wall time.
    pub seconds: f64,
    /// Time spent waiting for batches.
    pub stall: Duration,
    /// Images trained on.
    pub images: u64,
    /// Optimizer steps skipped for non-finite gradients (`train.on_nonfinite = "skip"`).
    pub skipped_steps: u64,
}

/// Runs `model` over `loader` in evaluation mode (no-grad, BatchNorm's running statistics,
/// no dropout) and returns loss, top-1/top-k accuracy and the confusion matrix.
/// `config.train.amp` and `config.train.top_k` apply.
pub fn evaluate(
    model: &dyn Module,
    loader: &mut Loader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
    label: &str,
) -> Result<MetricsSummary> {
    let (amp, top_k) = (config.train.amp, config.train.top_k);
    let _guard = no_grad();
    let loss_fn = CrossEntropyLoss::new();
    let mut metrics = ClassificationMetrics::new(num_classes, top_k, device);
    let bar = progress.bar(loader.len() as u64, label);
    for batch in loader.epoch(0) {
        let (x, y) = batch?;
        let (x, y) = (to_device_non_blocking(&x, device), to_device_non_blocking(&y, device));
        let logits = {
            let _amp = autocast_if(amp, device, amp_kind(device))?;
            model.forward_t(&x, false)
        }
        .to_kind(Kind::Float);
        let loss = loss_fn.forward(&logits, &y)?;
        metrics.update(&loss, &logits, &y);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(metrics.compute())
}

fn amp_kind(device: Device) -> Kind {
    if device.is_cuda() {
        Kind::Half
    } else {
        Kind::BFloat16
    }
}

/// The numbers `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run folder.
    pub run_dir: PathBuf,
    /// Best validation top-1 accuracy.
    pub best_val_acc: f64,
    /// The (1-based) epoch it was reached at.
    pub best_epoch: u64,
    /// Test top-1 accuracy of the best checkpoint, when there is a `test/` split.
    pub test_acc: Option<f64>,
    /// Test top-k accuracy.
    pub test_topk_acc: Option<f64>,
    /// Epochs completed.
    pub epochs: u64,
    /// Whether early stopping ended the run.
    pub stopped_early: bool,
    /// Wall time of this invocation, seconds.
    pub seconds: f64,
    /// Mean training throughput over this invocation's epochs.
    pub train_images_per_s: f64,
    /// Class names, in index order.
    pub classes: Vec<String>,
}

/// What the checkpoint's `config` holds beyond the TrainConfig, so eval/predict/export can
/// rebuild the model and its preprocessing from a checkpoint alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The effective training config.
    pub config: TrainConfig,
    /// Class names, in index order.
    pub classes: Vec<String>,
}

impl ModelCard {
    /// Reads the card from a checkpoint's metadata.
    pub fn from_checkpoint(checkpoint: &Checkpoint) -> Result<Self> {
        serde_json::from_value(checkpoint.meta.config.clone()).map_err(|e| TrainError::InvalidConfig {
            field: "checkpoint config".into(),
            value: checkpoint.dir.display().to_string(),
            reason: format!("not a Torchlight training checkpoint: {e}"),
        })
    }

    /// Builds the model this card describes (untrained; restore the checkpoint into it).
    pub fn build_model(&self, device: Device) -> Result<ResNet> {
        let mut config = self.config.clone();
        config.model.pretrained = None;
        build_model(&config, self.classes.len(), device)
    }
}

/// Trains as `config` says, in a new run folder under `config.train.out_dir`, or continues the
/// run in `resume` from its `last` checkpoint (with that run's config).
pub fn fit(config: TrainConfig, resume: Option<&Path>, progress: &Progress) -> Result<RunSummary> {
    let started = Instant::now();
    let (config, existing) = match resume {
        Some(dir) => {
            let run = RunDir::open(dir)?;
            (TrainConfig::from_toml_file(run.config_path())?, Some(run))
        }
        None => {
            config.validate()?;
            (config, None)
        }
    };
    // Bad data is reported before a run folder exists, so a failed start leaves nothing.
    let splits = open_splits(&config)?;
    let (run, checkpoint) = match existing {
        Some(run) => {
            let checkpoint = Checkpoint::load(run.checkpoints_dir()?.join("last"))?;
            (run, Some(checkpoint))
        }
        None => {
            let run = RunDir::create_next(&config.train.out_dir)?;
            config.write_toml_file(run.config_path())?;
            (run, None)
        }
    };
    let t = &config.train;
    seed_everything(t.seed);
    let device = t.device.parse::<DeviceSpec>()?.resolve()?;
    let classes = splits.classes.clone();
    let num_classes = config.model.num_classes.unwrap_or(classes.len());
    if num_classes != classes.len() {
        return Err(TrainError::InvalidConfig {
            field: "model.num_classes".into(),
            value: num_classes.to_string(),
            reason: format!("the data has {} classes: {}", classes.len(), classes.join(", ")),
        });
    }
    let mut train_loader = loader(splits.train, &config, true, device)?;
    let mut val_loader = loader(splits.val, &config, false, device)?;
    let model = build_model(&config, num_classes, device)?;
    let mut optimizer = build_optimizer(&config, &model)?;
    let steps_per_epoch = train_loader.len().div_ceil(t.accumulation_steps);
    let (mut scheduler, per_batch) = build_scheduler(&config, optimizer.as_mut(), steps_per_epoch)?;
    let mut scaler = GradScaler::new(GradScalerConfig::default().with_enabled(t.amp && device.is_cuda()))?;
    let checkpoints = run.checkpoints_dir()?;
    let mut manager = CheckpointManager::new(&checkpoints, "val_acc", MetricMode::Max);
    let card = serde_json::to_value(ModelCard { config: config.clone(), classes: classes.clone() })
        .expect("the model card serialises");

    let mut epoch = 0u64;
    let mut global_step = 0u64;
    if let Some(checkpoint) = &checkpoint {
        let sched = scheduler.as_mut().map(|s| &mut **s as &mut dyn LrScheduler);
        let p = checkpoint.restore(&model, Some(optimizer.as_mut()), sched, Some(&mut scaler))?;
        (epoch, global_step) = (p.epoch, p.global_step);
        progress.line(&format!("resuming {} after epoch {epoch}", run.path().display()));
    }
    let mut csv = match checkpoint {
        Some(_) => CsvLogger::resume(run.metrics_csv_path(), epoch as usize)?,
        None => CsvLogger::create(run.metrics_csv_path())?,
    };
    let mut events = match epoch {
        0 => EventWriter::create(run.path())?,
        _ => EventWriter::resume(run.path(), epoch as i64)?,
    };
    let mut records = crate::csv_log::read_metrics_csv(run.metrics_csv_path())?;

    let freeze = config.model.freeze_epochs as u64;
    let total = count_parameters(&model).total;
    if epoch < freeze {
        freeze_all_but(&model, "fc.");
        progress.line(&format!(
            "backbone frozen for epochs 1-{freeze}: {} of {total} parameters train",
            count_parameters(&model).trainable
        ));
    }
    let mut trained_images = 0u64;
    let mut trained_seconds = 0.0;
    let mut stale_epochs = 0usize;
    let mut stopped_early = false;
    while epoch < t.epochs as u64 {
        if freeze > 0 && epoch == freeze {
            let before = count_parameters(&model).trainable;
            unfreeze(&model, "");
            let after = count_parameters(&model).trainable;
            if after <= before {
                return Err(TrainError::Training {
                    epoch: epoch + 1,
                    reason: format!("unfreezing left the trainable count at {after} of {total}"),
                });
            }
            progress.line(&format!(
                "epoch {}: backbone unfrozen, {before} -> {after} trainable parameters",
                epoch + 1
            ));
        }
        let started_epoch = Instant::now();
        let train = train_one_epoch(
            &model,
            optimizer.as_mut(),
            scheduler.as_mut().filter(|_| per_batch).map(|s| &mut **s as &mut dyn LrScheduler),
            &mut scaler,
            &mut train_loader,
            &config,
            device,
            num_classes,
            epoch,
            &mut global_step,
            progress,
        )?;
        let val = evaluate(&model, &mut val_loader, device, &config, num_classes, progress, "validate")?;
        let lr = optimizer.lrs().last().copied().unwrap_or(0.0);
        if let Some(s) = scheduler.as_mut().filter(|_| !per_batch) {
            s.step(optimizer.as_mut())?;
        }
        epoch += 1;
        let seconds = started_epoch.elapsed().as_secs_f64();
        let record = EpochRecord {
            epoch: epoch as usize,
            lr,
            train_loss: train.metrics.loss,
            train_acc: train.metrics.top1,
            val_loss: val.loss,
            val_acc: val.top1,
            seconds,
            images_per_s: train.images as f64 / train.seconds.max(1e-9),
            data_stall_pct: 100.0 * train.stall.as_secs_f64() / train.seconds.max(1e-9),
        };
        trained_images += train.images;
        trained_seconds += train.seconds;
        csv.append(&record)?;
        let topk_tag = format!("accuracy/val_top{}", val.k);
        for (tag, value) in [
            ("loss/train", record.train_loss),
            ("loss/val", record.val_loss),
            ("accuracy/train", record.train_acc),
            ("accuracy/val", record.val_acc),
            (topk_tag.as_str(), val.topk),
            ("lr", lr),
            ("throughput/images_per_s", record.images_per_s),
            ("throughput/data_stall_pct", record.data_stall_pct),
        ] {
            events.add_scalar(tag, value, epoch as i64)?;
        }
        records.push(record);
        plot_curves(&records, run.curves_path())?;
        let snapshot = Snapshot {
            model: &model,
            optimizer: Some(optimizer.as_ref()),
            scheduler: scheduler.as_deref(),
            grad_scaler: Some(&scaler),
            progress: torchlight_checkpoint::Progress { epoch, global_step },
            metric: None,
            best: None,
            data_seed: Some(t.seed),
            rng: true,
            config: card.clone(),
        };
        let saved = manager.save(snapshot, val.top1)?;
        progress.line(&format!(
            "epoch {epoch}/{}  train loss {:.4} acc {:.3}  val loss {:.4} acc {:.3} top{} {:.3}  lr {lr:.2e}  {:.0} img/s  stall {:.0}%  {seconds:.1}s{}",
            t.epochs,
            record.train_loss,
            record.train_acc,
            record.val_loss,
            record.val_acc,
            val.k,
            val.topk,
            record.images_per_s,
            record.data_stall_pct,
            if saved.best { "  *best*" } else { "" }
        ));
        stale_epochs = if saved.best { 0 } else { stale_epochs + 1 };
        if t.early_stopping_patience.is_some_and(|p| stale_epochs >= p) {
            progress.line(&format!("early stopping: no better val_acc for {stale_epochs} epochs"));
            stopped_early = true;
            break;
        }
    }
    let best = manager.best_metric().cloned();

    let (mut test_acc, mut test_topk_acc) = (None, None);
    if let Some(test) = splits.test {
        let best_checkpoint = Checkpoint::load(manager.best())?;
        best_checkpoint.restore_model(&model)?;
        let mut test_loader = loader(test, &config, false, device)?;
        let summary = evaluate(&model, &mut test_loader, device, &config, num_classes, progress, "test")?;
        plot_confusion_matrix(&summary.confusion, &classes, run.confusion_matrix_path())?;
        progress.line(&format!(
            "test (best checkpoint, epoch {}): acc {:.4}  top{} {:.4}  on {} images",
            best.as_ref().map_or(0, |b| b.epoch),
            summary.top1,
            summary.k,
            summary.topk,
            summary.count
        ));
        (test_acc, test_topk_acc) = (Some(summary.top1), Some(summary.topk));
    }
    let summary = RunSummary {
        run_dir: run.path().to_path_buf(),
        best_val_acc: best.as_ref().map_or(f64::NAN, |b| b.value),
        best_epoch: best.as_ref().map_or(0, |b| b.epoch),
        test_acc,
        test_topk_acc,
        epochs: epoch,
        stopped_early,
        seconds: started.elapsed().as_secs_f64(),
        train_images_per_s: trained_images as f64 / trained_seconds.max(1e-9),
        classes,
    };
    let path = run.summary_path();
    let text = serde_json::to_string_pretty(&summary).expect("the summary serialises");
    std::fs::write(&path, text).map_err(|e| TrainError::io(&path, e))?;
    Ok(summary)
}

/// One epoch of training: forward under autocast (when AMP is on), cross-entropy, backward
/// through the GradScaler, optional clipping and accumulation, optimizer (and per-batch
/// scheduler) steps. Loss is read back to the host only every `log_interval` steps.
///
/// Guards (`guard.rs`): the model must sit on `device` ([`TrainError::DeviceMismatch`]); each
/// optimizer step first checks all gradients for NaN/Inf in one fused kernel with one host read
/// (skipped when an enabled GradScaler does this itself) and stops with
/// [`TrainError::NonFinite`] or, under `train.on_nonfinite = "skip"`, drops the step; a device
/// out-of-memory error becomes [`TrainError::OutOfMemory`] with the largest batch that fits.
#[allow(clippy::too_many_arguments)]
pub fn train_one_epoch(
    model: &dyn Module,
    optimizer: &mut dyn Optimizer,
    mut scheduler: Option<&mut dyn LrScheduler>,
    scaler: &mut GradScaler,
    loader: &mut Loader,
    config: &TrainConfig,
    device: Device,
    num_classes: usize,
    epoch: u64,
    global_step: &mut u64,
    progress: &Progress,
) -> Result<EpochTrain> {
    let t = &config.train;
    let loss_fn = CrossEntropyLoss::new().with_label_smoothing(t.label_smoothing);
    let mut metrics = ClassificationMetrics::new(num_classes, t.top_k, device);
    let started = Instant::now();
    let bar = progress.bar(loader.len() as u64, &format!("epoch {}", epoch + 1));
    let accumulation = t.accumulation_steps.max(1);
    let mut micro = 0usize;
    let mut images = 0u64;
    let batches = loader.len();
    // The gradient guard is off under an enabled GradScaler, which skips such steps itself.
    let guard_grads = !scaler.is_enabled();
    let skip_nonfinite = t.on_nonfinite == NonFiniteAction::Skip;
    // Under `skip`, a window's metrics are counted only once its step is known to be good.
    let mut pending: Vec<(Tensor, Tensor, Tensor)> = Vec::new();
    let mut skipped_steps = 0u64;
    let mut counted = 0u64;
    guard::check_device(model, device)?;
    let mut epoch_iter = loader.epoch(epoch);
    for (i, batch) in epoch_iter.by_ref().enumerate() {
        let (x, y) = batch?;
        let n = y.size()[0] as u64;
        let (x, y) = (to_device_non_blocking(&x, device), to_device_non_blocking(&y, device));
        let step = catch_unwind(AssertUnwindSafe(|| {
            let logits = {
                let _amp = autocast_if(t.amp, device, amp_kind(device))?;
                model.forward_t(&x, true)
            }
            .to_kind(Kind::Float);
            let loss = loss_fn.forward(&logits, &y)?;
            scaler.scale(&(&loss / accumulation as f64)).backward();
            Ok::<_, TrainError>((loss, logits))
        }));
        let (loss, logits) = match step {
            Ok(result) => result?,
            Err(payload) => {
                let message = guard::panic_message(payload.as_ref());
                if !guard::is_out_of_memory(&message) {
                    std::panic::resume_unwind(payload);
                }
                optimizer.zero_grad()?;
                let image_size = config.data.image_size as usize;
                let fits = guard::largest_fitting_batch(t.batch_size, |b| {
                    guard::batch_fits(model, device, image_size, b)
                });
                return Err(TrainError::OutOfMemory {
                    device: guard::device_name(device),
                    batch_size: t.batch_size,
                    image_size,
                    fits,
                });
            }
        };
        if skip_nonfinite {
            pending.push((loss.shallow_clone(), logits, y.shallow_clone()));
        } else {
            metrics.update(&loss, &logits, &y);
            counted += 1;
        }
        micro += 1;
        images += n;
        if micro == accumulation || i + 1 == batches {
            micro = 0;
            let params: Vec<Tensor> =
                optimizer.named_parameters().into_iter().map(|(_, p)| p.shallow_clone()).collect();
            if guard_grads && !guard::grads_all_finite(params.iter())? {
                if !skip_nonfinite {
                    return Err(TrainError::NonFinite {
                        epoch: epoch + 1,
                        step: *global_step + 1,
                        lr: optimizer.lrs().last().copied().unwrap_or(0.0),
                        loss: loss.double_value(&[]),
                        inputs_finite: guard::is_all_finite(&x),
                        parameter: guard::first_non_finite_grad(model),
                    });
                }
                skipped_steps += 1;
                pending.clear();
                optimizer.zero_grad()?;
            } else {
                for (loss, logits, y) in pending.drain(..) {
                    metrics.update(&loss, &logits, &y);
                    counted += 1;
                }
                if let Some(max_norm) = t.grad_clip {
                    scaler.unscale_(optimizer)?;
                    let _total_norm = clip_grad_norm(params.iter(), max_norm, 2.0, false)?;
                }
                scaler.step(optimizer)?;
                scaler.update()?;
                optimizer.zero_grad()?;
            }
            *global_step += 1;
            if let Some(s) = scheduler.as_deref_mut() {
                s.step(optimizer)?;
            }
        }
        if (i + 1) % t.log_interval.max(1) == 0 && counted > 0 {
            let running = metrics.running_loss();
            ensure_finite("training loss", &Tensor::from(running)).map_err(|_| TrainError::Training {
                epoch: epoch + 1,
                reason: format!("loss became {running} at batch {}", i + 1),
            })?;
            bar.set_message(format!("loss {running:.4}"));
        }
        bar.inc(1);
    }
    let stall = epoch_iter.stats().stall;
    drop(epoch_iter);
    bar.finish_and_clear();
    let metrics = metrics.compute();
    if !metrics.loss.is_finite() {
        return Err(TrainError::Training {
            epoch: epoch + 1,
            reason: format!("mean training loss is {}", metrics.loss),
        });
    }
    if skipped_steps > 0 {
        progress.line(&format!(
            "epoch {}: skipped {skipped_steps} optimizer steps with non-finite gradients (train.on_nonfinite = \"skip\")",
            epoch + 1
        ));
    }
    Ok(EpochTrain { metrics, seconds: started.elapsed().as_secs_f64(), stall, images, skipped_steps })
}
