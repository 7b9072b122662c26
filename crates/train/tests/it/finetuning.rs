//! `BackboneFinetuning::with_frozen_batch_norm` (Lightning's `freeze(train_bn=False)`, the
//! recipes' `model.freeze_bn_while_frozen`) on a tiny conv net with a BatchNorm in its backbone
//! and one in its head: while the backbone is frozen its BatchNorm's running statistics stay
//! bit for bit at every step, in a run resumed mid-epoch inside the frozen epochs too, while the
//! head's move; once the backbone thaws its statistics move as well. Without the setting they
//! adapt while frozen (Lightning's default, `train_bn=True`).

use crate::trainer::{adamw, assert_same_weights, weights, StopAt};
use crate::{temp_dir, torch_rng_lock};
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{
    state_dict, AdaptiveAvgPool2d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Flatten, Module, ReLU,
    Sequential,
};
use torchlight_tensor::seed_everything;
use torchlight_train::*;

/// `backbone` (conv, BatchNorm, ReLU) and `head` (1x1 conv, BatchNorm, global pool, flatten)
/// over `[N, 1, 4, 4]` images and 3 classes.
fn tiny_net() -> Sequential {
    let backbone = Sequential::new()
        .add(Conv2d::new(1, 4, 3, Conv2dConfig::default().with_padding(1)))
        .add(BatchNorm2d::new(4, BatchNormConfig::default()))
        .add(ReLU);
    let head = Sequential::new()
        .add(Conv2d::new(4, 3, 1, Conv2dConfig::default()))
        .add(BatchNorm2d::new(3, BatchNormConfig::default()))
        .add(AdaptiveAvgPool2d { output_size: [1, 1] })
        .add(Flatten::default());
    Sequential::new().add_named("backbone", backbone).add_named("head", head)
}

/// The BatchNorms' buffers: running mean and variance and `num_batches_tracked`.
fn statistics(model: &dyn Module) -> Vec<(String, Tensor)> {
    state_dict(model)
        .into_iter()
        .filter(|(k, _)| k.contains(".running_") || k.ends_with(".num_batches_tracked"))
        .map(|(k, t)| (k, t.copy()))
        .collect()
}

fn stat<'a>(stats: &'a [(String, Tensor)], key: &str) -> &'a Tensor {
    &stats.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key}")).1
}

/// Batches of `(images [6, 1, 4, 4], labels [6])` held in memory.
struct Images(Vec<(Tensor, Tensor)>);

struct ImageIter<'a>(std::slice::Iter<'a, (Tensor, Tensor)>);

impl Iterator for ImageIter<'_> {
    type Item = Result<(Tensor, Tensor)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(x, y)| Ok((x.shallow_clone(), y.shallow_clone())))
    }
}

impl EpochBatches<(Tensor, Tensor)> for ImageIter<'_> {
    fn stall(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl BatchSource<(Tensor, Tensor)> for Images {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn batches(&mut self, _: u64, first: usize) -> Box<dyn EpochBatches<(Tensor, Tensor)> + '_> {
        Box::new(ImageIter(self.0[first.min(self.0.len())..].iter()))
    }
}

/// `n` batches whose class shifts the images' mean.
fn images(n: usize) -> Images {
    Images(
        (0..n)
            .map(|_| {
                let y = Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2]);
                let x = Tensor::randn([6, 1, 4, 4], (Kind::Float, Device::Cpu))
                    + y.to_kind(Kind::Float).view([6, 1, 1, 1]);
                (x, y)
            })
            .collect(),
    )
}

/// The BatchNorms' buffers after every training batch, with the batch's 0-based epoch.
type Trace = Rc<RefCell<Vec<(u64, Vec<(String, Tensor)>)>>>;

struct BatchNormTrace(Trace);

impl Callback for BatchNormTrace {
    fn name(&self) -> String {
        "BatchNormTrace".into()
    }
    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, _: &BatchEnd) -> Result<()> {
        let stats = statistics(ctx.model());
        self.0.borrow_mut().push((ctx.position.epoch, stats));
        Ok(())
    }
}

/// What one run left: its result, the BatchNorms' buffers before training, the trace and the
/// final weights and buffers.
struct Finetuned {
    result: Result<FitSummary>,
    initial: Vec<(String, Tensor)>,
    trace: Vec<(u64, Vec<(String, Tensor)>)>,
    weights: Vec<(String, Tensor)>,
}

