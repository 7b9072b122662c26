//! `fit` and `resume`: the classification recipe, a `TrainConfig` in; a trained, tested and
//! checkpointed run folder out.

use super::data::{class_weights, open_splits, sharded_loader, Splits};
use crate::card::ModelCard;
use crate::config::{TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::model::{build_model, check_batch_norm_batches, model_architecture};
use crate::optimizer::{build_optimizer, build_plateau, build_scheduler, param_groups};
use crate::resume::{prepare_resume, Resumed};
use crate::run_dir::{new_run_dir, RunDir};
use crate::summary::{check_finite_validation, ParamGroupSummary, RunSummary};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::Tensor;
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::Module;
use torchlight_tensor::seed_everything;
use torchlight_train::{
    best_of, plot_confusion_matrix, BackboneFinetuning, Classification, Distributed, EarlyStopping,
    MetricsSummary, MixupCutMix, ModelEma, Monitor, Progress, Stage, Trainer,
};

/// Trains as `config` says in a new run folder under `config.train.out_dir`. Everything that
/// can fail before training (the config, the data, the model and its weights) is checked
/// before the folder is made, so a failed start leaves nothing behind.
pub fn fit(config: TrainConfig, progress: &Progress) -> Result<RunSummary> {
    fit_on(config, progress, None)
}

/// [`fit`] as one rank of a data-parallel run in `world` (every rank calls it with the same
/// config): each rank trains on its shard of the data, `train.batch_size` images per rank per
/// batch (the global batch is `world_size` times it); rank 0 alone makes the run folder and
/// writes logs, checkpoints and the summary, and prints. Every rank returns the same summary.
pub fn fit_distributed(
    config: TrainConfig,
    progress: &Progress,
    world: Box<dyn Distributed>,
) -> Result<RunSummary> {
    fit_on(config, progress, Some(world))
}

fn fit_on(
    mut config: TrainConfig,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<RunSummary> {
    config.validate()?;
    check_image_task(&config)?;
    // A Hub folder's preprocessing fills the keys the config leaves unset, before the
    // transforms are built; config.toml then holds the values in effect.
    if let Some(line) = super::apply_pretrained_cfg(&mut config)? {
        if world.as_deref().is_none_or(|w| w.is_main()) {
            progress.line(&line);
        }
        config.validate()?;
    }
    // config.toml records the size in effect, whoever chose it.
    config.data.image_size = Some(config.data.image_size());
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    // The architecture takes this image size (a ViT's patch grid): built once, uninitialised.
    let arch = model_architecture(&config)?;
    let spec = torchlight_nn::ModelSpec::new(2, i64::from(config.data.image_size()));
    arch.build(spec, torchlight_nn::LayerOptions::default().skip_init())?;
    crate::model::check_eval_size(&config)?;
    if let Some(w) = &config.model.pretrained {
        // The OS's own words ("No such file or directory (os error 2)"), not a bare error kind.
        match std::fs::metadata(w) {
            Err(e) => return Err(RecipeError::io(w, e)),
            Ok(m) if m.is_dir() => check_hub_folder(&config, w)?,
            Ok(m) if !m.is_file() => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a file (a .pth or .safetensors file) or a Hub model folder",
                );
                return Err(RecipeError::io(w, e));
            }
            Ok(_) => {}
        }
    }
    // The training loader drops a short last batch, so its smallest batch is a full one, or
    // the whole (per-rank) split when that is smaller.
    let world_size = world.as_deref().map_or(1, |w| w.world_size());
    let per_rank = torchlight_data::Dataset::len(&splits.train).div_ceil(world_size);
    check_batch_norm_batches(&config, per_rank.min(config.train.batch_size))?;
    let run = new_run_dir(&config, world.as_deref(), |run| config.write_toml_file(run.config_path()))?;
    train_run(config, splits, run, None, 0, progress, world)
}

/// `train.sync_bn`: has `world` make `model`'s BatchNorms synchronised (every rank's batch
/// statistics together), or leaves them plain in a single process, where they already see the
/// whole batch. Returns the line saying which.
pub(crate) fn sync_batch_norm(
    model: &mut dyn Module,
    world: Option<&dyn Distributed>,
    frozen: bool,
) -> String {
    let Some(world) = world.filter(|w| w.world_size() > 1) else {
        return "train.sync_bn: a single process trains with plain BatchNorm (its batch is the whole batch; \
                nothing to synchronise)"
            .to_string();
    };
    match world.convert_sync_batch_norm(model) {
        0 => "train.sync_bn: no BatchNorm to synchronise (the model has none, or this world cannot)"
            .to_string(),
        n => format!(
            "train.sync_bn: {n} BatchNorm layers normalise with the statistics of all {} ranks' batches{}",
            world.world_size(),
            if frozen { " once unfrozen (model.freeze_bn keeps them plain)" } else { "" }
        ),
    }
}

