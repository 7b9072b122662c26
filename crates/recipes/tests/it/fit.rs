//! The fit loop end to end on generated ImageFolders: accuracy, the run folder, resume
//! equivalence and the overfit-one-batch check.

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use tch::Device;
use torchlight_recipes::image::*;
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_recipes::*;
use torchlight_train::*;

fn shapes_dataset(root: &Path, per_class: [usize; 3]) {
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross, Shape::Bar],
        per_class,
        size_range: (40, 40),
        seed: 11,
    };
    write_image_folder(root, &spec).unwrap();
}

fn small_config(root: &Path, out: &Path, epochs: usize) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.data.root = root.to_path_buf();
    c.data.image_size = Some(32);
    c.data.workers = 2;
    c.data.min_crop_scale = 0.5;
    c.optim.lr = 3e-3;
    c.optim.backbone_lr = Some(3e-3);
    c.train.epochs = epochs;
    c.train.batch_size = 16;
    c.train.top_k = 2;
    c.train.out_dir = out.to_path_buf();
    c.train.device = "cpu".into();
    c
}

#[test]
fn fit_on_a_generated_set_learns_and_fills_the_run_folder() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [64, 16, 24]);
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 20);
    config.optim.lr = 1e-3;
    config.optim.backbone_lr = Some(1e-3);
    let summary = fit(config, &Progress::quiet()).unwrap();
    let run = &summary.run_dir;
    assert!(run.ends_with("exp_001"), "{}", run.display());
    assert_eq!(summary.epochs, 20);
    assert_eq!(summary.classes, ["bar", "circle", "cross"]);
    let test_acc = summary.test_acc.unwrap();
    eprintln!(
        "best val acc {:.3} at epoch {}, test acc {test_acc:.3}",
        summary.best_val_acc, summary.best_epoch
    );
    // Three shapes, 64 training images each, from scratch: chance is 1/3 (measured: 0.86).
    assert!(test_acc >= 0.75, "test accuracy {test_acc}");
    for file in ["config.toml", "metrics.csv", "curves.png", "confusion_matrix.png", "summary.json"] {
        assert!(run.join(file).is_file(), "{file} missing from the run folder");
    }
    assert!(run.join("checkpoints/last/model.safetensors").is_file());
    assert!(run.join("checkpoints/best/meta.json").is_file());
    let events: Vec<_> = std::fs::read_dir(run)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("events.out.tfevents."))
        .collect();
    assert_eq!(events.len(), 1);
    let rows = read_metrics_csv(run.join("metrics.csv")).unwrap();
    assert_eq!(rows.iter().map(|r| r.epoch).collect::<Vec<_>>(), (1..=20).collect::<Vec<_>>());
    let loss = |r: &EpochRecord| r.get("train_loss").unwrap();
    assert!(loss(&rows[19]) < loss(&rows[0]), "training loss falls");
    let header = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    assert!(
        header.starts_with(
            "epoch,lr,train_loss,train_acc,val_loss,val_acc,val_top2,seconds,samples_per_s,data_stall_pct\n"
        ),
        "{header}"
    );
    assert!(rows.iter().all(|r| r.samples_per_s > 0.0 && (0.0..=100.0).contains(&r.data_stall_pct)));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    for key in ["best_val_acc", "best_epoch", "test_acc", "epochs", "seconds", "train_images_per_s"] {
        assert!(json.get(key).is_some(), "summary.json lacks {key}");
    }
    // The recipe's four groups: backbone and head, each with and without weight decay.
    let groups: Vec<&str> =
        json["param_groups"].as_array().unwrap().iter().map(|g| g["rules"].as_str().unwrap()).collect();
    assert_eq!(
        groups,
        ["weight decay", "no weight decay", "prefix `fc.`, weight decay", "prefix `fc.`, no weight decay"]
    );
    // The run can be repeated from its folder alone.
    let saved = TrainConfig::from_toml_file(run.join("config.toml")).unwrap();
    assert_eq!(saved.train.epochs, 20);
}

#[test]
fn resuming_after_two_epochs_ends_where_four_straight_epochs_end() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [24, 8, 0]);
    // StepLR's lrs do not depend on the planned epoch count, so a 2-epoch run extended to 4
    // is the same as a 4-epoch run interrupted after epoch 2.
    let config = |out: &str, epochs| {
        let mut c = small_config(&tmp.path().join("data"), &tmp.path().join(out), epochs);
        c.scheduler = SchedulerConfig::Step { step_size: 1, gamma: 0.7 };
        c
    };
    let straight = fit(config("a", 4), &Progress::quiet()).unwrap();

    // A 2-epoch run, extended to 4 by a resume (the schedule continues).
    let first = fit(config("b", 2), &Progress::quiet()).unwrap();
    let err = resume(&first.run_dir, &[], &Progress::quiet()).unwrap_err();
    assert!(err.to_string().contains("already trained 2 epochs"), "{err}");
    let err = resume(&first.run_dir, &[("optim.lr".into(), "0.5".into())], &Progress::quiet()).unwrap_err();
    assert!(err.to_string().contains("config key `optim.lr`"), "{err}");
    let resumed = resume(&first.run_dir, &[("train.epochs".into(), "4".into())], &Progress::quiet()).unwrap();
    assert_eq!(resumed.epochs, 4);
    let saved = TrainConfig::from_toml_file(first.run_dir.join("config.toml")).unwrap();
    assert_eq!(saved.train.epochs, 4, "the run folder records the new length");

    let load = |run: &Path| {
        let checkpoint = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
        checkpoint.model_state().iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect::<Vec<_>>()
    };
    let (a, b) = (load(&straight.run_dir), load(&resumed.run_dir));
    assert!(a.iter().zip(&b).all(|((ka, _), (kb, _))| ka == kb));
    assert_eq!(a.len(), b.len());
    for ((ka, ta), (_, tb)) in a.iter().zip(&b) {
        assert!(ta.equal(tb), "{ka} differs between the straight and the resumed run");
    }
    let rows = read_metrics_csv(resumed.run_dir.join("metrics.csv")).unwrap();
    assert_eq!(rows.iter().map(|r| r.epoch).collect::<Vec<_>>(), [1, 2, 3, 4]);
    let straight_rows = read_metrics_csv(straight.run_dir.join("metrics.csv")).unwrap();
    assert_eq!(rows[3].get("train_loss"), straight_rows[3].get("train_loss"));
}

