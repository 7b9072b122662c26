//! The training guards of the `StepRunner` (here in a hand-written loop): a non-finite gradient
//! stops training with an error naming step, lr, inputs and parameter, or (under
//! `train.on_nonfinite = "skip"`) skips that step, with the same error and weights when the
//! verdict is read a step late (`GuardRead::Deferred`, CUDA's default); a model on another
//! device than the batches is one clear error from the Trainer.

use crate::{temp_dir, torch_rng_lock};
use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tch::Device;
use torchlight_data::Subset;
use torchlight_nn::{resnet18, ResNet};
use torchlight_recipes::image::*;
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_recipes::*;
use torchlight_tensor::seed::Rng;
use torchlight_tensor::seed_everything;
use torchlight_train::*;
use torchlight_vision::{CenterCrop, Compose, ImageFolder, Resize, Sample, ToTensor, Transform};

/// Puts a NaN into the first pixel of the `nth` sample it sees (every sample when `None`).
#[derive(Debug)]
struct NanPixel {
    nth: Option<usize>,
    seen: AtomicUsize,
}

impl Transform for NanPixel {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> torchlight_vision::Result<Sample> {
        let i = self.seen.fetch_add(1, Ordering::SeqCst);
        Ok(match input {
            Sample::Tensor(mut t) if self.nth.is_none_or(|n| n == i) => {
                t.data[0] = f32::NAN;
                Sample::Tensor(t)
            }
            other => other,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn setup(root: &Path, nth: Option<usize>, action: NonFiniteAction) -> (TrainConfig, Loader) {
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross, Shape::Bar],
        per_class: [8, 0, 0],
        size_range: (36, 40),
        seed: 3,
    };
    write_image_folder(root, &spec).unwrap();
    let mut c = TrainConfig::default();
    c.data.root = root.to_path_buf();
    c.data.image_size = Some(32);
    c.data.workers = 0;
    c.train.batch_size = 8;
    c.train.device = "cpu".into();
    c.train.on_nonfinite = action;
    let t = Compose::default()
        .then(Resize::new(32))
        .then(CenterCrop::new(32))
        .then(ToTensor)
        .then(NanPixel { nth, seen: AtomicUsize::new(0) });
    let folder = ImageFolder::new(root.join("train")).unwrap().with_transform(t);
    let split = Subset::new(Arc::new(folder), (0..24).collect()).unwrap();
    let l = loader(split, &c, true, Device::Cpu).unwrap();
    (c, l)
}

/// Skipped steps, steps, samples counted in the metrics, their mean loss.
type Counts = (u64, u64, u64, f64);

/// One epoch of a hand-written loop on the StepRunner: (skipped steps, steps, samples counted
/// in the metrics, their mean loss).
fn one_epoch(c: &TrainConfig, l: &mut Loader, model: &ResNet) -> std::result::Result<Counts, RecipeError> {
    one_epoch_reading(c, l, model, GuardRead::Auto).map_err(|(_, e)| *e)
}

/// [`one_epoch`] with the guard's verdict read as `read` says; an error comes with the index
/// of the batch whose step returned it.
fn one_epoch_reading(
    c: &TrainConfig,
    l: &mut Loader,
    model: &ResNet,
    read: GuardRead,
) -> std::result::Result<Counts, (usize, Box<RecipeError>)> {
    let mut at = 0;
    one_epoch_at(c, l, model, read, &mut at).map_err(|e| (at, Box::new(e)))
}

fn one_epoch_at(
    c: &TrainConfig,
    l: &mut Loader,
    model: &ResNet,
    read: GuardRead,
    at: &mut usize,
) -> std::result::Result<Counts, RecipeError> {
    let mut optimizer = build_optimizer(c, model, "fc.")?;
    let step = StepConfig { on_nonfinite: c.train.on_nonfinite, guard_read: read, ..StepConfig::default() };
    let mut runner = StepRunner::new(step, Device::Cpu)?;
    let task = Classification::new(3);
    let mut metrics = MetricSet::new(Vec::new());
    let n = l.len();
    for (i, batch) in l.epoch(0).enumerate() {
        *at = i;
        let (_, ready) = runner.step(model, &task, &batch?, optimizer.as_mut(), i + 1 == n)?;
        for out in ready {
            metrics.update(&out.loss, &out.output, &out.target)?;
        }
    }
    Ok((runner.skipped_steps(), runner.global_step(), metrics.samples(), metrics.running_loss()))
}

#[test]
fn a_nan_input_stops_training_naming_step_lr_inputs_and_parameter() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (c, mut l) = setup(tmp.path(), None, NonFiniteAction::Stop);
    seed_everything(0);
    let model = resnet18(3);
    let before = model.fc.weight.copy();
    let (at, err) = one_epoch_reading(&c, &mut l, &model, GuardRead::Auto).unwrap_err();
    assert_eq!(at, 0, "on the CPU the verdict is read before the bad step's update");
    match err.as_ref() {
        RecipeError::Train(e) if matches!(**e, TrainError::NonFinite { .. }) => {
            let TrainError::NonFinite { epoch, step, lr, inputs_finite, parameter, .. } = e.as_ref() else {
                unreachable!()
            };
            assert_eq!((*epoch, *step, *lr, *inputs_finite), (1, 1, 1e-3, false));
            assert_eq!(parameter.as_deref(), Some("conv1.weight"), "the first key in state_dict order");
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("epoch 1, step 1: non-finite gradient in `conv1.weight` (layer `conv1`)"),
        "{text}"
    );
    assert!(text.contains("lr 1.000e-3, batch inputs NOT finite; the batch holds NaN/Inf inputs"), "{text}");
    assert!(model.fc.weight.equal(&before), "the bad step was not applied");

    // Deferred: the bad step goes to the fused kernels with found_inf set; the next step
    // reads the flag and stops with the same error.
    let (at, deferred) = one_epoch_reading(&c, &mut l, &model, GuardRead::Deferred).unwrap_err();
    assert_eq!(at, 1, "the deferred read stops at the step after the bad one");
    assert_eq!(deferred.to_string(), text, "the same message as the immediate read");
    assert!(model.fc.weight.equal(&before), "the kernel skipped the bad update on the device");
    assert!(!model.conv1.first_conv().weight.grad().defined(), "the gradients were cleared");
}

#[test]
fn skip_drops_only_the_bad_step_and_training_goes_on() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    // The 5th sample loaded lies in the first of three batches.
    let (c, mut l) = setup(tmp.path(), Some(4), NonFiniteAction::Skip);
    seed_everything(0);
    let model = resnet18(3);
    let before = model.fc.weight.copy();
    let (skipped, steps, counted, loss) = one_epoch(&c, &mut l, &model).unwrap();
    assert_eq!((skipped, steps), (1, 3));
    assert!(loss.is_finite(), "the skipped batch's NaN loss is not counted: {loss}");
    assert_eq!(counted, 16, "two good batches counted");
    assert!(!model.fc.weight.equal(&before), "the good steps trained");
    assert!(bool::try_from(model.fc.weight.isfinite().all()).unwrap());
}

#[test]
fn the_deferred_read_skips_the_same_step_with_the_same_weights_as_the_immediate_read() {
    let _lock = torch_rng_lock();
    let mut results = Vec::new();
    for read in [GuardRead::Immediate, GuardRead::Deferred] {
        // A fresh loader each time: the NaN goes into the 5th sample loaded (first batch).
        let tmp = temp_dir();
        let (c, mut l) = setup(tmp.path(), Some(4), NonFiniteAction::Skip);
        seed_everything(0);
        let model = resnet18(3);
        let counts = one_epoch_reading(&c, &mut l, &model, read).unwrap();
        let weights: Vec<(String, tch::Tensor)> = torchlight_nn::named_parameters(&model)
            .into_iter()
            .map(|(n, p)| (n, p.detach().copy()))
            .collect();
        results.push((counts, weights));
    }
    let ((immediate, w0), (deferred, w1)) = (&results[0], &results[1]);
    assert_eq!((immediate.0, immediate.1, immediate.2), (1, 3, 16), "one of three steps skipped");
    assert_eq!(deferred, immediate, "skips, steps, samples counted and their mean loss");
    for ((name, a), (_, b)) in w0.iter().zip(w1) {
        assert!(a.equal(b), "{name} differs between the immediate and the deferred read");
    }
}

#[test]
fn the_default_is_stop_and_the_key_is_settable() {
    let mut c = TrainConfig::default();
    assert_eq!(c.train.on_nonfinite, NonFiniteAction::Stop);
    c.set("train.on_nonfinite", "skip").unwrap();
    assert_eq!(c.train.on_nonfinite, NonFiniteAction::Skip);
    assert!(c.to_toml().contains("on_nonfinite = \"skip\""));
    assert!(matches!(c.set("on_nonfinite", "ignore"), Err(RecipeError::InvalidOverride { .. })));
}

#[test]
fn a_model_on_another_device_is_one_error_naming_both() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (c, mut l) = setup(tmp.path(), Some(usize::MAX), NonFiniteAction::Stop);
    let mut model = resnet18(3);
    let err = guard::check_device(&model, Device::Cuda(0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the model is on cpu but the batch is on cuda:0: move both to one device (train.device)"
    );
    // The Trainer checks before any work.
    let mut optimizer = build_optimizer(&c, &model, "fc.").unwrap();
    let mut trainer = Trainer::builder()
        .device(Device::Cuda(0))
        .progress(Progress::quiet())
        .graceful_shutdown(false)
        .build()
        .unwrap();
    let err = trainer.fit(&mut model, &Classification::new(3), optimizer.as_mut(), &mut l, None).unwrap_err();
    assert!(matches!(err, TrainError::DeviceMismatch { .. }), "{err}");
    let (skipped, ..) = one_epoch(&c, &mut l, &model).unwrap();
    assert_eq!(skipped, 0);
}