/// This recipe trains `train.task = "image"` runs only (`text::fit` the text ones).
pub(crate) fn check_image_task(config: &TrainConfig) -> Result<()> {
    if config.train.task != TaskKind::Image {
        return Err(RecipeError::InvalidConfig {
            field: "train.task".into(),
            value: format!("{:?}", config.train.task.name()),
            reason: "the image recipe trains image runs; text runs train through torchlight_recipes::text"
                .into(),
        });
    }
    Ok(())
}

/// Continues the run in `run_dir` from its `last` checkpoint, exactly where it stopped (mid-
/// epoch too), with its own config; `changes` (`("train.epochs", "20")`, ...) may change only
/// the [`RESUME_CHANGEABLE`](crate::image::RESUME_CHANGEABLE) keys. More epochs than a finished run had extend it; the lr
/// schedule continues over the new length or restarts over the added epochs
/// (`train.extend_schedule`), as the output says.
pub fn resume(run_dir: &Path, changes: &[(String, String)], progress: &Progress) -> Result<RunSummary> {
    resume_on(run_dir, changes, progress, None)
}

/// [`resume`] as one rank of a data-parallel run in `world`: every rank reads the run's config
/// and rank 0's `last` checkpoint from the shared run folder and continues exactly where it
/// stopped; rank 0 alone writes. The world size may differ from the stopped run's (the data is
/// then sharded anew from the next epoch; a mid-epoch position is counted in batches).
pub fn resume_distributed(
    run_dir: &Path,
    changes: &[(String, String)],
    progress: &Progress,
    world: Box<dyn Distributed>,
) -> Result<RunSummary> {
    resume_on(run_dir, changes, progress, Some(world))
}