/// Extending a finished run trains the added epochs at the schedule it promises from the first
/// added step: cosine rebuilt over the new length and continued (`extend_schedule =
/// "continue"`), or a fresh cosine over the added epochs (`"restart"`). Each epoch's lr in
/// `metrics.csv` is that schedule's; the first added epoch once ran at the finished cosine's
/// last lr, 0, leaving the weights as they were.
#[test]
fn an_extended_run_trains_its_added_epochs_at_the_new_schedules_lr() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [12, 4, 0]);
    let lr = 3e-3;
    // torch's CosineAnnealingLR (eta_min 0) at step `t` of `t_max`.
    let cosine = |t: f64, t_max: f64| lr * (1.0 + (std::f64::consts::PI * t / t_max).cos()) / 2.0;
    let lrs = |run: &Path| -> Vec<f64> {
        read_metrics_csv(run.join("metrics.csv")).unwrap().iter().map(|r| r.lr).collect()
    };
    let weights = |run: &Path| {
        let checkpoint = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
        checkpoint.model_state().iter().map(|(_, t)| t.copy()).collect::<Vec<_>>()
    };
    let extend = |run: &Path, mode: &str, epochs: &str| {
        let changes =
            [("train.extend_schedule".to_string(), mode.to_string()), ("train.epochs".into(), epochs.into())];
        let before = weights(run);
        resume(run, &changes, &Progress::quiet()).unwrap();
        let after = weights(run);
        assert!(
            before.iter().zip(&after).any(|(a, b)| !a.equal(b)),
            "{mode} to {epochs}: the weights did not move"
        );
    };
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.scheduler = SchedulerConfig::Cosine { eta_min: 0.0 };

    let run = fit(config.clone(), &Progress::quiet()).unwrap().run_dir;
    extend(&run, "continue", "2");
    extend(&run, "continue", "4");
    let expected = [lr, cosine(1.0, 2.0), cosine(2.0, 4.0), cosine(3.0, 4.0)];
    let got = lrs(&run);
    assert_eq!(got.len(), 4);
    for (epoch, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-12 * lr,
            "continue: epoch {} at lr {g}, the rebuilt cosine's is {e}",
            epoch + 1
        );
    }

    let run = fit(config, &Progress::quiet()).unwrap().run_dir;
    extend(&run, "restart", "3");
    let expected = [lr, cosine(0.0, 2.0), cosine(1.0, 2.0)];
    let got = lrs(&run);
    assert_eq!(got.len(), 3);
    for (epoch, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-12 * lr,
            "restart: epoch {} at lr {g}, the fresh cosine's is {e}",
            epoch + 1
        );
    }
}

/// Weights blown up by an absurd lr (each AdamW step moves them by about the lr; the forward
/// pass then overflows to NaN and those steps are skipped) validate with a NaN loss beside an
/// accuracy that still reads as a number. Such an epoch is never best, and the run says so
/// and fails, unless `train.allow_nonfinite_val`.
#[test]
fn a_non_finite_validation_is_never_best_and_fails_the_run_unless_allowed() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 4, 0]);
    let mut c = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    // No weight decay: lr x weight decay >= 1 is refused by the config.
    (c.optim.lr, c.optim.backbone_lr, c.optim.weight_decay) = (1e20, None, 0.0);
    c.train.on_nonfinite = NonFiniteAction::Skip;
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        err.contains("validation was not finite at epoch 1 (val_loss")
            && err.contains("no epoch validated finite, so there is no best checkpoint")
            && err.contains("train.allow_nonfinite_val = true"),
        "{err}"
    );
    let run = tmp.path().join("runs/exp_001");
    let rows = read_metrics_csv(run.join("metrics.csv")).unwrap();
    let (loss, acc) = (rows[0].get("val_loss").unwrap(), rows[0].get("val_acc").unwrap());
    assert!(loss.is_nan() && acc.is_finite(), "val_loss {loss}, val_acc {acc}");
    assert!(!run.join("checkpoints/best").exists(), "a NaN validation became best");
    assert!(run.join("checkpoints/last/meta.json").is_file() && run.join("summary.json").is_file());

    c.train.allow_nonfinite_val = true;
    let summary = fit(c, &Progress::quiet()).unwrap();
    assert_eq!(summary.best_epoch, 0);
}

