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
    let truth = ctx.take_metric_target().expect("the labels before mixing are handed on");
    assert!(truth.equal(&labels), "the metrics count against the labels before mixing");
    // Probability labels hand on their largest class.
    let mut ctx = BatchContext::new(11, 0, 1, 4);
    let soft = labels.one_hot(4).to_kind(Kind::Float) * 0.7 + 0.075;
    let _ = mix.apply((images.shallow_clone(), soft), &mut ctx).unwrap();
    assert!(ctx.take_metric_target().unwrap().equal(&labels));
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

/// `Classification::with_bce` (timm's `--bce-loss`, `--bce-target-thresh`) against timm
/// 1.0.31's `BinaryCrossEntropy` (`tests/fixtures/make_bce.py`): the loss and the logits'
/// gradient for class indices with and without smoothing, probability targets (Mixup's), each
/// with and without the threshold, and with class weights (timm's `weight=`); validation is
/// plain cross-entropy on the labels whatever the training loss. Tolerance 1e-6 relative, as
/// above (libtorch's own kernel on both sides).
#[test]
fn bce_training_loss_equals_timms_and_validation_is_plain_cross_entropy() {
    let t = load(
        &torchlight_testing::generated_fixture("crates/train/tests/fixtures/make_bce.py", &[])
            .expect("the reference PyTorch makes the BCE fixture")
            .join("bce.safetensors"),
    );
    let (logits, labels, soft, weight) = (&t["logits"], &t["labels"], &t["soft"], &t["weight"]);
    let model = torchlight_nn::Identity;
    let cases = [
        ("hard", 0.0, None, labels, false),
        ("smooth", 0.1, None, labels, false),
        ("smooth_thresh", 0.1, Some(0.2), labels, false),
        ("soft", 0.0, None, soft, false),
        ("soft_thresh", 0.0, Some(0.2), soft, false),
        ("smooth_weighted", 0.1, None, labels, true),
        ("soft_thresh_weighted", 0.0, Some(0.2), soft, true),
    ];
    for (name, smoothing, thresh, targets, weighted) in cases {
        let mut task = Classification::new(5).with_label_smoothing(smoothing).with_bce(thresh);
        if weighted {
            task = task.with_class_weights(weight.shallow_clone());
        }
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
    let err = Classification::new(5)
        .with_bce(None)
        .with_class_weights(Tensor::ones([4], (Kind::Float, tch::Device::Cpu)))
        .step(&model, &(logits.shallow_clone(), labels.shallow_clone()), Stage::Train);
    assert!(err.unwrap_err().to_string().contains("need one per class"));
}

/// With Mixup on, the Trainer's training accuracy counts each prediction against the sample's
/// label before mixing (what `BatchContext::set_metric_target` hands on), not against the
/// mixed target's largest class: a run whose weights do not move (lr 0, a linear model without
/// dropout) reports exactly the accuracy computed by hand from the mixed batches it trained on,
/// well apart from the accuracy against the mixed targets' largest classes.
#[test]
fn training_accuracy_under_mixup_counts_against_the_true_labels() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let _lock = crate::torch_rng_lock();
    torchlight_tensor::seed_everything(3);
    let mut model = torchlight_nn::Linear::new(4, 3, true);
    // The blobs of class c sit near [c, -c, c / 2, 1]: logits 2 k x0 - k^2 (the negative
    // squared distance of x0 to k, up to x0^2) pick the class nearest a mixed image, which
    // tends to be its mixed target's largest class.
    tch::no_grad(|| {
        let w = Tensor::from_slice(&[0f32, 0., 0., 0., 2., 0., 0., -1., 4., 0., 0., -4.]).view([3, 4]);
        model.weight.shallow_clone().copy_(&w);
        let _ = model.bias.as_ref().unwrap().shallow_clone().zero_();
    });
    let mut optimizer = crate::trainer::adamw(&model, 0.0);
    // (mixed features, labels before mixing, soft targets) of every training batch.
    type Seen = Vec<(Tensor, Tensor, Tensor)>;
    let seen: Rc<RefCell<Seen>> = Rc::default();
    let record = seen.clone();
    let mut mix = MixupCutMix::mixup(3, 1.0).unwrap();
    let transform = move |(x, y): (Tensor, Tensor), ctx: &mut BatchContext| -> torchlight_train::Result<_> {
        let n = x.size()[0];
        let (mixed, soft) = mix.apply((x.view([n, 1, 2, 2]), y.shallow_clone()), ctx)?;
        let mixed = mixed.view([n, 4]);
        record.borrow_mut().push((mixed.copy(), y, soft.copy()));
        Ok((mixed, soft))
    };
    let mut trainer = torchlight_train::Trainer::builder()
        .epochs(1)
        .seed(3)
        .progress(torchlight_train::Progress::quiet())
        .batch_transform(transform)
        .build()
        .unwrap();
    let mut train = crate::trainer::blob_loader(40, true, 0);
    let summary = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap();
    let reported = summary.history[0].get("train_acc").unwrap();

    let (mut true_hits, mut mixed_hits, mut differ, mut n) = (0i64, 0i64, 0i64, 0i64);
    let _g = torchlight_tensor::no_grad();
    for (x, y, soft) in seen.borrow().iter() {
        let pred = tch::nn::ModuleT::forward_t(&model, x, true).argmax(1, false);
        let largest = soft.argmax(1, false);
        true_hits += pred.eq_tensor(y).sum(Kind::Int64).int64_value(&[]);
        mixed_hits += pred.eq_tensor(&largest).sum(Kind::Int64).int64_value(&[]);
        differ += largest.ne_tensor(y).sum(Kind::Int64).int64_value(&[]);
        n += y.size()[0];
    }
    assert_eq!(n, 40, "one epoch of 40 samples");
    assert!(differ >= 5, "{differ} samples whose mixed target's largest class is not their label");
    let (want, old) = (true_hits as f64 / n as f64, mixed_hits as f64 / n as f64);
    assert!((want - old).abs() >= 0.1, "the two counts must differ to tell them apart: {want} vs {old}");
    assert!(
        (reported - want).abs() < 1e-12,
        "train_acc {reported}, against the true labels {want} (against the mixed targets {old})"
    );
}

