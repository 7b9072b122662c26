//! `torchlight tune`: the lr range test ([`Trainer::lr_find`], `tune lr`) and the batch-size
//! search ([`Trainer::batch_size_find`], `tune batch-size`) on exactly what `fit` would train
//! (the config's model, param groups, optimizer, loss, Mixup/CutMix, AMP, accumulation and
//! clipping, the training split through the recipe's own train transform). The range test
//! writes `lr_finder.png` and suggests `optim.lr`; the search suggests `train.batch_size` and
//! `train.accumulation_steps`. No run folder is made. The range test also runs as the ranks of a
//! data-parallel job ([`lr_find_distributed`], `tune lr --nproc N`), sweeping the global batch
//! `fit_distributed` trains with.

use crate::config::{format_lr, TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::image::{apply_pretrained_cfg, open_splits, sharded_loader, sync_batch_norm};
use crate::model::{build_model, check_batch_norm_batches, model_architecture};
use crate::optimizer::build_optimizer;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Device, Tensor};
use torchlight_data::{DataLoader, Subset};
use torchlight_tensor::seed_everything;
use torchlight_train::{
    BatchSizeFindConfig, BatchSizeFinder, BatchSuggestion, Distributed, LrFindConfig, LrFinder, Progress,
    Trainer,
};

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
    config: TrainConfig,
    finder: &LrFindConfig,
    out: &Path,
    progress: &Progress,
) -> Result<LrFindReport> {
    lr_find_on(config, finder, out, progress, None)
}

/// [`lr_find`] as one rank of a data-parallel run in `world` (every rank calls it with the same
/// config, as `fit_distributed`): each rank sweeps on its shard of the training split,
/// `train.batch_size` images per rank, with the gradients averaged over the ranks before each
/// step (and `train.sync_bn` as `fit` has it) and each step's loss the ranks' mean, so the curve
/// is that of the global batch `fit_distributed` trains with. Rank 0 alone prints and writes the
/// plot; every rank returns the same report.
pub fn lr_find_distributed(
    config: TrainConfig,
    finder: &LrFindConfig,
    out: &Path,
    progress: &Progress,
    world: Box<dyn Distributed>,
) -> Result<LrFindReport> {
    lr_find_on(config, finder, out, progress, Some(world))
}

fn lr_find_on(
    mut config: TrainConfig,
    finder: &LrFindConfig,
    out: &Path,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<LrFindReport> {
    let main = world.as_ref().is_none_or(|w| w.is_main());
    let quiet = Progress::quiet();
    let progress = if main { progress } else { &quiet };
    let shard = world.as_ref().map(|w| (w.rank(), w.world_size()));
    config.validate()?;
    image_recipe(
        &mut config,
        "the lr finder runs the image recipe; for a text config run the range test with \
         Trainer::lr_find from the library",
        progress,
    )?;
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    let per_rank = torchlight_data::Dataset::len(&splits.train).div_ceil(shard.map_or(1, |(_, n)| n));
    check_batch_norm_batches(&config, per_rank.min(config.train.batch_size))?;
    let t = &config.train;
    seed_everything(t.seed);
    let device = t.device_spec()?.resolve()?;
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    let task = crate::image::training_task(&config, &splits, num_classes, device)?;
    let mut train_loader = sharded_loader(splits.train, &config, true, device, shard)?;
    let head = model_architecture(&config)?.head();
    let mut model = build_model(&config, num_classes, device)?;
    if t.sync_bn {
        progress.line(&sync_batch_norm(model.as_mut(), world.as_deref(), config.model.freeze_bn));
    }
    let mut optimizer = build_optimizer(&config, model.as_ref(), head)?;
    // The test sweeps the largest group's lr; optim.lr is the head's.
    let largest = optimizer.lrs().into_iter().fold(0.0f64, f64::max);
    let scale = if largest > 0.0 { config.optim.lr / largest } else { 1.0 };
    let ranks = match shard {
        Some((_, n)) => format!(" on each of {n} ranks"),
        None => String::new(),
    };
    let mut trainer = fit_trainer(&config, num_classes, device, progress, world)?;
    progress.line(&format!(
        "lr range test: {} steps of {} images{ranks}{}, lr {:.1e} to {:.1e} ({}), {} training images{}",
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
        per_rank,
        if shard.is_some() { " per rank" } else { "" }
    ));
    let mut found = trainer.lr_find(model.as_mut(), &task, optimizer.as_mut(), &mut train_loader, finder)?;
    if scale != 1.0 {
        for lr in &mut found.lrs {
            *lr *= scale;
        }
    }
    let plot = out.join(LR_FINDER_PNG);
    if main {
        std::fs::create_dir_all(out).map_err(|e| RecipeError::io(out, e))?;
        found.plot(&plot)?;
    }
    Ok(LrFindReport { finder: found, current_lr: config.optim.lr, plot })
}

/// What [`batch_size_find`] searches and suggests for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSizeSearch {
    /// The largest batch tried (`tune batch-size --max-batch-size`). Required on the CPU, where
    /// a batch past the machine's memory is not an error to catch but the kernel killing the
    /// process. On CUDA the default is the number of training images (a rank's share of them
    /// over [`ranks`](Self::ranks)), as a batch is never larger than an epoch (Lightning's
    /// finder stops there too); a larger value is capped there.
    pub max_batch_size: Option<usize>,
    /// The effective batch (samples per optimizer step, over all ranks) the suggestion keeps
    /// (`--target-batch`); default the config's `train.batch_size * train.accumulation_steps *
    /// ranks`.
    pub target_batch: Option<usize>,
    /// The ranks the suggestion is for (`tune batch-size --nproc N`; 0 counts as 1, one
    /// process). Each rank of `train --nproc N` trains its own batch of `train.batch_size` on
    /// its own device, so the search on this one device finds the per-rank batch, and the
    /// suggestion keeps the global effective batch `batch_size * accumulation_steps * ranks`.
    pub ranks: usize,
}