/// The modern-recipe keys end to end: Mixup/CutMix with label smoothing folded in and a model
/// EMA, on a tiny set with an odd last batch (27 training images in batches of 8: 3 left).
#[test]
fn mixup_cutmix_and_a_model_ema_train_from_the_config() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [9, 3, 2]);
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 2);
    config.train.batch_size = 8;
    for (key, value) in [
        ("train.mixup_alpha", "0.2"),
        ("train.cutmix_alpha", "1.0"),
        ("train.mixup_off_epoch", "1"),
        ("train.label_smoothing", "0.1"),
        ("train.model_ema", "true"),
        ("train.model_ema_steps", "2"),
        ("train.model_ema_decay", "0.9"),
        ("train.bce_loss", "true"),
        ("train.bce_target_thresh", "0.2"),
    ] {
        config.set(key, value).unwrap();
    }
    config.validate().unwrap();
    let summary = fit(config, &Progress::quiet()).unwrap();
    let run = &summary.run_dir;
    let rows = read_metrics_csv(run.join("metrics.csv")).unwrap();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        // Accuracy counts against the labels before mixing (MixupCutMix's metric target).
        let acc = r.get("train_acc").unwrap();
        assert!((0.0..=1.0).contains(&acc), "train_acc {acc}");
        assert!(r.get("train_loss").unwrap().is_finite());
        assert!((0.0..=1.0).contains(&r.get("ema_val_acc").unwrap()));
        assert!(r.get("ema_val_loss").unwrap().is_finite());
        // Trained with timm's BCE, validated with plain cross-entropy: an untrained 3-class
        // model's validation loss is near ln 3, far above any BCE of 3 logits near 0.
        assert!(r.get("val_loss").unwrap() > 0.8, "val_loss {:?} is cross-entropy", r.get("val_loss"));
    }
    let best_ema = rows.iter().map(|r| r.get("ema_val_acc").unwrap()).fold(f64::MIN, f64::max);
    assert_eq!(summary.best_ema_val_acc, Some(best_ema));
    assert!(summary.best_ema_epoch.is_some());
    // Selected exactly when the EMA's best validation accuracy beats the raw model's; then the
    // run folder's outputs (test, eval, predict, export) come from checkpoints/best_ema.
    assert_eq!(summary.ema_selected, best_ema > summary.best_val_acc);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(written["ema_selected"], summary.ema_selected);
    let selected = if summary.ema_selected { "checkpoints/best_ema" } else { "checkpoints/best" };
    assert_eq!(selected_checkpoint(run), run.join(selected));
    assert!(run.join("checkpoints/best_ema/meta.json").is_file());
    // The EMA covers every parameter and buffer of the ResNet, BatchNorm statistics included.
    let last = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let ema: std::collections::BTreeMap<String, tch::Tensor> = last
        .loop_tensors()
        .into_iter()
        .filter_map(|(k, t)| k.strip_prefix("callbacks.ModelEma.").map(|k| (k.to_string(), t)))
        .collect();
    assert_eq!(ema.len(), last.model_state().len());
    assert!(ema.contains_key("bn1.running_var") && ema.contains_key("fc.weight"));
    // 4 optimizer steps an epoch, the EMA updated after steps 0 and 2 of each.
    assert_eq!(last.meta.loop_state["callbacks"]["ModelEma"]["updates"], 4);
}

/// `val_loss` is the same quantity whatever the recipe trains with (timm validates with plain
/// cross-entropy): two runs from the same initial weights that cannot move (lr 1e-12, far
/// below a float32 step of any weight; `model.freeze_bn` keeps the BatchNorm statistics), one
/// plain and one with Mixup/CutMix, label smoothing and timm's BCE, log the same validation loss
/// and accuracy to 1e-6, while their training losses differ.
#[test]
fn val_loss_is_plain_cross_entropy_whatever_the_training_loss() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [9, 3, 2]);
    let run = |out: &str, modern: bool| {
        let mut c = small_config(&tmp.path().join("data"), &tmp.path().join(out), 1);
        c.train.batch_size = 8;
        c.optim.lr = 1e-12;
        c.optim.backbone_lr = Some(1e-12);
        c.model.freeze_bn = true;
        if modern {
            for (key, value) in [
                ("train.mixup_alpha", "0.2"),
                ("train.cutmix_alpha", "1.0"),
                ("train.label_smoothing", "0.1"),
                ("train.bce_loss", "true"),
            ] {
                c.set(key, value).unwrap();
            }
        }
        c.validate().unwrap();
        let summary = fit(c, &Progress::quiet()).unwrap();
        read_metrics_csv(summary.run_dir.join("metrics.csv")).unwrap().remove(0)
    };
    let (plain, modern) = (run("plain", false), run("modern", true));
    let get = |r: &torchlight_train::EpochRecord, k: &str| r.get(k).unwrap_or_else(|| panic!("no {k}"));
    let (a, b) = (get(&plain, "val_loss"), get(&modern, "val_loss"));
    assert!(a.is_finite() && (a - b).abs() <= 1e-6 * a.abs(), "val_loss {a} (plain) vs {b} (modern)");
    assert_eq!(get(&plain, "val_acc"), get(&modern, "val_acc"));
    let (ta, tb) = (get(&plain, "train_loss"), get(&modern, "train_loss"));
    assert!((ta - tb).abs() > 0.1, "the training losses differ: {ta} (cross-entropy) vs {tb} (BCE)");
}

