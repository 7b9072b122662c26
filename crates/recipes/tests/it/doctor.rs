//! `doctor`'s checks, each shown to fire on a constructed fault and to stay quiet on a healthy
//! set-up: generated 32-pixel ImageFolders, resnet18, CPU.

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use tch::{Device, Tensor};
use torchlight_nn::{freeze, resnet18, ResNet};
use torchlight_recipes::doctor::*;
use torchlight_recipes::image::*;
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_recipes::*;
use torchlight_tensor::seed_everything;

fn dataset(root: &Path, per_class: [usize; 3]) {
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross, Shape::Bar],
        per_class,
        size_range: (36, 44),
        seed: 5,
    };
    write_image_folder(root, &spec).unwrap();
}

fn config(root: &Path) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.data.root = root.to_path_buf();
    c.data.image_size = Some(32);
    c.data.workers = 0;
    c.train.batch_size = 8;
    c.train.device = "cpu".into();
    // The backbone at a tenth of the lr, as these checks were measured with: from scratch it
    // now trains at optim.lr (1e-3), which twelve steps on 8 images can read as a rising loss.
    c.optim.backbone_lr = Some(1e-4);
    c
}

fn options() -> DoctorOptions {
    DoctorOptions { run_steps: 12, ..DoctorOptions::default() }
}

fn status(report: &[Finding], check: &str) -> Status {
    report.iter().find(|f| f.check == check).unwrap_or_else(|| panic!("no `{check}` in {report:#?}")).status
}

fn find<'a>(report: &'a [Finding], check: &str) -> &'a Finding {
    report.iter().find(|f| f.check == check).unwrap_or_else(|| panic!("no `{check}` in {report:#?}"))
}

/// One batch of the training images without augmentation, and a fresh seeded model.
fn batch_and_model(c: &TrainConfig) -> (Tensor, Tensor, ResNet) {
    let splits = open_splits(c).unwrap();
    let mut l = loader(splits.val, c, true, Device::Cpu).unwrap();
    let (x, y) = l.epoch(0).next().unwrap().unwrap();
    seed_everything(0);
    (x, y, resnet18(3))
}

fn batches(c: &TrainConfig) -> Vec<(Tensor, Tensor)> {
    let splits = open_splits(c).unwrap();
    let mut l = loader(splits.train, c, true, Device::Cpu).unwrap();
    (0..4).flat_map(|e| l.epoch(e).map(|b| b.unwrap()).collect::<Vec<_>>()).collect()
}

#[test]
fn a_healthy_set_up_passes_every_check() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    dataset(tmp.path(), [16, 8, 8]);
    let report = doctor(&config(tmp.path()), &options()).unwrap();
    let text = report.to_text();
    assert_eq!(report.worst(), Status::Pass, "{text}");
    for check in [
        "class_count",
        "class_balance",
        "unreadable_files",
        "split_leak",
        "image_stats",
        "label_range",
        "finite_inputs",
        "batch_labels",
        "output_shape",
        "finite_activations",
        "initial_loss",
        "overfit_one_batch",
        "trainable_parameters",
        "lr_sanity",
        "loss_trend",
        "grad_flow",
        "data_stall",
    ] {
        assert!(report.get(check).is_some(), "`{check}` ran: {text}");
    }
    assert!(text.contains("[1] PASS  class_balance: train: bar 16, circle 16, cross 16"), "{text}");
    let stall = report.get("data_stall").unwrap();
    let (waited, total) = (stall.data["stall_s"].as_f64().unwrap(), stall.data["total_s"].as_f64().unwrap());
    assert!((0.0..=total).contains(&waited), "the stall is part of the run's time: {stall:?}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["findings"][0]["status"], "PASS");
}