/// What [`batch_size_find`] found and suggests.
#[derive(Debug, Clone)]
pub struct BatchSizeReport {
    /// The tries and the largest batch that trained.
    pub finder: BatchSizeFinder,
    /// The device searched (`cuda:0`, `cpu`).
    pub device: String,
    /// The largest batch tried, and where that limit came from.
    pub ceiling: (usize, String),
    /// The effective batch the suggestion keeps, over all [`ranks`](Self::ranks).
    pub target: usize,
    /// The config's `train.batch_size` and `train.accumulation_steps`.
    pub current: (usize, usize),
    /// The ranks the suggestion is for (1: one process).
    pub ranks: usize,
}

impl BatchSizeReport {
    /// `train.batch_size` (per rank) and `train.accumulation_steps` for the target effective
    /// batch over the ranks, if a batch trained: [`suggest_accumulation`] of the per-rank
    /// share `ceil(target / ranks)`, which gives the fewest steps `k = ceil(target / (largest *
    /// ranks))` and the smallest batch `ceil(target / (k * ranks))` that reach the target.
    ///
    /// [`suggest_accumulation`]: torchlight_train::suggest_accumulation
    pub fn suggestion(&self) -> Option<BatchSuggestion> {
        self.finder.suggest(self.target.div_ceil(self.ranks.max(1)))
    }

    /// The effective batch of `s` over the ranks: `batch_size * accumulation_steps * ranks`.
    pub fn effective(&self, s: &BatchSuggestion) -> usize {
        s.effective() * self.ranks.max(1)
    }

    /// The config lines to use: `train.batch_size = 48` and `train.accumulation_steps = 2`.
    pub fn config_lines(&self) -> Option<[String; 2]> {
        self.suggestion().map(|s| {
            [
                format!("train.batch_size = {}", s.batch_size),
                format!("train.accumulation_steps = {}", s.accumulation_steps),
            ]
        })
    }
}