/// The recipe files in docs/recipes/ parse, validate and train on tiny data (their epochs,
/// image size and batch shrunk by overrides, as a user's `--set` would).
#[test]
fn the_recipe_files_train_on_tiny_data() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [9, 3, 2]);
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/recipes");
    for name in ["plain", "modern"] {
        let mut config = TrainConfig::from_toml_file(docs.join(format!("{name}.toml"))).unwrap();
        config.validate().unwrap_or_else(|e| panic!("{name}.toml as written: {e}"));
        config.data.root = tmp.path().join("data");
        config.train.out_dir = tmp.path().join(name);
        for (key, value) in [
            ("train.epochs", "2"),
            ("data.image_size", "32"),
            ("train.batch_size", "8"),
            ("data.workers", "0"),
            ("train.device", "cpu"),
        ] {
            config.set(key, value).unwrap();
        }
        if config.train.model_ema {
            config.set("train.model_ema_steps", "2").unwrap();
        }
        config.validate().unwrap();
        let summary = fit(config.clone(), &Progress::quiet()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(summary.epochs, 2, "{name}");
        assert!(summary.test_acc.is_some_and(|a| (0.0..=1.0).contains(&a)), "{name}");
        assert_eq!(summary.best_ema_val_acc.is_some(), name == "modern", "{name}");
    }
}

#[test]
fn the_loop_overfits_a_single_batch() {
    // The seed documents' first debugging step, as a test of the loop itself: with
    // augmentation off, a single batch must be driven to a near-zero loss.
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [3, 0, 0]);
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.data.workers = 0;
    config.train.batch_size = 9;
    config.train.log_interval = 1;
    config.scheduler = SchedulerConfig::None;
    torchlight_tensor::seed_everything(0);
    let folder = torchlight_vision::ImageFolder::new(tmp.path().join("data/train"))
        .unwrap()
        .with_transform(torchlight_vision::EvalPreprocessing::classification(32).transform());
    let split = torchlight_data::Subset::new(std::sync::Arc::new(folder), (0..9).collect()).unwrap();
    let mut batches = loader(split, &config, true, Device::Cpu).unwrap();
    let mut model = torchlight_nn::resnet18(3);
    let mut optimizer = build_optimizer(&config, &model, "fc.").unwrap();
    let mut trainer = Trainer::builder().epochs(40).log_every(1).progress(Progress::quiet()).build().unwrap();
    let summary =
        trainer.fit(&mut model, &Classification::new(3), optimizer.as_mut(), &mut batches, None).unwrap();
    assert_eq!((summary.epochs, summary.global_step), (40, 40));
    let losses: Vec<f64> = summary.history.iter().map(|r| r.get("train_loss").unwrap()).collect();
    let last = *losses.last().unwrap();
    assert!(last < 0.05, "loss after 40 steps on one batch: {last} (first {})", losses[0]);
}

/// `data.max_image_pixels` reaches every split: images over it are named before training
/// starts (40x40 = 1600 pixels under a limit of 1000), every split's decoder carries it, and 0
/// lifts it.
#[test]
fn the_pixel_limit_of_the_config_reaches_every_split() {
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [3, 3, 3]);
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.data.max_image_pixels = 1000;
    let err = open_splits(&config).err().expect("refused").to_string();
    assert!(err.contains("40x40 = 1600 pixels, over the limit of 1000"), "{err}");
    config.data.max_image_pixels = 2000;
    let splits = open_splits(&config).unwrap();
    for split in [&splits.train, &splits.val, splits.test.as_ref().unwrap()] {
        assert_eq!(split.dataset().decode_options().max_pixels, Some(2000));
    }
    config.data.max_image_pixels = 0;
    assert_eq!(open_splits(&config).unwrap().train.dataset().decode_options().max_pixels, None);
}

#[test]
fn bad_starts_leave_no_run_folder_and_name_the_cause() {
    let tmp = temp_dir();
    let data = tmp.path().join("data");
    shapes_dataset(&data, [6, 6, 0]);
    let runs = tmp.path().join("runs");
    // Missing weights: refused before a run folder exists.
    let mut c = small_config(&data, &runs, 1);
    c.model.pretrained = Some(tmp.path().join("missing.pth"));
    let err = fit(c, &Progress::quiet()).unwrap_err();
    assert!(err.to_string().contains("missing.pth"), "{err}");
    // A file in val/ that is not an image: named before the first epoch.
    std::fs::write(data.join("val/bar/notes.jpg"), b"not an image").unwrap();
    let err = fit(small_config(&data, &runs, 1), &Progress::quiet()).unwrap_err();
    assert!(
        err.to_string().contains("1 image cannot be read: ") && err.to_string().contains("notes.jpg"),
        "{err}"
    );
    std::fs::remove_file(data.join("val/bar/notes.jpg")).unwrap();
    // Batches of one at 32 px: ResNet-18's last BatchNorm sees a 1x1 map, one value per
    // channel, which PyTorch refuses (the run once ended rc 0 with NaN statistics as best).
    let mut c = small_config(&data, &runs, 1);
    c.train.batch_size = 1;
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        err.contains("train.batch_size")
            && err.contains("data.image_size = 32")
            && err.contains("[1, 512, 1, 1]")
            && err.contains("Expected more than 1 value per channel when training"),
        "{err}"
    );
    // Frozen BatchNorms keep their statistics, so a batch of one is fine; so are larger images.
    c.model.freeze_bn = true;
    c.validate().unwrap();
    torchlight_recipes::check_batch_norm_batches(&c, 1).unwrap();
    c.model.freeze_bn = false;
    c.data.image_size = Some(64);
    torchlight_recipes::check_batch_norm_batches(&c, 1).unwrap();
    // A single class: refused (a classifier would "learn" it with a loss of 0).
    for split in ["train", "val", "test"] {
        let _ = std::fs::remove_dir_all(data.join(split).join("circle"));
        let _ = std::fs::remove_dir_all(data.join(split).join("cross"));
    }
    let err = fit(small_config(&data, &runs, 1), &Progress::quiet()).unwrap_err();
    assert!(
        err.to_string().contains("train/ has 1 class folder (bar): a classifier needs at least 2"),
        "{err}"
    );
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "no exp_NNN folder was left"
    );
}