fn resume_on(
    run_dir: &Path,
    changes: &[(String, String)],
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<RunSummary> {
    let main = world.as_ref().is_none_or(|w| w.is_main());
    let quiet = Progress::quiet();
    let progress = if main { progress } else { &quiet };
    let Resumed { config, run, last, schedule_start, restore_scheduler } =
        prepare_resume(run_dir, changes, progress, world.as_deref())?;
    check_image_task(&config)?;
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    train_run(config, splits, run, Some((last, restore_scheduler)), schedule_start, progress, world)
}

/// The recipe proper: loaders, model, optimizer, schedule and task, a [`Trainer`] with the
/// run folder's callbacks, then the test split on the best checkpoint and `summary.json`.
fn train_run(
    config: TrainConfig,
    splits: Splits,
    run: RunDir,
    resume: Option<(PathBuf, bool)>,
    schedule_start: u64,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<RunSummary> {
    let started = Instant::now();
    let main = world.as_ref().is_none_or(|w| w.is_main());
    let world_size = world.as_ref().map_or(1, |w| w.world_size());
    let shard = world.as_ref().map(|w| (w.rank(), w.world_size()));
    let quiet = Progress::quiet();
    let progress = if main { progress } else { &quiet };
    let t = &config.train;
    seed_everything(t.seed);
    let device = t.device_spec()?.resolve()?;
    let classes = splits.classes.clone();
    let num_classes = config.model.num_classes.unwrap_or(classes.len());
    if num_classes != classes.len() {
        return Err(RecipeError::InvalidConfig {
            field: "model.num_classes".into(),
            value: num_classes.to_string(),
            reason: format!("the data has {} classes: {}", classes.len(), classes.join(", ")),
        });
    }
    let task = training_task(&config, &splits, num_classes, device)?;
    let val_images = torchlight_data::Dataset::len(&splits.val);
    let mut train_loader = sharded_loader(splits.train, &config, true, device, shard)?;
    let mut val_loader = sharded_loader(splits.val, &config, false, device, shard)?;
    let head = model_architecture(&config)?.head();
    let mut model = build_model(&config, num_classes, device)?;
    let groups = ParamGroupSummary::of(&param_groups(&config, model.as_ref(), head)?);
    progress.line(&format!(
        "lr: head {:e}, backbone {:e} ({})",
        config.optim.lr,
        config.backbone_lr(),
        config.backbone_lr_rule()
    ));
    for (i, g) in groups.iter().enumerate() {
        progress.line(&format!("param group {i}: {g}"));
    }
    if config.model.freeze_bn {
        progress.line("model.freeze_bn: every BatchNorm keeps its running statistics and its weight and bias do not train (the frozen tensors above)");
    }
    if t.sync_bn {
        progress.line(&sync_batch_norm(model.as_mut(), world.as_deref(), config.model.freeze_bn));
    }
    let mut optimizer = build_optimizer(&config, model.as_ref(), head)?;
    let steps_per_epoch = train_loader.len().div_ceil(t.accumulation_steps);
    let span = (t.epochs as u64).saturating_sub(schedule_start).max(1);
    let scheduler = build_scheduler(&config, optimizer.as_mut(), steps_per_epoch, span)?;
    let plateau = build_plateau(&config, optimizer.as_ref())?;
    let card = ModelCard {
        config: config.clone(),
        classes: classes.clone(),
        schedule_start,
        tokenizer: None,
        temperature: None,
    };
    let step = crate::doctor::step_config(&config);
    let mut builder = Trainer::builder()
        .device(device)
        .epochs(t.epochs as u64)
        .step_config(step)
        .log_every(t.log_interval)
        .data_seed(t.seed)
        .progress(progress.clone())
        .config(serde_json::to_value(&card).expect("the model card serialises"))
        .callback(
            BackboneFinetuning::new(config.model.freeze_epochs as u64, head)
                .with_frozen_batch_norm(config.model.freeze_bn_while_frozen),
        )
        .run_dir(run.path());
    if let Some(mix) = batch_mixing(&config, num_classes)? {
        builder = builder.batch_transform::<(Tensor, Tensor)>(mix);
    }
    if t.model_ema {
        let mut ema = model_ema(&config, world_size)?;
        if main {
            ema = ema
                .with_best_checkpoint(run.checkpoints_dir()?.join("best_ema"), Monitor::max("ema_val_acc"));
        }
        builder = builder.callback(ema);
    }
    if let Some(patience) = t.early_stopping_patience {
        builder = builder.callback(EarlyStopping::new(patience));
    }
    if let Some(n) = t.checkpoint_every_steps {
        builder = builder.checkpoint_every_n_steps(n);
    }
    if let Some((s, interval)) = scheduler {
        builder = builder.lr_scheduler(s, interval);
    }
    if let Some((p, monitor)) = plateau {
        builder = builder.plateau_scheduler(p, monitor);
    }
    if let Some((last, restore_scheduler)) = resume {
        builder = builder.resume_from(last).restore_scheduler(restore_scheduler);
    }
    if let Some(world) = world {
        builder = builder.distributed(world);
    }
    let mut trainer = builder.build()?;
    let fitted =
        trainer.fit(model.as_mut(), &task, optimizer.as_mut(), &mut train_loader, Some(&mut val_loader))?;

    // The EMA weights are selected when their best validation accuracy beats the raw model's.
    let ema_best = best_of(&fitted.history, &Monitor::max("ema_val_acc"));
    let ema_dir = run.checkpoints_dir()?.join("best_ema");
    let ema_selected = match (ema_best, fitted.best) {
        (Some((ema, _)), Some((raw, _))) => ema > raw && ema_dir.join("meta.json").is_file(),
        _ => false,
    };
    if let Some((acc, epoch)) = ema_best {
        let raw = fitted.best.map_or(f64::NAN, |b| b.0);
        progress.line(&if ema_selected {
            format!(
                "model EMA selected: best ema_val_acc {acc:.4} at epoch {epoch} beats the raw model's {raw:.4}; the test split, eval, predict and export use checkpoints/best_ema"
            )
        } else {
            format!(
                "model EMA not selected: best ema_val_acc {acc:.4} at epoch {epoch}, the raw model's best val_acc {raw:.4}; outputs use checkpoints/best"
            )
        });
    }
    let (mut test_acc, mut test_topk_acc) = (None, None);
    let best_dir = run.checkpoints_dir()?.join(if ema_selected { "best_ema" } else { "best" });
    if let (Some(test), true) = (splits.test, best_dir.join("meta.json").is_file()) {
        Checkpoint::load(&best_dir)?.restore_model(model.as_ref())?;
        let mut test_loader = sharded_loader(test, &config, false, device, shard)?;
        // Every rank's shard, reduced: each rank gets the whole test split's metrics.
        let metrics = trainer.evaluate(model.as_ref(), &task, &mut test_loader, Stage::Test)?;
        let test = MetricsSummary::from_metrics(&metrics)?;
        if main {
            plot_confusion_matrix(&test.confusion, &classes, run.confusion_matrix_path())?;
        }
        progress.line(&format!(
            "test ({} checkpoint, epoch {}): acc {:.4}  top{} {:.4}  on {} images",
            if ema_selected { "best EMA" } else { "best" },
            if ema_selected { ema_best.map_or(0, |b| b.1) } else { fitted.best.map_or(0, |b| b.1) },
            test.top1,
            test.k,
            test.topk,
            test.count
        ));
        (test_acc, test_topk_acc) = (Some(test.top1), Some(test.topk));
    }
    let summary = RunSummary {
        run_dir: run.path().to_path_buf(),
        best_val_acc: fitted.best.map_or(f64::NAN, |b| b.0),
        best_epoch: fitted.best.map_or(0, |b| b.1),
        test_acc,
        test_topk_acc,
        epochs: fitted.epochs,
        stopped_early: fitted.stopped_early.is_some(),
        seconds: started.elapsed().as_secs_f64(),
        train_images_per_s: fitted.samples_per_s,
        classes,
        world_size,
        batch_size: t.batch_size,
        best_ema_val_acc: ema_best.map(|b| b.0),
        best_ema_epoch: ema_best.map(|b| b.1),
        ema_selected,
        param_groups: groups,
    };
    if main {
        let path = run.summary_path();
        let text = serde_json::to_string_pretty(&summary).expect("the summary serialises");
        std::fs::write(&path, text).map_err(|e| RecipeError::io(&path, e))?;
    }
    if val_images > 0 {
        check_finite_validation(&fitted.history, &summary, t.allow_nonfinite_val, progress)?;
    }
    Ok(summary)
}

/// The task a run trains with: cross-entropy (or timm's BCE, `train.bce_loss`) with the
/// config's label smoothing (folded into the soft targets instead when Mixup/CutMix is on),
/// top-k and class weights. `fit` and the lr finder (`tune::lr_find`) share it.
pub(crate) fn training_task(
    config: &TrainConfig,
    splits: &Splits,
    num_classes: usize,
    device: tch::Device,
) -> Result<Classification> {
    let t = &config.train;
    let mixing = t.mixup_alpha > 0.0 || t.cutmix_alpha > 0.0;
    // With Mixup/CutMix the smoothing goes into their soft targets (the same loss).
    let task_smoothing = if mixing { 0.0 } else { t.label_smoothing };
    let mut task = Classification::new(num_classes).with_label_smoothing(task_smoothing).with_top_k(t.top_k);
    if t.bce_loss {
        task = task.with_bce(t.bce_target_thresh);
    }
    if let Some(w) = class_weights(config, splits, device)? {
        task = task.with_class_weights(w);
    }
    Ok(task)
}

/// The Mixup/CutMix batch transform `train.mixup_alpha`/`cutmix_alpha` ask for, if any.
pub(crate) fn batch_mixing(config: &TrainConfig, num_classes: usize) -> Result<Option<MixupCutMix>> {
    let t = &config.train;
    if !(t.mixup_alpha > 0.0 || t.cutmix_alpha > 0.0) {
        return Ok(None);
    }
    let mut mix = MixupCutMix::new(num_classes, t.mixup_alpha, t.cutmix_alpha)?
        .with_prob(t.mixup_prob)?
        .with_switch_prob(t.mixup_switch_prob)?
        .with_label_smoothing(t.label_smoothing)?;
    if let Some(off) = t.mixup_off_epoch {
        mix = mix.with_off_epoch(off as u64);
    }
    Ok(Some(mix))
}

/// The EMA `train.model_ema*` ask for: torchvision's (`--model-ema-decay` adjusted as its
/// `train.py` does, every `model_ema_steps` steps of an epoch, copying during the lr warm-up),
/// or timm's `ModelEmaV3` with its warm-up (`model_ema_warmup`).
fn model_ema(config: &TrainConfig, world_size: usize) -> Result<ModelEma> {
    let t = &config.train;
    let ema = if t.model_ema_warmup {
        ModelEma::timm(t.model_ema_decay)?.with_warmup(1.0, 2.0 / 3.0)?
    } else {
        let decay = ModelEma::torchvision_decay(
            t.model_ema_decay,
            t.model_ema_steps,
            t.batch_size,
            world_size,
            t.epochs as u64,
        );
        ModelEma::torchvision(decay, t.model_ema_steps)?.with_copy_epochs(config.optim.warmup_epochs as u64)
    };
    Ok(ema)
}

/// A Hub model folder as `model.pretrained`: its `config.json` reads, it has a weights file, and
/// its `architecture` is one whose timm weights load ([`torchlight_nn::TIMM_ARCHITECTURES`]) and
/// the config's `model.name` (either failing would fail the load anyway, with a list of keys
/// instead of the reason).
pub(crate) fn check_hub_folder(config: &TrainConfig, dir: &std::path::Path) -> Result<()> {
    let folder = torchlight_nn::read_hub_folder(dir)?;
    if let Err(e) = torchlight_nn::check_timm_architecture(&folder.config.architecture) {
        return Err(RecipeError::InvalidConfig {
            field: "model.pretrained".into(),
            value: dir.display().to_string(),
            reason: format!("the weights folder holds a timm model (its config.json's `architecture`): {e}"),
        });
    }
    if torchlight_nn::canonical_architecture(&folder.config.architecture)
        != torchlight_nn::canonical_architecture(&config.model.name)
    {
        return Err(RecipeError::InvalidConfig {
            field: "model.name".into(),
            value: config.model.name.clone(),
            reason: format!(
                "the weights folder {} is a `{}` (its config.json's `architecture`); set model.name = \"{}\"",
                dir.display(),
                folder.config.architecture,
                folder.config.architecture
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use torchlight_nn::{set_batch_norm_sync, BatchNorm2d, BatchNormSync};

    /// A world of two whose conversion sets a hook that is never called here.
    struct TwoRanks;

    #[derive(Debug)]
    struct Unused;

    impl BatchNormSync for Unused {
        fn batch_norm(
            &self,
            _: &Tensor,
            _: Option<&Tensor>,
            _: Option<&Tensor>,
            _: Option<&Tensor>,
            _: Option<&Tensor>,
            _: f64,
            _: f64,
        ) -> Tensor {
            unreachable!("no forward in this test")
        }
    }

    impl Distributed for TwoRanks {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn broadcast_parameters(&mut self, _: &dyn Module) -> torchlight_train::Result<()> {
            Ok(())
        }
        fn sync_gradients(&mut self, _: &dyn Module) -> torchlight_train::Result<()> {
            Ok(())
        }
        fn all_reduce_sum(&self, _: &[Tensor]) -> torchlight_train::Result<()> {
            Ok(())
        }
        fn all_gather(&self, t: &Tensor) -> torchlight_train::Result<Vec<Tensor>> {
            Ok(vec![t.shallow_clone(), t.shallow_clone()])
        }
        fn barrier(&self) -> torchlight_train::Result<()> {
            Ok(())
        }
        fn convert_sync_batch_norm(&self, model: &mut dyn Module) -> usize {
            set_batch_norm_sync(model, Some(Arc::new(Unused)))
        }
    }

    fn synced(model: &mut dyn Module) -> usize {
        let mut n = 0;
        torchlight_nn::visit_modules_mut(model, &mut |_, m| {
            n += m.as_any().downcast_ref::<BatchNorm2d>().is_some_and(|bn| bn.sync.is_some()) as usize;
        });
        n
    }

    #[test]
    fn sync_bn_converts_in_a_world_of_ranks_and_says_a_single_process_stays_plain() {
        let mut model = torchlight_nn::resnet18(3);
        let line = sync_batch_norm(&mut model, None, false);
        assert!(line.starts_with("train.sync_bn: a single process trains with plain BatchNorm"), "{line}");
        assert_eq!(synced(&mut model), 0);
        let line = sync_batch_norm(&mut model, Some(&TwoRanks), false);
        assert!(line.contains("20 BatchNorm layers") && line.contains("all 2 ranks"), "{line}");
        assert_eq!(synced(&mut model), 20);
        let line = sync_batch_norm(&mut model, Some(&TwoRanks), true);
        assert!(line.contains("model.freeze_bn keeps them plain"), "{line}");
    }
}
