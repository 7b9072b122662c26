//! `MixupCutMix` against torchvision 0.26's v2 `MixUp`, `CutMix`, `RandomChoice` and
//! `RandomApply` (`tests/fixtures/make_mixup.py`), and soft-target cross-entropy against
//! PyTorch's `cross_entropy` with probability targets.
//!
//! Tolerance: none for the batches (the same draws from the same generator and the same
//! float32 ops in the same order give the same bits); 1e-6 relative for the losses and
//! gradients (libtorch's own kernel on both sides; measured equal).

use std::collections::HashMap;
use tch::{Kind, Tensor};
use torchlight_train::{
    BatchContext, BatchTransform, Classification, Mixed, MixupCutMix, Stage, Task, TrainError,
};

fn fixture() -> std::path::PathBuf {
    torchlight_testing::generated_fixture("crates/train/tests/fixtures/make_mixup.py", &[])
        .expect("the reference PyTorch makes the Mixup fixture")
}

fn load(path: &std::path::Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

fn transform_of(case: &serde_json::Value) -> MixupCutMix {
    let f = |k: &str| case[k].as_f64().unwrap();
    MixupCutMix::new(case["c"].as_u64().unwrap() as usize, f("mixup"), f("cutmix"))
        .unwrap()
        .with_prob(f("prob"))
        .unwrap()
        .with_switch_prob(f("switch"))
        .unwrap()
        .with_label_smoothing(f("smoothing"))
        .unwrap()
}

#[test]
fn seeded_batches_equal_torchvision_v2_bit_for_bit() {
    let _lock = crate::torch_rng_lock();
    let dir = fixture();
    let t = load(&dir.join("mixup.safetensors"));
    let cases: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let (mut mixups, mut cutmixes, mut unmixed) = (0, 0, 0);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let mix = transform_of(case);
        let (images, labels) = (&t[&format!("{name}.images")], &t[&format!("{name}.labels")]);
        let seed = case["seed"].as_u64().unwrap();
        let (mixed, targets, choice) =
            torchlight_tensor::with_torch_seed(seed, || mix.mix(images, labels, 0)).unwrap().unwrap();
        match choice {
            Mixed::None => unmixed += 1,
            Mixed::Mixup(_) => mixups += 1,
            Mixed::CutMix(..) => cutmixes += 1,
        }
        assert!(
            mixed.equal(&t[&format!("{name}.mixed")]),
            "{name}: images differ from torchvision's ({choice:?})"
        );
        assert!(
            targets.equal(&t[&format!("{name}.targets")]),
            "{name}: targets differ from torchvision's ({choice:?}):\n{targets}\n{}",
            t[&format!("{name}.targets")]
        );
        assert_eq!(targets.kind(), Kind::Float);
        assert_eq!(targets.size(), [case["n"].as_i64().unwrap(), case["c"].as_i64().unwrap()]);
    }
    // The fixture reaches every branch (the choice's both arms and RandomApply's "no").
    assert!(
        mixups >= 5 && cutmixes >= 5 && unmixed >= 3,
        "{mixups} mixup, {cutmixes} cutmix, {unmixed} none"
    );
}