#[test]
fn a_bad_val_image_after_an_epoch_keeps_the_epoch_and_the_run_resumes() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let data = tmp.path().join("data");
    shapes_dataset(&data, [8, 8, 0]);
    // A JPEG cut after its header: the header check passes, decoding fails in validation.
    let victim = std::fs::read_dir(data.join("val/bar"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jpg"))
        .expect("the synthetic set has JPEGs");
    let whole = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &whole[..whole.len() / 3]).unwrap();
    let mut c = small_config(&data, &tmp.path().join("runs"), 2);
    c.data.workers = 0;
    let err = fit(c, &Progress::quiet()).unwrap_err();
    assert!(err.to_string().contains(&victim.file_name().unwrap().to_string_lossy().to_string()), "{err}");
    let run = tmp.path().join("runs/exp_001");
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let p = saved.meta.progress;
    assert_eq!(p.epoch, 0);
    assert!(p.batch > 0, "the trained epoch was saved before validation failed: {p:?}");
    // Fixed, the run resumes with validation and goes on.
    std::fs::write(&victim, &whole).unwrap();
    let summary = resume(&run, &[], &Progress::quiet()).unwrap();
    assert_eq!(summary.epochs, 2);
    assert_eq!(read_metrics_csv(run.join("metrics.csv")).unwrap().len(), 2);
}

#[test]
fn data_exif_transpose_reaches_every_split_and_the_eval_preprocessing_is_the_configs() {
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [4, 4, 4]);
    let mut c = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    assert!(c.data.exif_transpose, "on by default: phone photos come out upright");
    for on in [false, true] {
        c.set("data.exif_transpose", &on.to_string()).unwrap();
        let splits = open_splits(&c).unwrap();
        assert_eq!(splits.train.dataset().decode_options().exif_transpose, on);
        assert_eq!(splits.val.dataset().decode_options().exif_transpose, on, "the held-out val part too");
    }
    assert!(c.to_toml().contains("exif_transpose = true"));
    let eval = eval_preprocessing(&c);
    assert_eq!((eval.resize, eval.crop), (36, 32), "torchvision's preset at 32 px: 32 * 256 / 224");
}

#[test]
fn freeze_bn_keeps_every_batch_norm_bit_for_bit_through_a_frozen_then_unfrozen_fine_tune() {
    use tch::Tensor;
    use torchlight_checkpoint::Checkpoint;
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 8, 8]);
    // Pretrained weights whose BatchNorms hold statistics and affine values of their own.
    let pretrained = torchlight_nn::resnet18(3);
    let _g = torchlight_tensor::no_grad();
    for (name, t) in torchlight_nn::state_dict(&pretrained) {
        if name.contains("bn") || name.contains("downsample.1") {
            if name.ends_with("num_batches_tracked") {
                let _ = t.shallow_clone().fill_(7);
            } else {
                t.shallow_clone().copy_(&(Tensor::rand_like(&t) + 0.5));
            }
        }
    }
    drop(_g);
    let weights = tmp.path().join("r18.safetensors");
    torchlight_nn::save_safetensors(&pretrained, &weights).unwrap();
    let before: std::collections::HashMap<String, Tensor> =
        torchlight_nn::state_dict(&pretrained).into_iter().collect();

    // Three epochs: the backbone thaws once (the second epoch after it once failed with
    // "unfreezing left the trainable count", the frozen BatchNorms read as a frozen backbone).
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 3);
    config.model.pretrained = Some(weights);
    config.model.freeze_epochs = 1;
    config.model.freeze_bn = true;
    config.train.batch_size = 4;
    let summary = fit(config, &Progress::quiet()).unwrap();
    let trained = Checkpoint::load(summary.run_dir.join("checkpoints/last")).unwrap();
    let model = torchlight_nn::resnet18(3);
    trained.restore_model(&model).unwrap();
    let (mut fixed, mut moved) = (0, 0);
    for (name, t) in torchlight_nn::state_dict(&model) {
        if name.starts_with("fc.") {
            continue; // the new head
        }
        let was = &before[&name];
        if name.contains("bn") || name.contains("downsample.1") {
            assert!(t.equal(was), "{name} changed under model.freeze_bn");
            fixed += 1;
        } else if !t.equal(was) {
            moved += 1;
        }
    }
    assert_eq!(
        fixed,
        20 * 5,
        "weight, bias, running_mean, running_var, num_batches_tracked of 20 BatchNorms"
    );
    assert_eq!(moved, 20, "every convolution of the unfrozen backbone trained in epochs 2-3");
}