/// Mixup/CutMix under the CPU's automatic mixed precision (`StepConfig::amp` on the CPU:
/// bfloat16 autocast, no GradScaler) through the StepRunner: the forward runs in bfloat16, every
/// loss is finite, both mixes occur, and a tiny conv net's loss falls (the mean of the last 5
/// of 40 steps below 0.7 of the first 5's; measured about 0.3 of it).
#[test]
fn mixup_and_cutmix_train_under_cpu_autocast() {
    use tch::Device;
    use torchlight_nn::{
        AdaptiveAvgPool2d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Flatten, Linear, ReLU,
        Sequential,
    };
    use torchlight_train::{StepConfig, StepRunner};
    let _lock = crate::torch_rng_lock();
    torchlight_tensor::seed_everything(5);
    let model = Sequential::new()
        .add(Conv2d::new(3, 8, 3, Conv2dConfig::default().with_padding(1)))
        .add(BatchNorm2d::new(8, BatchNormConfig::default()))
        .add(ReLU)
        .add(AdaptiveAvgPool2d { output_size: [1, 1] })
        .add(Flatten::default())
        .add(Linear::new(8, 4, true));
    // Four classes: class c < 3 lights channel c, class 3 darkens every channel.
    let labels = Tensor::arange(32, (Kind::Int64, Device::Cpu)).remainder(4);
    let pattern =
        Tensor::from_slice(&[1f32, 0., 0., 0., 1., 0., 0., 0., 1., -1., -1., -1.]).view([4, 3, 1, 1]);
    let images =
        Tensor::randn([32, 3, 8, 8], (Kind::Float, Device::Cpu)) * 0.5 + pattern.index_select(0, &labels);
    let task = Classification::new(4);
    let mix = MixupCutMix::new(4, 0.2, 1.0).unwrap().with_label_smoothing(0.1).unwrap();
    let mut optimizer = crate::trainer::adamw(&model, 2e-2);
    let mut runner = StepRunner::new(StepConfig { amp: true, ..StepConfig::default() }, Device::Cpu).unwrap();
    assert!(!runner.scaler().is_enabled(), "bfloat16 needs no GradScaler");
    {
        let _amp = runner.autocast().unwrap();
        let out = tch::nn::ModuleT::forward_t(&model, &images, false);
        assert_eq!(out.kind(), Kind::BFloat16, "the forward runs under bfloat16 autocast");
    }
    let (mut losses, mut mixups, mut cutmixes) = (Vec::new(), 0, 0);
    for step in 0..40u64 {
        let ctx = BatchContext::new(5, 0, 0, step);
        let (x, y, choice) = ctx.with_torch_generator(|| mix.mix(&images, &labels, 0)).unwrap().unwrap();
        match choice {
            Mixed::Mixup(_) => mixups += 1,
            Mixed::CutMix(..) => cutmixes += 1,
            Mixed::None => {}
        }
        let (loss, _) = runner.step(&model, &task, &(x, y), &mut optimizer, step == 39).unwrap();
        assert_eq!(loss.kind(), Kind::Float, "the task's loss is float32");
        let loss = loss.double_value(&[]);
        assert!(loss.is_finite(), "step {step}: loss {loss}");
        losses.push(loss);
    }
    assert!(mixups >= 5 && cutmixes >= 5, "{mixups} mixup, {cutmixes} cutmix batches");
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&losses[..5]), mean(&losses[35..]));
    assert!(last < 0.7 * first, "the loss fell from {first} to {last}: {losses:?}");
}

/// A batch transform's metric target of another length than its batch is named, not left to
/// a metric's shape error.
#[test]
fn a_metric_target_of_the_wrong_length_is_named() {
    let _lock = crate::torch_rng_lock();
    torchlight_tensor::seed_everything(3);
    let mut model = torchlight_nn::Linear::new(4, 3, true);
    let mut optimizer = crate::trainer::adamw(&model, 0.0);
    let transform = |(x, y): (Tensor, Tensor), ctx: &mut BatchContext| -> torchlight_train::Result<_> {
        ctx.set_metric_target(y.narrow(0, 0, 3));
        Ok((x, y))
    };
    let mut trainer = torchlight_train::Trainer::builder()
        .epochs(1)
        .seed(3)
        .progress(torchlight_train::Progress::quiet())
        .batch_transform(transform)
        .build()
        .unwrap();
    let mut train = crate::trainer::blob_loader(16, false, 0);
    let err = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("set_metric_target") && msg.contains("[3]") && msg.contains("batch of 8"), "{msg}");
}