#[test]
fn data_faults_are_found_imbalance_leak_unreadable_and_label_range() {
    let tmp = temp_dir();
    dataset(tmp.path(), [16, 8, 0]);
    let c = config(tmp.path());
    let quiet = check_data(&c, &options()).unwrap();
    for check in ["class_balance", "split_leak", "unreadable_files", "label_range", "image_stats"] {
        assert_eq!(status(&quiet, check), Status::Pass, "{check}: {quiet:#?}");
    }
    // 16 bars against 4 circles; one training image copied into val/; a file that is not an image.
    let train = tmp.path().join("train");
    for n in 0..12 {
        for ext in ["jpg", "png"] {
            let _ = std::fs::remove_file(train.join(format!("circle/{n:05}.{ext}")));
        }
    }
    let leaked = train.join("cross/00000.jpg");
    std::fs::copy(&leaked, tmp.path().join("val/cross/copy.jpg")).unwrap();
    std::fs::write(train.join("bar/broken.jpg"), b"not a jpeg").unwrap();
    let mut c = config(tmp.path());
    c.model.num_classes = Some(2);
    let found = check_data(&c, &options()).unwrap();
    let balance = find(&found, "class_balance");
    assert_eq!(balance.status, Status::Warn, "{balance:?}");
    assert!(balance.figure.contains("circle 4") && balance.figure.contains("4.2x in train"), "{balance:?}");
    // The advice names settings that exist.
    let fix = balance.fix.as_deref().unwrap();
    assert!(
        fix.contains("data.sampler = \"weighted\"") && fix.contains("train.class_weights = \"balanced\"")
    );
    for (key, value) in [("data.sampler", "weighted"), ("train.class_weights", "balanced")] {
        let mut fixed = c.clone();
        fixed.set(key, value).unwrap();
        fixed.validate().unwrap();
    }
    let leak = find(&found, "split_leak");
    assert_eq!(leak.status, Status::Fail);
    assert!(leak.figure.contains("cross/00000.jpg") && leak.figure.contains("copy.jpg"), "{leak:?}");
    let bad = find(&found, "unreadable_files");
    assert_eq!(bad.status, Status::Fail);
    assert!(bad.figure.contains("broken.jpg"), "{bad:?}");
    let labels = find(&found, "label_range");
    assert_eq!(labels.status, Status::Fail);
    assert_eq!(labels.fix.as_deref(), Some("set model.num_classes = 3 (or leave it unset)"));
    // The later stages would only crash on such data: they are skipped, not run.
    let _lock = torch_rng_lock();
    let report = doctor(&c, &options()).unwrap();
    assert_eq!(report.findings.last().unwrap().status, Status::Skip, "{}", report.to_text());
    assert!(report.get("overfit_one_batch").is_none());
}

#[test]
fn one_batch_checks_catch_a_nan_pixel_and_labels_out_of_range() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    dataset(tmp.path(), [8, 8, 0]);
    let c = config(tmp.path());
    let (x, y, model) = batch_and_model(&c);
    let split = Some(&model as &dyn torchlight_nn::Classifier);
    let healthy = check_batch(&model, split, &x, &y, 3);
    assert!(healthy.iter().all(|f| f.status == Status::Pass), "{healthy:#?}");
    let loss = find(&healthy, "initial_loss").data["loss"].as_f64().unwrap();
    assert!((loss - 3f64.ln()).abs() < 0.55, "loss at init {loss} is near ln 3");

    let nan = x.copy();
    let _ = nan.get(0).get(1).get(5).get(7).fill_(f64::NAN);
    let found = check_batch(&model, split, &nan, &y, 3);
    let inputs = find(&found, "finite_inputs");
    assert_eq!(inputs.status, Status::Fail);
    assert!(inputs.figure.contains("1 NaN"), "{inputs:?}");
    assert_eq!(status(&found, "finite_activations"), Status::Fail, "the NaN reaches the features");

    let out_of_range = y.copy();
    let _ = out_of_range.get(0).fill_(3);
    let found = check_batch(&model, split, &x, &out_of_range, 3);
    let labels = find(&found, "batch_labels");
    assert_eq!(labels.status, Status::Fail);
    assert!(labels.figure.contains("[0, 3] for 3 outputs"), "{labels:?}");
    assert!(found.iter().all(|f| f.check != "initial_loss"), "no loss is computed on bad labels");

    // Any registered architecture's features are checked apart from its head, not only a
    // ResNet's; a model the registry cannot split is checked end to end.
    let arch = torchlight_nn::architecture("mobilenet_v3_small").unwrap();
    let mobile = arch.build(torchlight_nn::ModelSpec::new(3, 32), Default::default()).unwrap();
    let found = check_batch(mobile.as_ref(), arch.classifier(mobile.as_ref()), &x, &y, 3);
    let activations = find(&found, "finite_activations");
    assert_eq!(activations.figure, "backbone features and logits are finite", "{found:#?}");
    let found = check_batch(mobile.as_ref(), None, &x, &y, 3);
    assert_eq!(find(&found, "finite_activations").figure, "the outputs are finite");
}