/// Through the Trainer's door: `apply` draws from the batch's seeded generator, leaves torch's
/// generator as it was, and past `mixup_off_epoch` mixes nothing but still gives soft targets.
#[test]
fn the_batch_transform_draws_from_the_batch_seed_and_stops_at_the_off_epoch() {
    let _lock = crate::torch_rng_lock();
    let images = Tensor::randn([6, 3, 8, 8], (Kind::Float, tch::Device::Cpu));
    let labels = Tensor::from_slice(&[0i64, 1, 2, 3, 0, 1]);
    let mut mix = MixupCutMix::new(4, 0.8, 1.0).unwrap().with_off_epoch(2);
    let mut ctx = BatchContext::new(11, 0, 1, 3);
    let seed = ctx.seed();
    tch::manual_seed(5);
    let (x, y) = mix.apply((images.shallow_clone(), labels.shallow_clone()), &mut ctx).unwrap();
    let after = Tensor::rand([1], (Kind::Float, tch::Device::Cpu));
    tch::manual_seed(5);
    let untouched = Tensor::rand([1], (Kind::Float, tch::Device::Cpu));
    assert!(after.equal(&untouched), "torch's generator is as if nothing had drawn");
    let (ex, ey, _) =
        torchlight_tensor::with_torch_seed(seed, || mix.mix(&images, &labels, 1)).unwrap().unwrap();
    assert!(x.equal(&ex) && y.equal(&ey), "apply = mix under the batch's seed");
    assert!(!x.equal(&images), "epoch 1 mixes");
    let (x2, y2) = mix
        .apply((images.shallow_clone(), labels.shallow_clone()), &mut BatchContext::new(11, 0, 2, 3))
        .unwrap();
    assert!(x2.equal(&images), "epoch 2 is past mixup_off_epoch");
    assert!(y2.equal(&labels.one_hot(4).to_kind(Kind::Float)));
}

#[test]
fn bad_settings_and_batches_are_named() {
    let e = MixupCutMix::new(10, 0.0, 0.0).unwrap_err().to_string();
    assert!(e.contains("one of them must be positive"), "{e}");
    let e = MixupCutMix::new(10, -1.0, 0.0).unwrap_err().to_string();
    assert!(e.contains("mixup_alpha"), "{e}");
    let e = MixupCutMix::mixup(10, 0.2).unwrap().with_prob(1.5).unwrap_err().to_string();
    assert!(e.contains("mixup_prob"), "{e}");
    let e = MixupCutMix::new(10, 0.2, 1.0).unwrap().with_switch_prob(-0.1).unwrap_err().to_string();
    assert!(e.contains("mixup_switch_prob"), "{e}");
    let mix = MixupCutMix::mixup(3, 0.2).unwrap();
    let x = Tensor::zeros([2, 1, 4, 4], (Kind::Float, tch::Device::Cpu));
    let err = mix.mix(&x, &Tensor::from_slice(&[0i64, 3]), 0).unwrap_err();
    assert!(matches!(err, TrainError::Task { .. }) && err.to_string().contains("[0, 3)"), "{err}");
    let err = mix.mix(&x, &Tensor::from_slice(&[0i64, 1, 2]), 0).unwrap_err().to_string();
    assert!(err.contains("labels must be class indices [2]"), "{err}");
    let err = mix.mix(&x.view([2, 16]), &Tensor::from_slice(&[0i64, 1]), 0).unwrap_err().to_string();
    assert!(err.contains("[N, C, H, W]"), "{err}");
    let err = mix.mix(&x.to_kind(Kind::Uint8), &Tensor::from_slice(&[0i64, 1]), 0).unwrap_err().to_string();
    assert!(err.contains("floating-point"), "{err}");
}

fn close(what: &str, a: &Tensor, b: &Tensor) {
    let diff = (a - b).abs().max().double_value(&[]);
    let scale = b.abs().max().double_value(&[]).max(1e-12);
    assert!(diff <= 1e-6 * scale, "{what}: max difference {diff} (scale {scale})");
}