/// `model.freeze_bn_while_frozen` (Lightning's `train_bn=False`): while the backbone is frozen
/// its BatchNorms keep the pretrained statistics, bit for bit; once it thaws (here in a resumed
/// run extended by an epoch) they train. Without the key they adapt during the frozen epoch.
#[test]
fn freeze_bn_while_frozen_keeps_the_frozen_backbones_statistics_until_it_thaws() {
    use torchlight_checkpoint::Checkpoint;
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 4, 0]);
    let weights = tmp.path().join("r18.safetensors");
    torchlight_nn::save_safetensors(&torchlight_nn::resnet18(3), &weights).unwrap();
    let pretrained: Vec<(String, tch::Tensor)> = torchlight_nn::read_safetensors(&weights).unwrap();
    let statistics = |run: &Path| -> Vec<(String, tch::Tensor)> {
        let checkpoint = Checkpoint::load(run.join("checkpoints/last")).unwrap();
        checkpoint
            .model_state()
            .iter()
            .filter(|(k, _)| k.ends_with("running_mean") || k.ends_with("running_var"))
            .map(|(k, t)| (k.clone(), t.copy()))
            .collect()
    };
    let unchanged = |got: &[(String, tch::Tensor)]| {
        got.iter().filter(|(k, t)| pretrained.iter().any(|(p, w)| p == k && w.equal(t))).count()
    };
    let run = |out: &str, on: bool| {
        let mut c = small_config(&tmp.path().join("data"), &tmp.path().join(out), 1);
        c.model.pretrained = Some(weights.clone());
        c.model.freeze_epochs = 1;
        c.model.freeze_bn_while_frozen = on;
        fit(c, &Progress::quiet()).unwrap().run_dir
    };
    let kept = run("on", true);
    assert_eq!(
        unchanged(&statistics(&kept)),
        40,
        "all 20 BatchNorms kept their mean and variance while frozen"
    );
    // The key changes what the run learns, so a resume may not change it (not RESUME_CHANGEABLE).
    let changes =
        [("train.epochs".into(), "2".into()), ("model.freeze_bn_while_frozen".into(), "false".into())];
    let err = resume(&kept, &changes, &Progress::quiet()).unwrap_err().to_string();
    assert!(err.contains("model.freeze_bn_while_frozen") && err.contains("keeps its config"), "{err}");
    resume(&kept, &[("train.epochs".into(), "2".into())], &Progress::quiet()).unwrap();
    assert_eq!(unchanged(&statistics(&kept)), 0, "thawed, every BatchNorm trains");
    let adapted = run("off", false);
    assert_eq!(unchanged(&statistics(&adapted)), 0, "without the key the statistics adapt while frozen");

    let mut c = small_config(&tmp.path().join("data"), &tmp.path().join("x"), 1);
    c.model.freeze_bn_while_frozen = true;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("model.freeze_bn_while_frozen") && err.contains("model.freeze_epochs"), "{err}");
}

#[test]
fn ra_reps_deals_each_image_to_consecutive_ranks_augmented_anew_and_keeps_the_epoch_length() {
    use tch::Tensor;
    use torchlight_data::{RASampler, Sampler};
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 8, 8]);
    let mut c = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 2);
    c.data.workers = 0;
    c.train.batch_size = 2;
    c.train.seed = 4;
    let length = |c: &TrainConfig, rank| {
        sharded_loader(open_splits(c).unwrap().train, c, true, Device::Cpu, Some((rank, 2))).unwrap().len()
    };
    let plain = length(&c, 0);
    c.data.ra_reps = 3;
    c.validate().unwrap();
    assert_eq!(length(&c, 0), plain, "the epoch keeps its length");
    let splits = open_splits(&c).unwrap();
    let (n, targets) = (torchlight_data::Dataset::len(&splits.train), splits.train_targets());
    let epoch = |rank| -> Vec<(Tensor, Tensor)> {
        let mut l =
            sharded_loader(open_splits(&c).unwrap().train, &c, true, Device::Cpu, Some((rank, 2))).unwrap();
        l.epoch(1).map(|b| b.unwrap()).collect()
    };
    let (rank0, rank1) = (epoch(0), epoch(1));
    for (rank, batches) in [(0, &rank0), (1, &rank1)] {
        let order = RASampler::new(n, 2, rank).unwrap().with_seed(4).with_selected_round(0).indices(1);
        let labels: Vec<i64> = batches.iter().flat_map(|(_, y)| Vec::<i64>::try_from(y).unwrap()).collect();
        let expected: Vec<i64> = order.iter().map(|&i| targets[i]).collect();
        assert_eq!(labels, expected, "rank {rank}: torchvision's RASampler order");
    }
    // [a, a, a, b, b, b, ...] dealt to 2 ranks: rank 0 gets a, a, b; rank 1 a, b, b. Every
    // copy of `a` is its own augmentation, on one rank and across ranks.
    let a0 = rank0[0].0.get(0);
    assert!(!a0.equal(&rank0[0].0.get(1)), "the repeat on rank 0 is augmented anew");
    assert!(!a0.equal(&rank1[0].0.get(0)), "the copy on rank 1 is augmented apart");

    c.data.sampler = SamplerKind::Weighted;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("data.ra_reps") && err.contains("weighted"), "{err}");
}