/// The largest batch that trains for `config` (`train.task = "image"`), by
/// [`Trainer::batch_size_find`]: sizes doubled from 2 until one runs out of memory or the
/// ceiling trained, then bisected, each try two whole training steps of exactly what `fit`
/// trains (the config's model at `data.image_size`, param groups, optimizer, loss, Mixup/CutMix,
/// AMP and clipping; accumulation does not change a micro-batch's memory) on real training
/// images through the recipe's train transform (the first images of the training split in
/// order, repeated when a try needs more, each augmented with its own seed as epoch 1 would).
/// With `train.model_ema` a copy of the weights is held on the device during the search, as
/// the EMA holds one during a run. Everything is put back after each try and the device's
/// cached memory handed back, so a `fit` after it trains as it would have.
///
/// What it does not measure: a backbone `fit` freezes for its first epochs trains in every try
/// (the unfrozen epochs, which need the most memory), and the loader's pinned host batches
/// and other processes on the GPU are not counted. No run folder is made.
pub fn batch_size_find(
    mut config: TrainConfig,
    search: &BatchSizeSearch,
    progress: &Progress,
) -> Result<BatchSizeReport> {
    config.validate()?;
    image_recipe(
        &mut config,
        "the batch-size finder runs the image recipe; for a text config run \
         Trainer::batch_size_find from the library",
        progress,
    )?;
    let t = &config.train;
    let device = t.device_spec()?.resolve()?;
    if device == Device::Cpu && search.max_batch_size.is_none() {
        return Err(RecipeError::InvalidConfig {
            field: "train.device".into(),
            value: format!("{:?}", t.device),
            reason: "on the CPU a batch past the machine's memory is not an error the batch-size search \
                     can catch but the kernel killing the process: give the largest batch to try \
                     (BatchSizeSearch::max_batch_size, tune batch-size --max-batch-size N)"
                .into(),
        });
    }
    if search.max_batch_size == Some(0) || search.target_batch == Some(0) {
        return Err(RecipeError::InvalidConfig {
            field: if search.max_batch_size == Some(0) { "max_batch_size" } else { "target_batch" }.into(),
            value: "0".into(),
            reason: "must be at least 1".into(),
        });
    }
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    let t = &config.train;
    let images = torchlight_data::Dataset::len(&splits.train);
    if images == 0 {
        return Err(RecipeError::InvalidConfig {
            field: "data.root".into(),
            value: config.data.root.display().to_string(),
            reason: "the training split holds no image".into(),
        });
    }
    // A rank's batch is never larger than its shard of the epoch.
    let ranks = search.ranks.max(1);
    let (cap, cap_text) = match ranks {
        1 => (images, format!("the {images} training images")),
        n => {
            let shard = images.div_ceil(n);
            (shard, format!("a rank's {shard} of the {images} training images over {n} ranks"))
        }
    };
    let ceiling = match search.max_batch_size {
        Some(max) if max <= cap => (max, "--max-batch-size".to_string()),
        Some(max) => (cap, format!("{cap_text} (--max-batch-size {max} is more)")),
        None => (cap, cap_text),
    };
    let target = search.target_batch.unwrap_or(t.batch_size * t.accumulation_steps * ranks);
    seed_everything(t.seed);
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    let task = crate::image::training_task(&config, &splits, num_classes, device)?;
    let head = model_architecture(&config)?.head();
    let mut model = build_model(&config, num_classes, device)?;
    let mut optimizer = build_optimizer(&config, model.as_ref(), head)?;
    let mut trainer = fit_trainer(&config, num_classes, device, progress, None)?;
    // The EMA's copy of the weights lives on the device for the whole run.
    let ema_copy: Vec<Tensor> = if t.model_ema {
        torchlight_nn::state_dict(model.as_ref()).into_iter().map(|(_, w)| w.detach().copy()).collect()
    } else {
        Vec::new()
    };
    progress.line(&format!(
        "batch-size search on {}: doubling from 2 up to {} ({}), two training steps of {} on {}px images per try{}{}",
        torchlight_train::guard::device_name(device),
        ceiling.0,
        ceiling.1,
        config.model.name,
        config.data.image_size(),
        if t.amp { " under AMP" } else { "" },
        if t.model_ema { ", the model EMA's copy of the weights held" } else { "" },
    ));
    let train = Arc::new(splits.train);
    let (workers, seed) = (config.data.workers, t.seed);
    let mut batches = |n: usize| -> torchlight_train::Result<(Tensor, Tensor)> {
        let indices = (0..n).map(|i| i % images).collect();
        let mut loader = DataLoader::builder(Subset::new(Arc::clone(&train), indices)?)
            .batch_size(n)
            .num_workers(workers)
            .pin_memory(device.is_cuda())
            .seed(seed)
            .build()?;
        let batch = loader.epoch(0).next().expect("a loader of n >= 1 images yields a batch")?;
        Ok(batch)
    };
    // A batch of one gives a training BatchNorm one value per channel, which PyTorch refuses:
    // for such a model the search ends at 2 (a ceiling of 1 is the config's error).
    let min_batch = match check_batch_norm_batches(&config, 1) {
        Ok(()) => 1,
        Err(e) if ceiling.0 < 2 => return Err(e),
        Err(_) => 2,
    };
    let finder_config = BatchSizeFindConfig::new(ceiling.0)
        .with_init_batch_size(ceiling.0.min(2))
        .with_min_batch_size(min_batch);
    let finder =
        trainer.batch_size_find(model.as_mut(), &task, optimizer.as_mut(), &mut batches, &finder_config)?;
    drop(ema_copy);
    Ok(BatchSizeReport {
        finder,
        device: torchlight_train::guard::device_name(device),
        ceiling,
        target,
        current: (t.batch_size, t.accumulation_steps),
        ranks,
    })
}

/// Refuses a config that is not the image recipe's (`reason` says which tuner and what to use
/// instead) and applies a Hub folder's `pretrained_cfg`, as `fit` does.
fn image_recipe(config: &mut TrainConfig, reason: &str, progress: &Progress) -> Result<()> {
    if config.train.task != TaskKind::Image {
        return Err(RecipeError::InvalidConfig {
            field: "train.task".into(),
            value: format!("{:?}", config.train.task.name()),
            reason: reason.into(),
        });
    }
    if let Some(line) = apply_pretrained_cfg(config)? {
        progress.line(&line);
        config.validate()?;
    }
    Ok(())
}

/// The Trainer `fit` steps with: the config's device, step settings (AMP, clipping,
/// accumulation), data seed and Mixup/CutMix batch transform.
fn fit_trainer(
    config: &TrainConfig,
    num_classes: usize,
    device: Device,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<Trainer> {
    let mut builder = Trainer::builder()
        .device(device)
        .step_config(crate::doctor::step_config(config))
        .data_seed(config.train.seed)
        .progress(progress.clone());
    if let Some(world) = world {
        builder = builder.distributed(world);
    }
    if let Some(mix) = crate::image::batch_mixing(config, num_classes)? {
        builder = builder.batch_transform::<(Tensor, Tensor)>(mix);
    }
    Ok(builder.build()?)
}