/// 3 epochs of 4 batches, the backbone frozen for the first 2, a checkpoint every 3 steps
/// (mid-epoch); the backbone's BatchNorm starts from statistics of its own, as pretrained
/// weights would bring.
fn finetune(run: &Path, frozen_batch_norm: bool, stop: Option<StopAt>, resume: bool) -> Finetuned {
    seed_everything(4);
    let mut model = tiny_net();
    {
        let _g = torchlight_tensor::no_grad();
        let stats = state_dict(&model);
        let get = |k: &str| stats.iter().find(|(n, _)| n == k).unwrap().1.shallow_clone();
        get("backbone.1.running_mean").copy_(&(Tensor::rand([4], (Kind::Float, Device::Cpu)) - 0.5));
        get("backbone.1.running_var").copy_(&(Tensor::rand([4], (Kind::Float, Device::Cpu)) + 0.5));
    }
    let initial = statistics(&model);
    let mut optimizer = adamw(&model, 1e-2);
    let (mut train, mut val) = (images(4), images(1));
    let trace: Trace = Rc::default();
    let mut builder = Trainer::builder()
        .epochs(3)
        .seed(4)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(3)
        .callback(BackboneFinetuning::new(2, "head").with_frozen_batch_norm(frozen_batch_norm))
        .callback(BatchNormTrace(trace.clone()));
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let result = builder.build().unwrap().fit(
        &mut model,
        &Classification::new(3),
        &mut optimizer,
        &mut train,
        Some(&mut val),
    );
    let trace = trace
        .borrow()
        .iter()
        .map(|(e, s)| (*e, s.iter().map(|(k, t)| (k.clone(), t.copy())).collect()))
        .collect();
    Finetuned { result, initial, trace, weights: weights(&model) }
}

const BACKBONE: [&str; 3] =
    ["backbone.1.running_mean", "backbone.1.running_var", "backbone.1.num_batches_tracked"];

#[test]
fn the_frozen_backbones_batch_norm_keeps_its_statistics_until_it_thaws_and_after_a_resume() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let straight = finetune(&tmp.path().join("straight"), true, None, false);
    straight.result.unwrap();
    assert_eq!(straight.trace.len(), 12, "3 epochs of 4 batches");
    let (initial, trace) = (&straight.initial, &straight.trace);
    let mut head_before = stat(initial, "head.1.running_mean").copy();
    for (i, (epoch, stats)) in trace.iter().enumerate() {
        let at = format!("batch {} of epoch {}", i % 4 + 1, epoch + 1);
        let head = stat(stats, "head.1.running_mean");
        assert!(!head.equal(&head_before), "{at}: the head's BatchNorm trains, frozen backbone or not");
        head_before = head.copy();
        if *epoch < 2 {
            for key in BACKBONE {
                assert!(stat(stats, key).equal(stat(initial, key)), "{at}: {key} moved while frozen");
            }
        } else {
            for key in BACKBONE {
                assert!(
                    !stat(stats, key).equal(stat(initial, key)),
                    "{at}: {key} still fixed after the thaw"
                );
            }
        }
    }
    let last = &trace[11].1;
    assert_eq!(stat(last, "head.1.num_batches_tracked").int64_value(&[]), 12);
    assert_eq!(stat(last, "backbone.1.num_batches_tracked").int64_value(&[]), 4, "epoch 3 only");

    // A crash at step 7 resumes from the step-6 checkpoint, mid-epoch inside the frozen epochs:
    // the backbone's BatchNorm stays fixed through the rest of epoch 2, and the run ends as the
    // straight one, bit for bit.
    let run = tmp.path().join("resumed");
    let crashed = finetune(&run, true, Some(StopAt { at: 7, signal: false }), false);
    assert!(crashed.result.unwrap_err().to_string().contains("simulated crash"));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let p = saved.meta.progress;
    assert_eq!((p.epoch, p.batch, p.global_step), (1, 2, 6), "epoch 2, mid-epoch, backbone frozen");
    let resumed = finetune(&run, true, None, true);
    resumed.result.unwrap();
    assert_eq!(resumed.trace.len(), 6, "the last 2 batches of epoch 2, then epoch 3");
    for (epoch, stats) in &resumed.trace[..2] {
        assert_eq!(*epoch, 1);
        for key in BACKBONE {
            assert!(stat(stats, key).equal(stat(initial, key)), "resumed: {key} moved while frozen");
        }
    }
    assert_same_weights(&straight.weights, &resumed.weights);

    // Without the setting (Lightning's train_bn=True) the frozen backbone's statistics adapt.
    let adapted = finetune(&tmp.path().join("adapted"), false, None, false);
    adapted.result.unwrap();
    let first = &adapted.trace[0].1;
    for key in BACKBONE {
        assert!(!stat(first, key).equal(stat(&adapted.initial, key)), "{key} adapts while frozen");
    }
    assert_eq!(stat(&adapted.trace[11].1, "backbone.1.num_batches_tracked").int64_value(&[]), 12);
}