/// The classification task on soft targets: PyTorch's `cross_entropy` with probability
/// targets (plain, label smoothing, class weights), its gradient, and accuracy against each
/// sample's largest class.
#[test]
fn soft_target_cross_entropy_equals_pytorch() {
    let t = load(&fixture().join("soft_ce.safetensors"));
    let (logits, soft, weight) = (&t["logits"], &t["soft"], &t["weight"]);
    let cases: [(&str, torchlight_nn::CrossEntropyLoss); 4] = [
        ("plain", torchlight_nn::CrossEntropyLoss::new()),
        ("smooth", torchlight_nn::CrossEntropyLoss::new().with_label_smoothing(0.1)),
        ("weighted", torchlight_nn::CrossEntropyLoss::new().with_weight(weight.shallow_clone())),
        ("sum", torchlight_nn::CrossEntropyLoss::new().with_reduction(torchlight_nn::Reduction::Sum)),
    ];
    for (name, loss) in cases {
        let x = logits.detach().set_requires_grad(true);
        let l = loss.forward(&x, soft).unwrap();
        l.backward();
        close(&format!("{name} loss"), &l.reshape([1]), &t[&format!("{name}.loss")]);
        close(&format!("{name} grad"), &x.grad(), &t[&format!("{name}.grad")]);
    }
    // Through the task: the loss is the soft one, the metrics' target the largest class.
    let model = torchlight_nn::Identity;
    let out = Classification::new(5)
        .step(&model, &(logits.shallow_clone(), soft.shallow_clone()), Stage::Train)
        .unwrap();
    close("task loss", &out.loss.reshape([1]), &t["plain.loss"]);
    assert!(out.target.equal(&soft.argmax(1, false)));
    assert_eq!(out.target.kind(), Kind::Int64);
}

/// `Classification::with_bce` (timm's `--bce-loss`, `--bce-target-thresh`) against
/// `tests/fixtures/make_bce.py`: the loss and the logits' gradient for class indices with and
/// without smoothing, probability targets (Mixup's), each with and without the threshold;
/// validation is plain cross-entropy on the labels whatever the training loss. Tolerance 1e-6
/// relative, as above (libtorch's own kernel on both sides).
#[test]
fn bce_training_loss_equals_timms_and_validation_is_plain_cross_entropy() {
    let t = load(
        &torchlight_testing::generated_fixture("crates/train/tests/fixtures/make_bce.py", &[])
            .expect("the reference PyTorch makes the BCE fixture")
            .join("bce.safetensors"),
    );
    let (logits, labels, soft) = (&t["logits"], &t["labels"], &t["soft"]);
    let model = torchlight_nn::Identity;
    let cases = [
        ("hard", 0.0, None, labels),
        ("smooth", 0.1, None, labels),
        ("smooth_thresh", 0.1, Some(0.2), labels),
        ("soft", 0.0, None, soft),
        ("soft_thresh", 0.0, Some(0.2), soft),
    ];
    for (name, smoothing, thresh, targets) in cases {
        let task = Classification::new(5).with_label_smoothing(smoothing).with_bce(thresh);
        let x = logits.detach().set_requires_grad(true);
        let out = task.step(&model, &(x.shallow_clone(), targets.shallow_clone()), Stage::Train).unwrap();
        out.loss.backward();
        close(&format!("{name} loss"), &out.loss.reshape([1]), &t[&format!("{name}.loss")]);
        close(&format!("{name} grad"), &x.grad(), &t[&format!("{name}.grad")]);
        // Validation: plain cross-entropy on the hard labels, smoothing and BCE aside.
        let val =
            task.step(&model, &(logits.shallow_clone(), labels.shallow_clone()), Stage::Validate).unwrap();
        close(&format!("{name} val loss"), &val.loss.reshape([1]), &t["eval_ce.loss"]);
    }
    // A smoothed cross-entropy task also validates with the plain loss.
    let task = Classification::new(5).with_label_smoothing(0.1);
    let train = task.step(&model, &(logits.shallow_clone(), labels.shallow_clone()), Stage::Train).unwrap();
    let val = task.step(&model, &(logits.shallow_clone(), labels.shallow_clone()), Stage::Test).unwrap();
    close("test loss", &val.loss.reshape([1]), &t["eval_ce.loss"]);
    assert!(
        (train.loss.double_value(&[]) - val.loss.double_value(&[])).abs() > 1e-3,
        "training keeps its smoothing"
    );
    // Labels outside the classes are named, not a panic inside scatter.
    let bad = Tensor::from_slice(&[0i64, 5, 1, 1, 1, 1]);
    let err =
        Classification::new(5).with_bce(None).step(&model, &(logits.shallow_clone(), bad), Stage::Train);
    assert!(err.unwrap_err().to_string().contains("[0, 5)"));
}