#[test]
fn overfitting_one_batch_passes_and_fails_on_a_frozen_model() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    dataset(tmp.path(), [8, 8, 0]);
    let c = config(tmp.path());
    let (x, y, model) = batch_and_model(&c);
    let batch = (x.shallow_clone(), y.shallow_clone());
    let ok = overfit_batch(&model, "fc.", &batch, &c, &options()).unwrap();
    assert_eq!(ok.status, Status::Pass, "{ok:?}");
    let (_, _, frozen) = batch_and_model(&c);
    freeze(&frozen, "");
    let bad = overfit_batch(&frozen, "fc.", &batch, &c, &options()).unwrap();
    assert_eq!(bad.status, Status::Fail, "{bad:?}");
    // A model whose weights cannot move (lr 0) does not memorise the batch: the check fails
    // and blames model or labels.
    let mut still = c.clone();
    (still.optim.lr, still.optim.backbone_lr) = (0.0, Some(0.0));
    let (_, _, fresh) = batch_and_model(&c);
    let ten = DoctorOptions { overfit_steps: 10, ..options() };
    let bad = overfit_batch(&fresh, "fc.", &batch, &still, &ten).unwrap();
    assert_eq!(bad.status, Status::Fail, "{bad:?}");
    assert!(bad.fix.as_deref().unwrap().contains("labels"), "{bad:?}");
}

#[test]
fn the_short_run_flags_a_high_lr_a_frozen_model_and_a_dead_head() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    dataset(tmp.path(), [16, 8, 0]);
    let c = config(tmp.path());
    let data = batches(&c);
    // Few steps keep the test short. Preloaded batches wait ~0 s, but the stall share is
    // measured time: its status is not asserted here (`stall_finding` is tested with given
    // figures), so the test holds on a loaded machine.
    let options = DoctorOptions { run_steps: 6, stall_share: 1.0, ..options() };
    let run = |model: &ResNet, c: &TrainConfig| {
        let it = data.iter().map(|(x, y)| Ok((x.shallow_clone(), y.shallow_clone())));
        short_run(model, "fc.", it, c, Device::Cpu, &options).unwrap()
    };

    let (_, _, model) = batch_and_model(&c);
    let healthy = run(&model, &c);
    assert!(healthy.iter().all(|f| f.status == Status::Pass), "{healthy:#?}");
    let stall = find(&healthy, "data_stall");
    assert_eq!(
        stall,
        &stall_finding(
            stall.data["stall_s"].as_f64().unwrap(),
            stall.data["total_s"].as_f64().unwrap(),
            options.stall_share,
        )
    );

    let mut high = c.clone();
    high.optim.lr = 10.0;
    high.optim.backbone_lr = Some(10.0);
    let (_, _, model) = batch_and_model(&c);
    let found = run(&model, &high);
    let lr = find(&found, "lr_sanity");
    assert_eq!(lr.status, Status::Fail, "{found:#?}");
    assert!(lr.fix.as_deref().unwrap().contains("lower the lr (try optim.lr = 1.0e0)"), "{lr:?}");
    assert!(lr.fix.as_deref().unwrap().contains("`torchlight tune lr`"), "{lr:?}");

    let (_, _, model) = batch_and_model(&c);
    freeze(&model, "");
    let found = run(&model, &c);
    let frozen = find(&found, "trainable_parameters");
    assert_eq!(frozen.status, Status::Fail);
    assert!(frozen.figure.starts_with("0 of 11178051"), "{frozen:?}");

    let (_, _, mut model) = batch_and_model(&c);
    let _guard = torchlight_tensor::no_grad();
    let _ = model.fc.weight.zero_();
    let _ = model.fc.bias.as_mut().unwrap().zero_();
    drop(_guard);
    let found = run(&model, &c);
    let flow = find(&found, "grad_flow");
    assert_eq!(flow.status, Status::Warn, "{found:#?}");
    assert!(flow.figure.contains("get no gradient at step 1: conv1, bn1"), "{flow:?}");
    assert!(flow.fix.as_deref().unwrap().starts_with("fc.weight is all zeros"), "{flow:?}");
}

