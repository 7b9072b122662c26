//! TrainConfig: files, errors that name fields, lines and files, overrides, validation.

use std::path::PathBuf;
use torchlight_recipes::{RecipeError, SchedulerConfig, TrainConfig};

fn write(dir: &std::path::Path, text: &str) -> PathBuf {
    let path = dir.join("train.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_full_file_reads_every_section() {
    let dir = crate::temp_dir();
    let path = write(
        dir.path(),
        r#"
[data]
root = "datasets/flowers"
image_size = 160
workers = 2

[model]
name = "resnet34"
pretrained = "weights/r34.safetensors"
num_classes = 5
freeze_epochs = 2

[optim]
optimizer = "sgd"
lr = 0.1
backbone_lr = 0.01
momentum = 0.8

[scheduler]
kind = "step"
step_size = 3

[train]
epochs = 6
batch_size = 16
amp = true
grad_clip = 1.0
early_stopping_patience = 2
device = "cpu"
"#,
    );
    let c = TrainConfig::from_toml_file(&path).unwrap();
    c.validate().unwrap();
    assert_eq!(c.data.root, PathBuf::from("datasets/flowers"));
    assert_eq!(c.data.val_dir(), PathBuf::from("datasets/flowers/val"));
    assert_eq!((c.data.image_size(), c.data.workers), (160, 2));
    assert_eq!(c.model.pretrained, Some(PathBuf::from("weights/r34.safetensors")));
    assert_eq!((c.model.num_classes, c.model.freeze_epochs), (Some(5), 2));
    assert_eq!((c.optim.lr, c.optim.backbone_lr, c.optim.momentum), (0.1, Some(0.01), 0.8));
    assert_eq!(c.scheduler, SchedulerConfig::Step { step_size: 3, gamma: 0.1 });
    assert_eq!((c.train.epochs, c.train.batch_size, c.train.amp), (6, 16, true));
    assert_eq!((c.train.grad_clip, c.train.early_stopping_patience), (Some(1.0), Some(2)));
    // Unset fields keep their defaults.
    assert_eq!(c.optim.weight_decay, 0.01);
    assert_eq!(c.train.out_dir, PathBuf::from("runs"));

    // The effective config written to a run folder reads back equal.
    let out = dir.path().join("config.toml");
    c.write_toml_file(&out).unwrap();
    assert_eq!(TrainConfig::from_toml_file(&out).unwrap(), c);
}

#[test]
fn unknown_fields_are_errors_naming_file_line_and_field() {
    let dir = crate::temp_dir();
    let path = write(dir.path(), "[train]\nepochs = 3\nbach_size = 8\n");
    let err = TrainConfig::from_toml_file(&path).unwrap_err();
    match &err {
        RecipeError::ConfigParse { path: p, line, message, .. } => {
            assert_eq!(p, &path);
            assert_eq!(*line, Some(3));
            assert!(message.contains("bach_size"), "{message}");
        }
        other => panic!("expected ConfigParse, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("train.toml:3:"), "{text}");

    let err = TrainConfig::from_toml_str("learning_rate = 0.1\n").unwrap_err();
    assert!(err.to_string().contains("learning_rate"), "{err}");
    // A parameter of another scheduler kind is unknown too.
    let err = TrainConfig::from_toml_str("[scheduler]\nkind = \"cosine\"\ngamma = 0.5\n").unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
    let err = TrainConfig::from_toml_str("[scheduler]\nkind = \"exponential\"\n").unwrap_err();
    assert!(err.to_string().contains("exponential"), "{err}");
}

#[test]
fn wrong_types_name_the_field_and_line() {
    let err = TrainConfig::from_toml_str("[data]\nroot = \"d\"\nimage_size = \"big\"\n").unwrap_err();
    match &err {
        RecipeError::ConfigParse { line, message, .. } => {
            assert_eq!(*line, Some(3), "{err}");
            assert!(message.contains("string") || message.contains("integer"), "{message}");
        }
        other => panic!("expected ConfigParse, got {other:?}"),
    }
    let err = TrainConfig::from_toml_str("[train\nepochs = 1\n").unwrap_err();
    assert!(matches!(err, RecipeError::ConfigParse { line: Some(1), .. }), "{err:?}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = TrainConfig::from_toml_file("/nonexistent/train.toml").unwrap_err();
    assert!(matches!(err, RecipeError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/train.toml"), "{err}");
}

/// Applies `key = value`, validates, and returns the field the error names.
fn invalid_field(key: &str, value: &str) -> String {
    let mut c = TrainConfig::default();
    c.set(key, value).unwrap_or_else(|e| panic!("set {key}={value}: {e}"));
    match c.validate() {
        Err(RecipeError::InvalidConfig { field, reason, .. }) => {
            assert!(!reason.is_empty());
            field
        }
        other => panic!("{key} = {value}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn validate_names_the_invalid_field() {
    let cases = [
        ("train.batch_size", "0", "train.batch_size"),
        ("train.epochs", "0", "train.epochs"),
        ("optim.lr", "0", "optim.lr"),
        ("optim.lr", "-1e-3", "optim.lr"),
        ("optim.lr", "nan", "optim.lr"),
        ("optim.backbone_lr", "0", "optim.backbone_lr"),
        ("optim.weight_decay", "-0.1", "optim.weight_decay"),
        ("optim.betas", "[0.9, 1.0]", "optim.betas"),
        ("optim.warmup_epochs", "10", "optim.warmup_epochs"),
        ("model.freeze_epochs", "11", "model.freeze_epochs"),
        // Frozen BatchNorm while frozen needs frozen epochs.
        ("model.freeze_bn_while_frozen", "true", "model.freeze_bn_while_frozen"),
        ("model.name", "vgg16", "model.name"),
        ("model.num_classes", "1", "model.num_classes"),
        ("data.image_size", "0", "data.image_size"),
        ("data.val_fraction", "1.0", "data.val_fraction"),
        ("train.label_smoothing", "1.5", "train.label_smoothing"),
        ("train.grad_clip", "0", "train.grad_clip"),
        ("train.accumulation_steps", "0", "train.accumulation_steps"),
        ("train.early_stopping_patience", "0", "train.early_stopping_patience"),
        ("train.top_k", "0", "train.top_k"),
        ("train.device", "gpu", "train.device"),
        ("scheduler.eta_min", "-1", "scheduler.eta_min"),
        // Sizes that allocate are bounded before anything is allocated.
        ("data.image_size", "4000000000", "data.image_size"),
        ("data.workers", "100000", "data.workers"),
        ("model.num_classes", "1000000000", "model.num_classes"),
        ("train.batch_size", "1000000", "train.batch_size"),
        ("train.class_weights", "[1.0, -2.0]", "train.class_weights"),
        ("train.checkpoint_every_steps", "0", "train.checkpoint_every_steps"),
        ("train.mixup_alpha", "-0.2", "train.mixup_alpha"),
        ("train.cutmix_alpha", "inf", "train.cutmix_alpha"),
        ("train.model_ema_decay", "1.5", "train.model_ema_decay"),
        ("train.model_ema_steps", "0", "train.model_ema_steps"),
        ("train.model_ema_warmup", "true", "train.model_ema_warmup"),
        // The Mixup switches without Mixup or CutMix name the missing alpha.
        ("train.mixup_prob", "0.5", "train.mixup_alpha"),
        ("train.mixup_off_epoch", "3", "train.mixup_alpha"),
        // The BCE's threshold without the BCE, or outside [0, 1).
        ("train.bce_target_thresh", "0.2", "train.bce_target_thresh"),
        ("optim.norm_weight_decay", "-1e-5", "optim.norm_weight_decay"),
        ("optim.bias_weight_decay", "inf", "optim.bias_weight_decay"),
        ("optim.layer_decay", "0", "optim.layer_decay"),
        ("optim.layer_decay", "1.5", "optim.layer_decay"),
        ("optim.layer_decay", "nan", "optim.layer_decay"),
        ("data.ra_reps", "0", "data.ra_reps"),
        ("data.ra_reps", "1000", "data.ra_reps"),
        ("data.random_erase", "1.5", "data.random_erase"),
        ("data.random_erase", "-0.1", "data.random_erase"),
        ("data.random_erase", "nan", "data.random_erase"),
        ("data.hflip", "1.5", "data.hflip"),
        ("data.hflip", "-0.5", "data.hflip"),
        ("data.hflip", "nan", "data.hflip"),
        ("data.color_jitter", "-0.4", "data.color_jitter"),
        ("data.color_jitter", "inf", "data.color_jitter"),
        ("data.rotation", "-10", "data.rotation"),
        ("data.rotation", "400", "data.rotation"),
        ("data.rotation", "nan", "data.rotation"),
    ];
    for (key, value, field) in cases {
        assert_eq!(invalid_field(key, value), field, "{key} = {value}");
    }

    let mut c = TrainConfig::default();
    c.set("train.mixup_alpha", "0.2").unwrap();
    for (key, value) in
        [("train.mixup_prob", "1.5"), ("train.mixup_switch_prob", "-1"), ("train.mixup_off_epoch", "0")]
    {
        let mut bad = c.clone();
        bad.set(key, value).unwrap();
        assert!(
            matches!(bad.validate(), Err(RecipeError::InvalidConfig { ref field, .. }) if field == key),
            "{key} = {value}: {:?}",
            bad.validate()
        );
    }
    c.set("train.mixup_off_epoch", "3").unwrap();
    c.set("model_ema", "true").unwrap();
    c.set("model_ema_warmup", "true").unwrap();
    c.validate().unwrap();

    let mut c = TrainConfig::default();
    c.set("scheduler.kind", "step").unwrap();
    c.set("step_size", "0").unwrap();
    assert!(
        matches!(c.validate(), Err(RecipeError::InvalidConfig { field, .. }) if field == "scheduler.step_size")
    );

    let mut c = TrainConfig::default();
    c.set("scheduler.kind", "onecycle").unwrap();
    c.set("warmup_epochs", "1").unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().contains("optim.warmup_epochs") && err.to_string().contains("onecycle"), "{err}");

    let mut c = TrainConfig::default();
    c.set("scheduler.kind", "multistep").unwrap();
    assert!(
        matches!(c.validate(), Err(RecipeError::InvalidConfig { field, .. }) if field == "scheduler.milestones")
    );
    c.set("milestones", "[3, 6]").unwrap();
    assert_eq!(c.scheduler, SchedulerConfig::MultiStep { milestones: vec![3, 6], gamma: 0.1 });
    c.validate().unwrap();
    c.set("milestones", "[5, 3]").unwrap();
    assert!(
        matches!(c.validate(), Err(RecipeError::InvalidConfig { field, .. }) if field == "scheduler.milestones")
    );

    // The message says what is wrong in words.
    let mut c = TrainConfig::default();
    c.set("freeze_epochs", "12").unwrap();
    let text = c.validate().unwrap_err().to_string();
    assert!(
        text.contains("model.freeze_epochs") && text.contains("12") && text.contains("train.epochs (10)"),
        "{text}"
    );
}

#[test]
fn overrides_set_fields_by_key() {
    let mut c = TrainConfig::default();
    c.set("epochs", "5").unwrap();
    c.set("--image-size", "128").unwrap();
    c.set("optim.lr", "3e-4").unwrap();
    c.set("lr", "1").unwrap(); // an integer is fine for a float field
    c.set("amp", "true").unwrap();
    c.set("pretrained", "weights/r18.pth").unwrap();
    c.set("out_dir", "123").unwrap(); // digits are still a folder name
    c.set("device", "cuda:1").unwrap();
    c.set("optimizer", "adam").unwrap();
    c.set("grad_clip", "1.5").unwrap();
    assert_eq!(c.train.epochs, 5);
    assert_eq!(c.data.image_size(), 128);
    assert_eq!(c.optim.lr, 1.0);
    assert!(c.train.amp);
    assert_eq!(c.model.pretrained, Some(PathBuf::from("weights/r18.pth")));
    assert_eq!(c.train.out_dir, PathBuf::from("123"));
    assert_eq!(c.train.device, "cuda:1");
    assert_eq!(c.train.grad_clip, Some(1.5));
    c.set("grad_clip", "none").unwrap();
    assert_eq!(c.train.grad_clip, None);

    // Switching the scheduler kind starts from that kind's defaults.
    c.set("scheduler.kind", "step").unwrap();
    assert_eq!(c.scheduler, SchedulerConfig::Step { step_size: 30, gamma: 0.1 });
    c.set("gamma", "0.5").unwrap();
    assert_eq!(c.scheduler, SchedulerConfig::Step { step_size: 30, gamma: 0.5 });
    c.validate().unwrap();
}

#[test]
fn bad_overrides_name_the_key() {
    let mut c = TrainConfig::default();
    let before = c.clone();
    match c.set("epoch", "5").unwrap_err() {
        RecipeError::UnknownKey { key, suggestions } => {
            assert_eq!(key, "epoch");
            assert!(suggestions.contains(&"train.epochs".to_string()), "{suggestions:?}");
        }
        other => panic!("expected UnknownKey, got {other:?}"),
    }
    assert_eq!(
        c.set("epoch", "5").unwrap_err().to_string(),
        "unknown config key `epoch` (did you mean `train.epochs`?)"
    );
    let err = c.set("epochs", "five").unwrap_err();
    match &err {
        RecipeError::InvalidOverride { key, value, .. } => {
            assert_eq!((key.as_str(), value.as_str()), ("train.epochs", "five"))
        }
        other => panic!("expected InvalidOverride, got {other:?}"),
    }
    assert!(err.to_string().contains("train.epochs"), "{err}");
    let err = c.set("epochs", "-1").unwrap_err();
    assert!(matches!(err, RecipeError::InvalidOverride { .. }), "{err:?}");
    // A parameter the current scheduler (cosine) does not have.
    let err = c.set("step_size", "3").unwrap_err();
    assert!(
        err.to_string().contains("step_size") && err.to_string().contains("set scheduler.kind first"),
        "{err}"
    );
    let err = c.set("optimizer", "lamb").unwrap_err();
    assert!(err.to_string().contains("lamb"), "{err}");
    // Failed overrides leave the config as it was.
    assert_eq!(c, before);
}

#[test]
fn a_huge_image_size_is_refused_naming_the_bound() {
    let mut c = TrainConfig::default();
    c.set("image-size", "4000000000").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert_eq!(err, "config field `data.image_size` = 4000000000: must be at most 8192 pixels");
    let mut c = TrainConfig::default();
    c.set("image_size", "8192").unwrap();
    c.set("batch_size", "512").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("one batch of 512 images of 8192x8192 pixels would take 384.0 GiB"), "{err}");
}

#[test]
fn the_settings_doctor_suggests_exist() {
    let mut c = TrainConfig::from_toml_str(
        "[data]\nsampler = \"weighted\"\n[train]\nclass_weights = \"balanced\"\nextend_schedule = \"restart\"\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.data.sampler, torchlight_recipes::SamplerKind::Weighted);
    c.set("class_weights", "[1, 2.5, 0.5]").unwrap();
    assert_eq!(c.train.class_weights, torchlight_recipes::ClassWeights::Given(vec![1.0, 2.5, 0.5]));
    let back = TrainConfig::from_toml_str(&c.to_toml()).unwrap();
    assert_eq!(back, c);
    assert!(matches!(c.set("sampler", "uniform"), Err(RecipeError::InvalidOverride { .. })));
}

#[test]
fn the_plateau_scheduler_reads_with_torchs_names_and_defaults_and_is_validated() {
    let c = TrainConfig::from_toml_str("[scheduler]\nkind = \"plateau\"\n").unwrap();
    // torch.optim.lr_scheduler.ReduceLROnPlateau's defaults; Lightning's monitor default.
    let defaults = SchedulerConfig::Plateau {
        monitor: "val_loss".into(),
        mode: "min".into(),
        factor: 0.1,
        patience: 10,
        threshold: 1e-4,
        threshold_mode: "rel".into(),
        cooldown: 0,
        min_lr: 0.0,
        eps: 1e-8,
    };
    assert_eq!(c.scheduler, defaults);
    assert_eq!(c.scheduler.kind(), "plateau");
    c.validate().unwrap();
    let text = "[scheduler]\nkind = \"plateau\"\nmonitor = \"val_acc\"\nmode = \"max\"\nfactor = 0.5\npatience = 2\n\
                threshold = 0.01\nthreshold_mode = \"abs\"\ncooldown = 1\nmin_lr = 1e-6\neps = 1e-9\n";
    let c = TrainConfig::from_toml_str(text).unwrap();
    let SchedulerConfig::Plateau {
        monitor, mode, factor, patience, threshold_mode, cooldown, min_lr, ..
    } = &c.scheduler
    else {
        panic!("{:?}", c.scheduler)
    };
    assert_eq!(
        (monitor.as_str(), mode.as_str(), *factor, *patience, threshold_mode.as_str(), *cooldown, *min_lr),
        ("val_acc", "max", 0.5, 2, "abs", 1, 1e-6)
    );
    // The built scheduler and the metric it is given to the Trainer with.
    let w = tch::Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let opt = torchlight_optim::Sgd::new(vec![torchlight_optim::ParamGroup::new(
        vec![("w".into(), w)],
        torchlight_optim::SgdConfig::new(0.1),
    )])
    .unwrap();
    let (plateau, monitor) = torchlight_recipes::build_plateau(&c, &opt).unwrap().expect("a plateau");
    assert_eq!((monitor.as_str(), plateau.best()), ("val_acc", f64::NEG_INFINITY));
    assert!(torchlight_recipes::build_plateau(&TrainConfig::default(), &opt).unwrap().is_none());

    let bad = |key: &str, value: &str| {
        let mut c = TrainConfig::default();
        c.set("scheduler.kind", "plateau").unwrap();
        c.set(key, value).unwrap_or_else(|e| panic!("set {key}={value}: {e}"));
        c.validate().unwrap_err().to_string()
    };
    for (key, value) in [
        ("scheduler.factor", "1.0"),
        ("scheduler.factor", "0"),
        ("scheduler.threshold", "-1"),
        ("scheduler.min_lr", "-1e-3"),
        ("scheduler.eps", "nan"),
        ("scheduler.monitor", "\"val_f1\""),
        ("optim.warmup_epochs", "2"),
        ("scheduler.mode", "\"lowest\""),
        ("scheduler.threshold_mode", "\"relative\""),
    ] {
        let err = bad(key, value);
        assert!(err.contains(key), "{key} = {value}: {err}");
    }
    assert!(bad("scheduler.monitor", "\"val_f1\"").contains("val_loss, val_acc, val_top5"));
    assert!(bad("scheduler.mode", "\"lowest\"").contains("\"min\" or \"max\""));
}

/// `data.auto_augment` and `data.random_erase` compose torchvision's preset order (crop, flip,
/// policy, ToTensor, Normalize, RandomErasing); the defaults leave the transform as it was.
#[test]
fn augmentation_keys_compose_torchvisions_preset_order() {
    use torchlight_recipes::image::{train_transform, train_transform_for};
    use torchlight_vision::{
        Image, Normalize, RandAugment, RandomErasing, RandomHorizontalFlip, RandomResizedCrop, Sample,
        ToTensor, TrivialAugmentWide,
    };
    let names = |c: &TrainConfig| -> Vec<String> {
        train_transform_for(&c.data)
            .transforms()
            .iter()
            .map(|t| {
                let any = t.as_any();
                if any.is::<RandomResizedCrop>() {
                    "crop"
                } else if any.is::<RandomHorizontalFlip>() {
                    "flip"
                } else if any.is::<TrivialAugmentWide>() {
                    "ta_wide"
                } else if any.is::<RandAugment>() {
                    "ra"
                } else if any.is::<ToTensor>() {
                    "to_tensor"
                } else if any.is::<Normalize>() {
                    "normalize"
                } else if any.is::<RandomErasing>() {
                    "erase"
                } else {
                    "other"
                }
                .to_string()
            })
            .collect()
    };
    let mut c = TrainConfig::default();
    assert_eq!(names(&c), ["crop", "flip", "to_tensor", "normalize"]);
    // The default is today's transform, output for output.
    let image = Image::new(37, 29, 3, (0..37 * 29 * 3).map(|v| (v * 7 % 251) as u8).collect());
    let (old, new) = (train_transform(224, 0.08), train_transform_for(&c.data));
    for seed in 0..8 {
        use torchlight_vision::Transform;
        let a = old.apply(Sample::Image(image.clone()), &mut torchlight_data::rng_from_seed(seed)).unwrap();
        let b = new.apply(Sample::Image(image.clone()), &mut torchlight_data::rng_from_seed(seed)).unwrap();
        assert_eq!(a, b, "seed {seed}");
    }
    c.set("data.auto_augment", "ta_wide").unwrap();
    c.set("data.random_erase", "0.25").unwrap();
    c.validate().unwrap();
    assert_eq!(names(&c), ["crop", "flip", "ta_wide", "to_tensor", "normalize", "erase"]);
    c.set("auto_augment", "ra").unwrap();
    assert_eq!(names(&c), ["crop", "flip", "ra", "to_tensor", "normalize", "erase"]);
    let err = c.set("data.auto_augment", "autoaugment").unwrap_err();
    assert!(err.to_string().contains("data.auto_augment"), "{err}");

    // data.hflip, data.rotation and data.color_jitter: the flip's probability (0 leaves it out),
    // then rotation and colour jitter after it, before the policy.
    let mut c = TrainConfig::default();
    c.set("data.rotation", "15").unwrap();
    c.set("data.color_jitter", "0.4").unwrap();
    c.set("data.hflip", "0.3").unwrap();
    c.set("data.auto_augment", "ta_wide").unwrap();
    c.validate().unwrap();
    assert_eq!(names(&c), ["crop", "flip", "other", "other", "ta_wide", "to_tensor", "normalize"]);
    let steps = format!("{:?}", train_transform_for(&c.data).transforms());
    assert!(steps.contains("RandomHorizontalFlip { p: 0.3 }"), "{steps}");
    assert!(steps.contains("RandomRotation { degrees: (-15.0, 15.0)"), "{steps}");
    assert!(steps.contains("ColorJitter { brightness: Some((0.6, 1.4)), contrast: Some((0.6, 1.4)), saturation: Some((0.6, 1.4)), hue: None }"), "{steps}");
    c.set("data.hflip", "0").unwrap();
    assert_eq!(names(&c)[..2], ["crop", "other"]);
    // At their defaults the keys are not written, so a run folder's config is as it was.
    let written = toml::to_string(&TrainConfig::default()).unwrap();
    for key in ["hflip", "color_jitter", "rotation"] {
        assert!(!written.contains(key), "{key} written at its default:\n{written}");
    }
    let read: TrainConfig = toml::from_str(&written).unwrap();
    assert_eq!((read.data.hflip, read.data.color_jitter, read.data.rotation), (0.5, 0.0, 0.0));
}

/// `scheduler.monitor = "val_top<k>"` is held to the metric an epoch logs, whose k is
/// `train.top_k` clipped to the class count: the config alone accepts any k up to top_k, and
/// the class count (known once the data is open) settles which one.
#[test]
fn a_top_k_monitor_is_the_metric_logged_for_the_class_count() {
    let config = |monitor: &str| {
        let mut c = TrainConfig::default();
        c.set("scheduler.kind", "plateau").unwrap();
        c.set("scheduler.monitor", monitor).unwrap();
        c
    };
    // Three classes with train.top_k = 5: the epoch logs val_top3.
    let c = config("val_top3");
    c.validate().unwrap();
    c.validate_for_classes(3).unwrap();
    let err = c.validate_for_classes(10).unwrap_err().to_string();
    assert!(err.contains("scheduler.monitor") && err.contains("logged as val_top5"), "{err}");
    let c = config("val_top5");
    c.validate().unwrap();
    c.validate_for_classes(10).unwrap();
    let err = c.validate_for_classes(3).unwrap_err().to_string();
    assert!(
        err.contains("scheduler.monitor") && err.contains("with 3 classes") && err.contains("val_top3"),
        "{err}"
    );
    let err = config("val_top6").validate().unwrap_err().to_string();
    assert!(err.contains("scheduler.monitor") && err.contains("val_top5"), "{err}");
    config("val_loss").validate_for_classes(2).unwrap();
}

/// A weight decay whose step (lr times it) reaches 1 shrinks every weight past zero each
/// step; it is refused by name, not left to the loop's non-finite error, which would blame the lr.
#[test]
fn an_absurd_weight_decay_is_refused_before_training() {
    for (key, value) in [
        ("optim.weight_decay", "1e300"),
        ("optim.weight_decay", "1000"),
        ("optim.norm_weight_decay", "1e300"),
        ("optim.bias_weight_decay", "5000"),
    ] {
        let mut c = TrainConfig::default();
        c.set(key, value).unwrap();
        let err = c.validate().unwrap_err();
        assert!(
            matches!(&err, RecipeError::InvalidConfig { field, .. } if field == key),
            "{key} = {value}: {err}"
        );
        assert!(err.to_string().contains("shrink every weight past zero"), "{err}");
        assert!(err.to_string().len() < 300, "the value is written short: {err}");
    }
    // torchvision's and timm's recipes: SGD at 0.5 with 2e-5 (and 1e-4), AdamW at 3e-3 with 0.3.
    let mut c = TrainConfig::default();
    for (k, v) in [("optim.optimizer", "sgd"), ("optim.lr", "0.5"), ("optim.weight_decay", "1e-4")] {
        c.set(k, v).unwrap();
    }
    c.validate().unwrap();
    let mut c = TrainConfig::default();
    c.set("optim.lr", "3e-3").unwrap();
    c.set("optim.weight_decay", "0.3").unwrap();
    c.validate().unwrap();
}

/// The EMA's settings without the EMA would be ignored without a word (as torchvision's
/// script ignores `--model-ema-decay` without `--model-ema`); they are refused, naming every key set.
/// `model.freeze_bn_while_frozen` beside `model.freeze_bn` would change nothing (every
/// BatchNorm is frozen for the whole run already): refused, naming both.
#[test]
fn freeze_bn_while_frozen_beside_freeze_bn_is_refused() {
    let mut c = TrainConfig::default();
    c.set("model.freeze_epochs", "2").unwrap();
    c.set("model.freeze_bn_while_frozen", "true").unwrap();
    c.validate().unwrap();
    c.set("model.freeze_bn", "true").unwrap();
    let err = c.validate().unwrap_err();
    assert!(
        matches!(&err, RecipeError::InvalidConfig { field, .. } if field == "model.freeze_bn_while_frozen"),
        "{err}"
    );
    assert!(err.to_string().contains("model.freeze_bn already"), "{err}");
    c.set("model.freeze_bn_while_frozen", "false").unwrap();
    c.validate().unwrap();
}

#[test]
fn ema_settings_without_the_ema_are_refused_naming_the_keys() {
    let mut c = TrainConfig::default();
    c.set("train.model_ema_decay", "0.999").unwrap();
    c.set("train.model_ema_steps", "8").unwrap();
    let err = c.validate().unwrap_err();
    assert!(
        matches!(&err, RecipeError::InvalidConfig { field, .. } if field == "train.model_ema_decay"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("train.model_ema_decay and train.model_ema_steps")
            && text.contains("train.model_ema = true"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    c.set("train.model_ema", "true").unwrap();
    c.validate().unwrap();
}

/// A word-valued key given a number or a boolean says that a string is expected and which
/// ones, from `--set` and from a file (not serde's "unit variant" or TOML's "string or table").
#[test]
fn a_word_key_given_a_number_says_a_string_is_expected() {
    use torchlight_recipes::{AutoAugmentKind, SamplerKind};
    for (key, value, words) in [
        ("data.auto_augment", "1", "`none`, `ta_wide`, `ra`"),
        ("data.sampler", "true", "`random` or `weighted`"),
        ("optim.optimizer", "2", "`adamw`, `adam`, `sgd`"),
        ("train.on_nonfinite", "0", "`stop` or `skip`"),
        ("train.extend_schedule", "1", "`continue` or `restart`"),
    ] {
        let mut c = TrainConfig::default();
        let err = c.set(key, value).unwrap_err().to_string();
        assert!(
            err.contains(key) && err.contains("expected a string") && err.contains(words),
            "{key}: {err}"
        );
        assert!(!err.contains("variant"), "{key}: {err}");
    }
    let err = TrainConfig::from_toml_str("[data]\nauto_augment = 1\n").unwrap_err().to_string();
    assert!(err.contains(":2:") && err.contains("expected a string: `none`, `ta_wide`, `ra`"), "{err}");
    // Words still read, and a wrong word lists the right ones.
    let c =
        TrainConfig::from_toml_str("[data]\nauto_augment = \"ta_wide\"\nsampler = \"weighted\"\n").unwrap();
    assert_eq!((c.data.auto_augment, c.data.sampler), (AutoAugmentKind::TaWide, SamplerKind::Weighted));
    let err = TrainConfig::default().set("data.auto_augment", "autoaugment").unwrap_err().to_string();
    assert!(err.contains("unknown variant `autoaugment`") && err.contains("`augmix`"), "{err}");
}

/// The seed's range is what a config holds, 0 to i64::MAX (TOML's integers), and a larger
/// number is said to be too large, not "a string".
#[test]
fn a_seed_beyond_the_configs_integers_names_the_range() {
    let mut c = TrainConfig::default();
    for value in ["9223372036854775808", "18446744073709551615"] {
        let err = c.set("train.seed", value).unwrap_err().to_string();
        assert!(err.contains("train.seed") && err.contains("at most 9223372036854775807"), "{value}: {err}");
        assert!(!err.contains("string"), "{err}");
    }
    c.set("train.seed", "9223372036854775807").unwrap();
    c.validate().unwrap();
    assert_eq!(TrainConfig::from_toml_str(&c.to_toml()).unwrap().train.seed, i64::MAX as u64);
}

/// A FIFO or a device as the config file is refused before it is opened (which would block,
/// or read forever).
#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_is_not_a_config_file() {
    let dir = crate::temp_dir();
    let fifo = dir.path().join("config.toml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let err = TrainConfig::from_toml_file(&fifo).unwrap_err().to_string();
    assert!(err.contains("config.toml") && err.contains("not a regular file"), "{err}");
    let err = TrainConfig::from_toml_file("/dev/zero").unwrap_err().to_string();
    assert!(err.contains("/dev/zero") && err.contains("not a regular file"), "{err}");
}

/// `data.interpolation = "bicubic"` reaches the evaluation transform (its tensor is ToTensor +
/// Normalize of torchvision's `Resize(16, BICUBIC)` + `CenterCrop(14)` bytes, the vision
/// crate's fixture `make_interpolation.py`, held to 0), the train crop, the saved config and
/// the export metadata; the default leaves all of them bilinear; a bad value names the key.
#[test]
fn interpolation_reaches_the_train_crop_and_the_eval_resize() {
    use tch::{Kind, Tensor};
    use torchlight_recipes::image::{eval_preprocessing, train_transform_for};
    use torchlight_recipes::Interpolation;
    use torchlight_vision::{
        Compose, EvalPreprocessing, Image, InterpolationMode, Normalize, RandomResizedCrop, Sample, ToTensor,
        Transform,
    };
    let crop_mode = |c: &TrainConfig| {
        let t = train_transform_for(&c.data);
        t.transforms()[0]
            .as_any()
            .downcast_ref::<RandomResizedCrop>()
            .expect("the crop comes first")
            .interpolation()
    };
    let mut c = TrainConfig::default();
    assert_eq!((c.data.interpolation, c.data.interpolation()), (None, Interpolation::Bilinear));
    assert_eq!(eval_preprocessing(&c), EvalPreprocessing::classification(224));
    assert_eq!(crop_mode(&c), InterpolationMode::Bilinear);

    c.set("data.interpolation", "bicubic").unwrap();
    c.set("data.image_size", "14").unwrap();
    c.validate().unwrap();
    assert_eq!(crop_mode(&c), InterpolationMode::Bicubic);
    let eval = eval_preprocessing(&c);
    assert_eq!((eval.resize, eval.crop, eval.interpolation), (16, 14, InterpolationMode::Bicubic));
    let metadata: std::collections::HashMap<_, _> = eval.metadata().into_iter().collect();
    assert_eq!(metadata["resize_interpolation"], "bicubic");

    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vision/tests/fixtures/interpolation.safetensors");
    let tensors: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(&fixture).unwrap().into_iter().collect();
    let image = |key: &str| {
        let t = &tensors[key];
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let bytes = Vec::<u8>::try_from(t.to_kind(Kind::Uint8).flatten(0, -1)).unwrap();
        Image::new(shape[1], shape[0], shape[2], bytes)
    };
    let tensor = |t: &dyn Transform, image: Image| {
        t.apply(Sample::Image(image), &mut torchlight_data::rng_from_seed(0)).unwrap().into_tensor().unwrap()
    };
    let input = image("input/chelsea");
    let want = tensor(
        &Compose::default().then(ToTensor).then(Normalize::new(&eval.mean, &eval.std)),
        image("eval|bicubic|16|14|chelsea"),
    );
    assert_eq!(tensor(&eval.transform(), input.clone()), want);
    let bilinear = EvalPreprocessing { interpolation: InterpolationMode::Bilinear, ..eval };
    assert_ne!(tensor(&bilinear.transform(), input), want);

    // Saved with the run and read back.
    let dir = crate::temp_dir();
    let out = dir.path().join("config.toml");
    c.write_toml_file(&out).unwrap();
    assert!(std::fs::read_to_string(&out).unwrap().contains("interpolation = \"bicubic\""));
    assert_eq!(TrainConfig::from_toml_file(&out).unwrap(), c);
    c.set("interpolation", "nearest").unwrap();
    assert_eq!(eval_preprocessing(&c).interpolation, InterpolationMode::Nearest);

    // Bad values name the key, on one line.
    let err = c.set("data.interpolation", "cubic").unwrap_err().to_string();
    assert!(err.contains("data.interpolation") && err.contains("`bilinear`, `bicubic`, `nearest`"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let path = write(dir.path(), "[data]\ninterpolation = \"lanczos\"\n");
    let err = TrainConfig::from_toml_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("train.toml:2:") && err.contains("`data.interpolation`: unknown variant `lanczos`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // The text recipe has no images to resize.
    let err = TrainConfig::from_toml_str(
        "[data]\ninterpolation = \"bicubic\"\n[model]\nname = \"fasttext\"\n[train]\ntask = \"text\"\n",
    )
    .and_then(|c| c.validate())
    .unwrap_err()
    .to_string();
    assert!(err.contains("data.interpolation"), "{err}");
    // A text run saved before the key was optional wrote `interpolation = "bilinear"`: it still validates.
    TrainConfig::from_toml_str(
        "[data]\ninterpolation = \"bilinear\"\n[model]\nname = \"fasttext\"\n[train]\ntask = \"text\"\n",
    )
    .and_then(|c| c.validate())
    .unwrap();
}

/// `train.sync_bn` is a boolean, off by default, of image runs only; a bad value is one line
/// naming the key, from a file or an override.
#[test]
fn train_sync_bn_is_a_boolean_of_image_runs() {
    let mut c = TrainConfig::default();
    assert!(!c.train.sync_bn);
    c.set("sync_bn", "true").unwrap();
    assert!(c.train.sync_bn);
    c.validate().unwrap();
    let err = c.set("train.sync_bn", "yes").unwrap_err();
    assert!(matches!(&err, RecipeError::InvalidOverride { key, .. } if key == "train.sync_bn"), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("train.sync_bn") && !text.contains('\n'), "{text}");
    assert!(c.train.sync_bn, "a refused override changes nothing");

    let dir = crate::temp_dir();
    let text =
        TrainConfig::from_toml_file(write(dir.path(), "[train]\nsync_bn = 2\n")).unwrap_err().to_string();
    assert!(text.contains("train.sync_bn") && text.contains("train.toml") && !text.contains('\n'), "{text}");
    let read = TrainConfig::from_toml_file(write(dir.path(), "[train]\nsync_bn = true\n")).unwrap();
    assert!(read.train.sync_bn);

    // The text models have no BatchNorm: refused rather than ignored.
    c.set("task", "text").unwrap();
    c.model.name = "textcnn".into();
    match c.validate() {
        Err(RecipeError::InvalidConfig { field, .. }) => assert_eq!(field, "train.sync_bn"),
        other => panic!("expected train.sync_bn refused for a text run, got {other:?}"),
    }
}

/// `data.auto_augment`'s policies after torchvision's reference flags: `augmix` (with
/// `data.augmix_severity`), AutoAugment's `imagenet`, `cifar10`, `svhn`, and `ra` with
/// `data.ra_magnitude`; the defaults (9, 3) change nothing; bad values are one-line errors
/// naming the key; AugMix refuses bicubic as torchvision's tensor ops do. (That each policy
/// equals torchvision's output, interpolation included, is `augment.rs`'s test.)
#[test]
fn policy_keys_build_torchvisions_reference_policies() {
    use torchlight_recipes::image::train_transform_for;
    use torchlight_recipes::AutoAugmentKind;
    use torchlight_vision::{AugMix, AutoAugment, AutoAugmentPolicy, RandAugment};
    let c = TrainConfig::default();
    assert_eq!((c.data.ra_magnitude, c.data.augmix_severity), (9, 3));
    let policy = |c: &TrainConfig| train_transform_for(&c.data).transforms()[2].clone();
    for (word, want) in [
        ("imagenet", AutoAugmentPolicy::ImageNet),
        ("cifar10", AutoAugmentPolicy::Cifar10),
        ("svhn", AutoAugmentPolicy::Svhn),
    ] {
        let mut c = TrainConfig::default();
        c.set("data.auto_augment", word).unwrap();
        c.validate().unwrap();
        let t = policy(&c);
        assert_eq!(t.as_any().downcast_ref::<AutoAugment>().expect(word).policy(), want);
    }
    let mut c = TrainConfig::default();
    c.set("auto_augment", "augmix").unwrap();
    c.set("augmix_severity", "7").unwrap();
    c.validate().unwrap();
    assert_eq!(c.data.auto_augment, AutoAugmentKind::Augmix);
    let want = AugMix::new(7).unwrap().with_interpolation(torchlight_vision::InterpolationMode::Bilinear);
    assert_eq!(policy(&c).as_any().downcast_ref::<AugMix>(), Some(&want));
    let mut c = TrainConfig::default();
    c.set("data.auto_augment", "ra").unwrap();
    c.set("data.ra_magnitude", "15").unwrap();
    c.validate().unwrap();
    let want = RandAugment::new(2, 15, 31).with_interpolation(torchlight_vision::InterpolationMode::Bilinear);
    assert_eq!(policy(&c).as_any().downcast_ref::<RandAugment>(), Some(&want));
    // Saved with the run and read back.
    let dir = crate::temp_dir();
    let out = dir.path().join("config.toml");
    c.write_toml_file(&out).unwrap();
    assert_eq!(TrainConfig::from_toml_file(&out).unwrap(), c);

    // Bad values name the key, on one line.
    for (key, value) in
        [("data.ra_magnitude", "31"), ("data.augmix_severity", "0"), ("data.augmix_severity", "11")]
    {
        assert_eq!(invalid_field(key, value), key);
        let mut c = TrainConfig::default();
        c.set(key, value).unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(key) && err.contains(value), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let err = TrainConfig::default().set("data.ra_magnitude", "-1").unwrap_err().to_string();
    assert!(err.contains("data.ra_magnitude"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let mut c = TrainConfig::default();
    c.set("data.auto_augment", "augmix").unwrap();
    c.set("data.interpolation", "bicubic").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("data.interpolation") && err.contains("augmix") && err.contains("bilinear"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    c.set("data.auto_augment", "svhn").unwrap();
    c.validate().unwrap();
    // The text recipe has no images to augment.
    let err = TrainConfig::from_toml_str(
        "[data]\nra_magnitude = 12\n[model]\nname = \"fasttext\"\n[train]\ntask = \"text\"\n",
    )
    .and_then(|c| c.validate())
    .unwrap_err()
    .to_string();
    assert!(err.contains("data.ra_magnitude"), "{err}");
}