#[test]
fn the_plateau_scheduler_cuts_the_lr_on_the_monitored_metric() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [16, 8, 0]);
    let mut c = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 3);
    c.set("scheduler.kind", "plateau").unwrap();
    for (k, v) in [("monitor", "\"val_loss\""), ("mode", "\"min\""), ("patience", "0"), ("factor", "0.5")] {
        c.set(&format!("scheduler.{k}"), v).unwrap();
    }
    c.set("scheduler.threshold", "10.0").unwrap();
    let summary = fit(c, &Progress::quiet()).unwrap();
    let rows = read_metrics_csv(summary.run_dir.join("metrics.csv")).unwrap();
    let lrs: Vec<f64> = rows.iter().map(|r| r.lr).collect();
    // threshold 10 (relative, min): an improvement needs val_loss < -9 * best, which never
    // holds (not even against the first best, inf, as in torch: -9 * inf is -inf), so every
    // epoch is bad and with patience 0 halves the lr after it.
    assert_eq!(lrs, [3e-3, 1.5e-3, 7.5e-4], "{lrs:?}");
    let last = torchlight_checkpoint::Checkpoint::load(summary.run_dir.join("checkpoints/last")).unwrap();
    assert_eq!(last.meta.loop_state["plateau"]["last_epoch"], 3);
}

#[test]
fn a_hub_model_folder_fine_tunes_as_weights_and_a_wrong_architecture_is_named() {
    use torchlight_checkpoint::Checkpoint;
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 8, 8]);
    // A timm-style folder: config.json (as timm's save_for_hf writes it, trimmed) and weights
    // with a 1000-class head, which the fine-tune replaces.
    let hub = tmp.path().join("resnet18.a1_in1k");
    std::fs::create_dir_all(&hub).unwrap();
    let config_json = |arch: &str| {
        format!(
            r#"{{"architecture": "{arch}", "num_classes": 1000, "pretrained_cfg": {{"input_size": [3, 224, 224],
            "interpolation": "bicubic", "crop_pct": 0.95, "crop_mode": "center",
            "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}}}"#
        )
    };
    std::fs::write(hub.join("config.json"), config_json("resnet18")).unwrap();
    let pretrained = torchlight_nn::resnet18(1000);
    torchlight_nn::save_safetensors(&pretrained, hub.join("model.safetensors")).unwrap();

    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.model.pretrained = Some(hub.clone());
    config.model.freeze_epochs = 1;
    config.model.freeze_bn = true;
    config.train.batch_size = 4;
    let summary = fit(config.clone(), &Progress::quiet()).unwrap();
    let trained = Checkpoint::load(summary.run_dir.join("checkpoints/last")).unwrap();
    // Its pretrained_cfg is the run's preprocessing: in config.toml and in the checkpoint's
    // card, which eval, predict and export read (the export metadata is built from it).
    let saved = std::fs::read_to_string(summary.run_dir.join("config.toml")).unwrap();
    for want in ["interpolation = \"bicubic\"", "crop_pct = 0.95", "mean = [0.485, 0.456, 0.406]"] {
        assert!(saved.contains(want), "{want} in\n{saved}");
    }
    let card = torchlight_recipes::ModelCard::from_checkpoint(&trained).unwrap();
    let metadata: std::collections::HashMap<_, _> =
        torchlight_recipes::image::eval_preprocessing(&card.config).metadata().into_iter().collect();
    assert_eq!(
        (metadata["resize_interpolation"].as_str(), metadata["resize_shorter_side"].as_str()),
        ("bicubic", "33")
    );
    let model = torchlight_nn::resnet18(3);
    trained.restore_model(&model).unwrap();
    let before: std::collections::HashMap<String, tch::Tensor> =
        torchlight_nn::state_dict(&pretrained).into_iter().collect();
    for (name, t) in torchlight_nn::state_dict(&model) {
        if !name.starts_with("fc.") {
            assert!(t.equal(&before[&name]), "{name}: the frozen backbone is the folder's");
        }
    }

    // The folder says another architecture: refused before a run folder, naming both.
    std::fs::write(hub.join("config.json"), config_json("vit_tiny_patch16_224")).unwrap();
    let err = fit(config, &Progress::quiet()).unwrap_err().to_string();
    assert!(err.contains("model.name") && err.contains("vit_tiny_patch16_224"), "{err}");
}

/// `scheduler.monitor = "val_top5"` with three classes (top-5 is clipped to top-3 and logged as
/// `val_top3`) is refused once the data is open, before a run folder; `val_top3` trains.
#[test]
fn a_top_k_monitor_is_held_to_the_metric_the_class_count_logs() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let data = tmp.path().join("data");
    shapes_dataset(&data, [8, 4, 0]);
    let runs = tmp.path().join("runs");
    let mut c = small_config(&data, &runs, 1);
    c.train.top_k = 5;
    c.set("scheduler.kind", "plateau").unwrap();
    c.set("scheduler.monitor", "val_top5").unwrap();
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        err.contains("scheduler.monitor") && err.contains("with 3 classes") && err.contains("val_top3"),
        "{err}"
    );
    assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(), "no run folder");
    c.set("scheduler.monitor", "val_top3").unwrap();
    let summary = fit(c, &Progress::quiet()).unwrap();
    assert!(summary.run_dir.join("checkpoints/best/meta.json").is_file());
}

