//! `fit` and `resume` of the text recipe: a `TrainConfig` with `train.task = "text"` in; a
//! trained, tested and checkpointed run folder, with its tokenizer, out.

use super::data::{new_tokenizer, open_splits, run_tokenizer, sharded_loader, truncation_of, TextDataset};
use super::model::{text_classifier_config, TEXT_HEAD};
use crate::card::{CardTokenizer, ModelCard};
use crate::config::{TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::optimizer::{build_optimizer, build_plateau, build_scheduler, param_groups};
use crate::resume::{prepare_resume, Resumed};
use crate::run_dir::{new_run_dir, RunDir};
use crate::summary::{check_finite_validation, ParamGroupSummary, RunSummary};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::{
    to_device, BiLstmClassifier, FastText, Module, MultiInput, TextClassifierConfig, TextCnn,
    TransformerClassifier,
};
use torchlight_tensor::seed_everything;
use torchlight_text::{TextSplits, Tokenized, Tokenizer};
use torchlight_train::{
    plot_confusion_matrix, BackboneFinetuning, Classification, Distributed, EarlyStopping, MetricsSummary,
    Progress, Stage, Trainer,
};

/// The head of every text classifier: the parameters at `optim.lr` (the rest, embeddings and
/// encoders, at `optim.backbone_lr`, which is `optim.lr` unless set).
pub(crate) const HEAD: &str = TEXT_HEAD;

/// Trains as `config` (`train.task = "text"`) says in a new run folder under
/// `config.train.out_dir`: the config, the data (every document read once) and the tokenizer
/// are checked before the folder is made; the tokenizer is saved in it beside `config.toml`.
pub fn fit(config: TrainConfig, progress: &Progress) -> Result<RunSummary> {
    fit_on(config, progress, None)
}

/// [`fit`] as one rank of a data-parallel run in `world` (every rank calls it with the same
/// config), as the image recipe's `fit_distributed`: each rank trains on its shard of the
/// documents, `train.batch_size` a batch per rank (the global batch is `world_size` times it;
/// with `text.bucket`, the ranks take turns at the bucketed batches). Every rank builds the same
/// tokenizer (the word vocabulary is a function of the training split and `[text]`; a
/// `text.tokenizer` file is read as it is); rank 0 alone makes the run folder and writes the
/// tokenizer, config, logs, checkpoints and summary, and prints. Every rank returns the same
/// summary.
pub fn fit_distributed(
    config: TrainConfig,
    progress: &Progress,
    world: Box<dyn Distributed>,
) -> Result<RunSummary> {
    fit_on(config, progress, Some(world))
}

fn fit_on(
    config: TrainConfig,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<RunSummary> {
    let main = world.as_ref().is_none_or(|w| w.is_main());
    let quiet = Progress::quiet();
    let progress = if main { progress } else { &quiet };
    config.validate()?;
    check_text_task(&config)?;
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    let (tokenizer, file) = new_tokenizer(&config, &splits)?;
    // Rank 0 writes the run folder's files before the others go on to read the tokenizer's.
    let run = new_run_dir(&config, world.as_deref(), |run| {
        config.write_toml_file(run.config_path())?;
        Ok(tokenizer.save(&run.join(file))?)
    })?;
    let saved = run.join(file);
    progress.line(&format!("tokenizer: {} ids, saved as {}", tokenizer.vocab_size(), saved.display()));
    train_run(config, splits, tokenizer, &saved, run, None, 0, progress, world)
}

/// Continues the text run in `run_dir` from its `last` checkpoint, exactly where it stopped,
/// with the config and the tokenizer of its folder; `changes` may change only the
/// [`RESUME_CHANGEABLE`](crate::image::RESUME_CHANGEABLE) keys, as for images.
pub fn resume(run_dir: &Path, changes: &[(String, String)], progress: &Progress) -> Result<RunSummary> {
    resume_on(run_dir, changes, progress, None)
}

/// [`resume`] as one rank of a data-parallel run in `world`: every rank reads the run's config,
/// its tokenizer and rank 0's `last` checkpoint from the shared run folder and continues where
/// it stopped; rank 0 alone writes. The world size may differ from the stopped run's (the
/// documents are then dealt out anew from the next epoch; a mid-epoch position is counted in
/// batches).
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
    check_text_task(&config)?;
    let (tokenizer, path) = run_tokenizer(run.path())?;
    progress.line(&format!("tokenizer: {} ids, from {}", tokenizer.vocab_size(), path.display()));
    let splits = open_splits(&config)?;
    config.validate_for_classes(splits.classes.len())?;
    let resume = Some((last, restore_scheduler));
    train_run(config, splits, tokenizer, &path, run, resume, schedule_start, progress, world)
}

fn check_text_task(config: &TrainConfig) -> Result<()> {
    if config.train.task != TaskKind::Text {
        return Err(RecipeError::InvalidConfig {
            field: "train.task".into(),
            value: format!("{:?}", config.train.task.name()),
            reason: "the text recipe trains text runs (train.task = \"text\"); image runs train through torchlight_recipes::image".into(),
        });
    }
    Ok(())
}

/// What [`train_model`] needs besides the model.
struct Run {
    config: TrainConfig,
    splits: TextSplits,
    tokenizer: Arc<dyn Tokenizer>,
    /// The tokenizer as the checkpoints carry it (the run folder's file).
    card_tokenizer: CardTokenizer,
    run: RunDir,
    resume: Option<(PathBuf, bool)>,
    schedule_start: u64,
    started: Instant,
    world: Option<Box<dyn Distributed>>,
}

/// Seeds, builds the model `model.name` names on the CPU (so a seed gives the same weights
/// on any device) and trains it; `saved` is the tokenizer's file in the run folder, which
/// every checkpoint's card carries.
#[allow(clippy::too_many_arguments)]
fn train_run(
    config: TrainConfig,
    splits: TextSplits,
    tokenizer: Arc<dyn Tokenizer>,
    saved: &Path,
    run: RunDir,
    resume: Option<(PathBuf, bool)>,
    schedule_start: u64,
    progress: &Progress,
    world: Option<Box<dyn Distributed>>,
) -> Result<RunSummary> {
    let started = Instant::now();
    seed_everything(config.train.seed);
    let classes = splits.classes.len();
    let num_classes = config.model.num_classes.unwrap_or(classes);
    if num_classes != classes {
        return Err(RecipeError::InvalidConfig {
            field: "model.num_classes".into(),
            value: num_classes.to_string(),
            reason: format!("the data has {classes} classes: {}", splits.classes.join(", ")),
        });
    }
    let c: TextClassifierConfig = text_classifier_config(&config, tokenizer.vocab_size(), num_classes);
    let name = config.model.name.clone();
    let card_tokenizer = CardTokenizer::of_saved(tokenizer.as_ref(), saved)?;
    let r = Run { config, splits, tokenizer, card_tokenizer, run, resume, schedule_start, started, world };
    match name.as_str() {
        "fasttext" => train_model(FastText::new(&c), r, progress),
        "textcnn" => train_model(TextCnn::new(&c), r, progress),
        "bilstm" => train_model(BiLstmClassifier::new(&c), r, progress),
        "transformer" => train_model(TransformerClassifier::new(&c), r, progress),
        other => Err(RecipeError::InvalidConfig {
            field: "model.name".into(),
            value: other.to_string(),
            reason: format!("not a text model; expected one of {}", crate::config::TEXT_MODELS.join(", ")),
        }),
    }
}

/// The recipe proper, the image recipe's with text loaders: optimizer, schedule and task, a
/// [`Trainer`] with the run folder's callbacks, then the test split on the best checkpoint
/// and `summary.json`.
fn train_model<M: Module + MultiInput>(mut model: M, r: Run, progress: &Progress) -> Result<RunSummary> {
    let Run { config, splits, tokenizer, card_tokenizer, run, resume, schedule_start, started, world } = r;
    let main = world.as_ref().is_none_or(|w| w.is_main());
    let world_size = world.as_ref().map_or(1, |w| w.world_size());
    let shard = world.as_ref().map(|w| (w.rank(), w.world_size()));
    let t = &config.train;
    let device = t.device_spec()?.resolve()?;
    to_device(&model, device);
    let classes = splits.classes.clone();
    let task = Classification::new(classes.len()).with_label_smoothing(t.label_smoothing).with_top_k(t.top_k);
    let task = if t.bce_loss { task.with_bce(t.bce_target_thresh) } else { task };
    let task = match crate::image::class_weights_of(&config, &splits.train_targets(), &classes, device)? {
        Some(w) => task.with_class_weights(w),
        None => task,
    };
    let max_len = config.text.max_len;
    let train_set: TextDataset = Tokenized::new(splits.train, Arc::clone(&tokenizer));
    let cut = truncation_of(&train_set, max_len);
    progress.line(&format!(
        "text.max_len {max_len}: {} of {} training documents ({:.1}%) are longer and are cut, {} tokens dropped",
        cut.truncated,
        cut.documents,
        100.0 * cut.share(),
        cut.dropped_tokens
    ));
    let val_docs = torchlight_data::Dataset::len(&splits.val);
    let mut train_loader = sharded_loader(train_set, &config, true, device, shard)?;
    let val_set = Tokenized::new(splits.val, Arc::clone(&tokenizer));
    let mut val_loader = sharded_loader(val_set, &config, false, device, shard)?;
    let groups = ParamGroupSummary::of(&param_groups(&config, &model, HEAD)?);
    progress.line(&format!(
        "lr: head {:e}, embeddings and encoder {:e} ({})",
        config.optim.lr,
        config.backbone_lr(),
        config.backbone_lr_rule()
    ));
    for (i, g) in groups.iter().enumerate() {
        progress.line(&format!("param group {i}: {g}"));
    }
    let mut optimizer = build_optimizer(&config, &model, HEAD)?;
    let steps_per_epoch = train_loader.len().div_ceil(t.accumulation_steps);
    let span = (t.epochs as u64).saturating_sub(schedule_start).max(1);
    let scheduler = build_scheduler(&config, optimizer.as_mut(), steps_per_epoch, span)?;
    let plateau = build_plateau(&config, optimizer.as_ref())?;
    let card = ModelCard {
        config: config.clone(),
        classes: classes.clone(),
        schedule_start,
        tokenizer: Some(card_tokenizer),
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
        .callback(BackboneFinetuning::new(config.model.freeze_epochs as u64, HEAD))
        .run_dir(run.path());
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
        trainer.fit(&mut model, &task, optimizer.as_mut(), &mut train_loader, Some(&mut val_loader))?;

    let (mut test_acc, mut test_topk_acc) = (None, None);
    let best_dir = run.checkpoints_dir()?.join("best");
    if let (Some(test), true) = (splits.test, best_dir.join("meta.json").is_file()) {
        Checkpoint::load(&best_dir)?.restore_model(&model)?;
        let test_set = Tokenized::new(test, Arc::clone(&tokenizer));
        let mut test_loader = sharded_loader(test_set, &config, false, device, shard)?;
        // Every rank's shard, reduced: each rank gets the whole test split's metrics.
        let metrics = trainer.evaluate(&model, &task, &mut test_loader, Stage::Test)?;
        let test = MetricsSummary::from_metrics(&metrics)?;
        if main {
            plot_confusion_matrix(&test.confusion, &classes, run.confusion_matrix_path())?;
        }
        progress.line(&format!(
            "test (best checkpoint, epoch {}): acc {:.4}  top{} {:.4}  on {} documents",
            fitted.best.map_or(0, |b| b.1),
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
        best_ema_val_acc: None,
        best_ema_epoch: None,
        ema_selected: false,
        param_groups: groups,
    };
    if main {
        let path = run.summary_path();
        let text = serde_json::to_string_pretty(&summary).expect("the summary serialises");
        std::fs::write(&path, text).map_err(|e| RecipeError::io(&path, e))?;
    }
    if val_docs > 0 {
        check_finite_validation(&fitted.history, &summary, t.allow_nonfinite_val, progress)?;
    }
    Ok(summary)
}