#[test]
fn the_report_prints_status_figure_and_fix() {
    let report = DoctorReport {
        findings: vec![
            check_batch_like(Status::Pass, None),
            check_batch_like(Status::Warn, Some("raise data.workers")),
        ],
    };
    assert_eq!(
        report.to_text(),
        "[4] PASS  data_stall: 5% waiting\n[4] WARN  data_stall: 5% waiting\n          fix: raise data.workers\n"
    );
    assert_eq!(report.worst(), Status::Warn);
}

fn check_batch_like(status: Status, fix: Option<&str>) -> Finding {
    Finding {
        stage: 4,
        check: "data_stall",
        status,
        figure: "5% waiting".into(),
        fix: fix.map(String::from),
        data: serde_json::Value::Null,
    }
}

#[test]
fn a_single_class_is_the_cause_not_a_learning_rate() {
    let tmp = temp_dir();
    dataset(tmp.path(), [12, 0, 0]);
    for split in ["train", "val", "test"] {
        for class in ["circle", "cross"] {
            let _ = std::fs::remove_dir_all(tmp.path().join(split).join(class));
        }
    }
    let c = config(tmp.path());
    let _lock = torch_rng_lock();
    let report = doctor(&c, &options()).unwrap();
    let count = report.get("class_count").unwrap();
    assert_eq!(count.status, Status::Fail, "{}", report.to_text());
    assert!(count.figure.contains("1 class folder (bar)"), "{count:?}");
    assert!(report.get("lr_sanity").is_none() && report.get("grad_flow").is_none(), "{}", report.to_text());
}

/// Batches of one at 32 px leave ResNet-18's last BatchNorm one value per channel: the doctor
/// says so at stage 2, with the fix, instead of overfitting and running on NaN statistics.
#[test]
fn a_batch_of_one_that_breaks_batch_norm_fails_stage_two_with_the_fix() {
    let tmp = temp_dir();
    dataset(tmp.path(), [4, 2, 0]);
    let mut c = config(tmp.path());
    c.train.batch_size = 1;
    let _lock = torch_rng_lock();
    let report = doctor(&c, &options()).unwrap();
    let text = report.to_text();
    let f = find(&report.findings, "batch_norm_batch");
    assert_eq!((f.stage, f.status), (2, Status::Fail), "{text}");
    assert!(f.figure.contains("[1, 512, 1, 1]"), "{f:?}");
    assert!(f.fix.as_deref().is_some_and(|fix| fix.contains("train.batch_size of 2 or more")), "{f:?}");
    assert!(report.get("overfit_one_batch").is_none(), "{text}");
}