/// Starting weights with a NaN are named as such, file and tensor, before training (not as a
/// non-finite gradient to cure with a lower lr); a Hub folder of an architecture the registry
/// lacks is said to be unsupported, listing those it has.
#[test]
fn nan_starting_weights_and_unsupported_hub_folders_name_the_cause() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let data = tmp.path().join("data");
    shapes_dataset(&data, [8, 4, 0]);
    let runs = tmp.path().join("runs");
    let weights = tmp.path().join("nan.safetensors");
    let mut state = torchlight_nn::state_dict(&torchlight_nn::resnet18(1000));
    let (_, t) = state.iter_mut().find(|(k, _)| k == "layer1.0.conv1.weight").unwrap();
    *t = t.copy();
    let _ = t.get(0).get(0).get(0).get(0).fill_(f64::NAN);
    torchlight_nn::write_safetensors(&state, &weights).unwrap();
    let mut c = small_config(&data, &runs, 1);
    c.model.pretrained = Some(weights);
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        err.contains("model.pretrained")
            && err.contains("nan.safetensors")
            && err.contains("`layer1.0.conv1.weight`")
            && err.contains("NaN"),
        "{err}"
    );
    assert!(!err.contains("lower the lr") && !err.contains("epoch"), "{err}");

    let hub = tmp.path().join("hub");
    std::fs::create_dir_all(&hub).unwrap();
    std::fs::write(hub.join("config.json"), r#"{"architecture": "resnet9000", "num_classes": 1000}"#)
        .unwrap();
    torchlight_nn::save_safetensors(&torchlight_nn::resnet18(1000), hub.join("model.safetensors")).unwrap();
    c.model.pretrained = Some(hub.clone());
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        err.contains("`resnet9000`")
            && err.contains("not a supported architecture")
            && err.contains("resnet18"),
        "{err}"
    );
    assert!(!err.contains("model.name = \"resnet9000\""), "{err}");
    // A registry name that is not timm's (torchvision's `mobilenet_v3_large`; timm's is
    // `mobilenetv3_large_100`): one line, before the load, not a list of keys.
    std::fs::write(hub.join("config.json"), r#"{"architecture": "mobilenet_v3_large", "num_classes": 1000}"#)
        .unwrap();
    c.model.name = "mobilenet_v3_large".into();
    let err = fit(c.clone(), &Progress::quiet()).unwrap_err().to_string();
    assert!(
        !err.contains('\n')
            && err.contains("`mobilenet_v3_large` is not a supported architecture")
            && err.contains("resnet18, ")
            && err.contains("resnet50d")
            && !err.contains("conv_stem"),
        "{err}"
    );
    // A model name the registry lacks (timm's MobileNetV4): one line, listing the names.
    c.model.name = "mobilenetv4_conv_small".into();
    let err = fit(c, &Progress::quiet()).unwrap_err().to_string();
    assert!(
        !err.contains('\n')
            && err.contains("mobilenetv4_conv_small")
            && err.contains("unknown model")
            && err.contains("resnet50d"),
        "{err}"
    );
}

/// A Hub folder of timm's `resnet50d` (deep stem, average-pool shortcuts, timm's keys) is the
/// model's starting point through the same path as the torchvision-keyed ResNets' folders:
/// every backbone tensor is the folder's, the 1000-class head replaced by a 3-class one.
#[test]
fn a_resnet50d_hub_folder_is_the_starting_point() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let hub = tmp.path().join("resnet50d.ra2_in1k");
    std::fs::create_dir_all(&hub).unwrap();
    std::fs::write(hub.join("config.json"), r#"{"architecture": "resnet50d.ra2_in1k", "num_classes": 1000}"#)
        .unwrap();
    let pretrained = torchlight_nn::resnet50d(1000);
    torchlight_nn::save_safetensors(&pretrained, hub.join("model.safetensors")).unwrap();
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.model.name = "resnet50d".into();
    config.model.pretrained = Some(hub);
    config.validate().unwrap();
    let model = build_model(&config, 3, Device::Cpu).unwrap();
    let before: std::collections::HashMap<String, tch::Tensor> =
        torchlight_nn::state_dict(&pretrained).into_iter().collect();
    let after = torchlight_nn::state_dict(model.as_ref());
    assert_eq!(after.len(), before.len());
    for key in ["conv1.6.weight", "layer2.0.downsample.1.weight"] {
        assert!(after.iter().any(|(k, _)| k == key), "timm's key {key}");
    }
    for (name, t) in after {
        if name.starts_with("fc.") {
            assert_eq!(t.size()[0], 3, "{name}: the new head");
        } else {
            assert!(t.equal(&before[&name]), "{name}: the folder's");
        }
    }
}

/// `train.sync_bn` in a single process trains with plain BatchNorm (it prints a note saying
/// so): the same weights and statistics, bit for bit, as the run without it, and a checkpoint
/// with the same keys.
#[test]
fn sync_bn_in_a_single_process_trains_as_plain_batch_norm() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [8, 4, 0]);
    let run = |out: &str, sync_bn: bool| {
        let mut c = small_config(&tmp.path().join("data"), &tmp.path().join(out), 1);
        c.train.sync_bn = sync_bn;
        let run = fit(c, &Progress::quiet()).unwrap().run_dir;
        let checkpoint = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
        checkpoint.model_state().iter().map(|(k, t)| (k.clone(), t.copy())).collect::<Vec<_>>()
    };
    let (plain, synced) = (run("plain", false), run("synced", true));
    assert_eq!(plain.len(), synced.len());
    let start = torchlight_nn::resnet18(3);
    let mut moved = 0;
    for ((ka, a), (kb, b)) in plain.iter().zip(&synced) {
        assert_eq!(ka, kb);
        assert!(a.equal(b), "{ka} differs with train.sync_bn in a single process");
        let initial = torchlight_nn::named_buffers(&start).into_iter().find(|(k, _)| k == ka);
        moved += usize::from(initial.is_some_and(|(_, t)| !t.equal(a)));
    }
    assert!(moved > 0, "the BatchNorm statistics trained");
}
