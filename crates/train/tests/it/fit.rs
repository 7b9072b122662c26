//! The fit loop end to end on generated ImageFolders: accuracy, the run folder, resume
//! equivalence and the overfit-one-batch check.

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use tch::Device;
use torchlight_train::synthetic::{write_image_folder, Shape, SyntheticSpec};
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
    c.data.image_size = 32;
    c.data.workers = 2;
    c.data.min_crop_scale = 0.5;
    c.optim.lr = 3e-3;
    c.optim.backbone_lr = 3e-3;
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
    config.optim.backbone_lr = 1e-3;
    let summary = fit(config, None, &Progress::quiet()).unwrap();
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
    assert!(rows[19].train_loss < rows[0].train_loss, "training loss falls");
    assert!(rows.iter().all(|r| r.images_per_s > 0.0 && (0.0..=100.0).contains(&r.data_stall_pct)));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    for key in ["best_val_acc", "best_epoch", "test_acc", "epochs", "seconds", "train_images_per_s"] {
        assert!(json.get(key).is_some(), "summary.json lacks {key}");
    }
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
    let straight = fit(config("a", 4), None, &Progress::quiet()).unwrap();

    // A run stopped after epoch 2 (as after a crash), then resumed with the run's own config.
    let first = fit(config("b", 2), None, &Progress::quiet()).unwrap();
    let config_path = first.run_dir.join("config.toml");
    let mut config = TrainConfig::from_toml_file(&config_path).unwrap();
    config.train.epochs = 4;
    config.write_toml_file(&config_path).unwrap();
    let resumed = fit(TrainConfig::default(), Some(&first.run_dir), &Progress::quiet()).unwrap();
    assert_eq!(resumed.epochs, 4);

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
    assert_eq!(rows[3].train_loss, straight_rows[3].train_loss);
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
        .with_transform(eval_transform(32));
    let split = torchlight_data::Subset::new(std::sync::Arc::new(folder), (0..9).collect()).unwrap();
    let mut batches = loader(split, &config, true, Device::Cpu).unwrap();
    let model = build_model(&config, 3, Device::Cpu).unwrap();
    let mut optimizer = build_optimizer(&config, &model).unwrap();
    let mut scaler =
        torchlight_optim::GradScaler::new(torchlight_optim::GradScalerConfig::default().with_enabled(false))
            .unwrap();
    let mut step = 0;
    let mut losses = Vec::new();
    for epoch in 0..40 {
        let out = train_one_epoch(
            &model,
            optimizer.as_mut(),
            None,
            &mut scaler,
            &mut batches,
            &config,
            Device::Cpu,
            3,
            epoch,
            &mut step,
            &Progress::quiet(),
        )
        .unwrap();
        losses.push(out.metrics.loss);
    }
    assert_eq!(step, 40);
    let last = *losses.last().unwrap();
    assert!(last < 0.05, "loss after 40 steps on one batch: {last} (first {})", losses[0]);
}

/// `data.max_image_pixels` reaches every split's decoder: 40x40 images (1600 pixels) under a
/// limit of 1000 fail their samples naming the file and the limit; 0 lifts the limit.
#[test]
fn the_pixel_limit_of_the_config_reaches_every_split() {
    use torchlight_data::Dataset;
    let tmp = temp_dir();
    shapes_dataset(&tmp.path().join("data"), [3, 3, 3]);
    let mut config = small_config(&tmp.path().join("data"), &tmp.path().join("runs"), 1);
    config.data.max_image_pixels = 1000;
    let splits = open_splits(&config).unwrap();
    let mut rng = torchlight_tensor::seed::rng_from_seed(0);
    for (name, split) in
        [("train", &splits.train), ("val", &splits.val), ("test", splits.test.as_ref().unwrap())]
    {
        let err = split.get(0, &mut rng).unwrap_err().to_string();
        assert!(err.contains("40x40 = 1600 pixels") && err.contains("limit of 1000"), "{name}: {err}");
    }
    config.data.max_image_pixels = 0;
    assert!(open_splits(&config).unwrap().train.get(0, &mut rng).is_ok());
}
