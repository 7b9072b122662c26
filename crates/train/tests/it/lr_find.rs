//! `Trainer::lr_find`: the range test leaves nothing behind (`lr_find` then `fit` trains to the
//! same weights as `fit` alone, bit for bit, with dropout, BatchNorm statistics, AdamW state,
//! an lr schedule, accumulation, clipping, a seeded batch transform and a shuffling loader with
//! workers), finds a finite suggestion inside the sweep on a learnable problem, stops early on a
//! diverging one, and draws `lr_finder.png`.

use crate::temp_dir;
use crate::torch_rng_lock;
use crate::trainer::{adamw, assert_same_weights, blob_loader, weights};
use std::any::Any;
use tch::nn::ModuleT;
use tch::Tensor;
use torchlight_nn::{BatchNorm2d, BatchNormConfig, Dropout, Linear, Module};
use torchlight_optim::{CosineAnnealingLR, Optimizer, ParamGroup, Sgd, SgdConfig};
use torchlight_tensor::seed_everything;
use torchlight_train::*;

/// Two linear layers with a BatchNorm (running statistics: buffers) and dropout (torch's
/// generator) between them.
#[derive(Debug)]
pub(crate) struct BnMlp {
    fc1: Linear,
    bn: BatchNorm2d,
    drop: Dropout,
    fc2: Linear,
}

impl BnMlp {
    pub(crate) fn new() -> Self {
        BnMlp {
            fc1: Linear::new(4, 16, true),
            bn: BatchNorm2d::new(16, BatchNormConfig::default()),
            drop: Dropout { p: 0.2 },
            fc2: Linear::new(16, 3, true),
        }
    }
}

impl ModuleT for BnMlp {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let h = self.fc1.forward_t(x, train);
        let h = self.bn.forward_t(&h.view([-1, 16, 1, 1]), train).view([-1, 16]).relu();
        self.fc2.forward_t(&self.drop.forward_t(&h, train), train)
    }
}

impl Module for BnMlp {
    fn kind(&self) -> &'static str {
        "BnMlp"
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("fc1".into(), &self.fc1),
            ("bn".into(), &self.bn),
            ("drop".into(), &self.drop),
            ("fc2".into(), &self.fc2),
        ]
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        vec![
            ("fc1".into(), &mut self.fc1),
            ("bn".into(), &mut self.bn),
            ("drop".into(), &mut self.drop),
            ("fc2".into(), &mut self.fc2),
        ]
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Noise on every training batch from the batch's torch generator.
pub(crate) fn noisy(batch: (Tensor, Tensor), ctx: &mut BatchContext) -> Result<(Tensor, Tensor)> {
    let (x, y) = batch;
    let noise = ctx.with_torch_generator(|| Tensor::randn_like(&x) * 0.05)?;
    Ok((x + noise, y))
}

/// Two epochs of a fresh BnMlp on the blobs (40 samples, batches of 8, two workers,
/// shuffled; accumulation 2, clipping at 1, a cosine schedule per step, the noisy transform),
/// with a range test of 12 steps first when `find` is set. The Trainer has a data seed but no
/// seed of its own, so `fit` does not reseed torch: the dropout masks of the run are drawn
/// from where the generator stood, and only a restored generator gives the same run.
fn run(find: bool) -> (FitSummary, Vec<(String, Tensor)>, Option<LrFinder>) {
    seed_everything(3);
    let mut model = BnMlp::new();
    let mut optimizer = adamw(&model, 1e-2);
    let scheduler = CosineAnnealingLR::new(&mut optimizer, 6, 1e-4).unwrap();
    let mut train = blob_loader(40, true, 2);
    let mut trainer = Trainer::builder()
        .epochs(2)
        .accumulation(2)
        .grad_clip(1.0)
        .data_seed(5)
        .progress(Progress::quiet())
        .lr_scheduler(Box::new(scheduler), Interval::Step)
        .batch_transform(noisy)
        .build()
        .unwrap();
    let task = Classification::new(3);
    let finder = find.then(|| {
        let config = LrFindConfig { num_training: 12, min_lr: 1e-5, max_lr: 10.0, ..Default::default() };
        trainer.lr_find(&mut model, &task, &mut optimizer, &mut train, &config).unwrap()
    });
    let summary = trainer.fit(&mut model, &task, &mut optimizer, &mut train, None).unwrap();
    (summary, weights(&model), finder)
}

#[test]
fn lr_find_then_fit_equals_fit_alone_bit_for_bit() {
    let _lock = torch_rng_lock();
    let (plain, plain_weights, _) = run(false);
    let (after, after_weights, finder) = run(true);
    let finder = finder.unwrap();
    assert!(!finder.lrs.is_empty(), "the range test took steps");
    // The sweep changed the weights (12 AdamW steps up to lr 10) before they were put back.
    assert_same_weights(&plain_weights, &after_weights);
    assert!(plain_weights.iter().any(|(k, _)| k == "bn.running_mean"), "buffers are compared too");
    assert_eq!(plain.global_step, after.global_step);
    for (a, b) in plain.history.iter().zip(&after.history) {
        assert_eq!(a.get("train_loss"), b.get("train_loss"), "epoch {}", a.epoch);
        assert_eq!(a.lr, b.lr, "the schedule's lr at epoch {}", a.epoch);
    }
}

#[test]
fn the_range_test_suggests_a_finite_lr_inside_the_sweep_and_draws_it() {
    let _lock = torch_rng_lock();
    seed_everything(7);
    let mut model = BnMlp::new();
    let mut optimizer = adamw(&model, 1e-3);
    let before = weights(&model);
    let mut train = blob_loader(40, true, 0);
    let mut trainer = Trainer::builder().progress(Progress::quiet()).build().unwrap();
    let config = LrFindConfig { num_training: 40, min_lr: 1e-5, max_lr: 1.0, ..Default::default() };
    let finder =
        trainer.lr_find(&mut model, &Classification::new(3), &mut optimizer, &mut train, &config).unwrap();
    assert_eq!(finder.lrs.len(), finder.losses.len());
    assert_eq!(finder.lrs[0], 1e-5);
    let lr = finder.suggestion().expect("40 steps leave enough points");
    assert!(lr.is_finite() && (1e-5..=1.0).contains(&lr), "{lr}");
    let i = finder.suggestion_index.unwrap();
    assert!(i >= config.skip_begin && i < finder.lrs.len() - config.skip_end, "{i}");
    assert!(finder.losses.iter().take(finder.lrs.len() - 1).all(|l| l.is_finite()));
    assert_eq!(optimizer.lrs(), vec![1e-3], "the optimizer's lr is put back");
    assert_same_weights(&before, &weights(&model));
    let dir = temp_dir();
    let png = dir.path().join("lr_finder.png");
    finder.plot(&png).unwrap();
    let image = image::open(&png).unwrap();
    assert_eq!((image.width(), image.height()), LR_FINDER_SIZE);
}

#[test]
fn a_diverging_loss_stops_the_sweep_early() {
    let _lock = torch_rng_lock();
    seed_everything(7);
    let mut model = BnMlp::new();
    let params = torchlight_nn::named_parameters(&model);
    let mut optimizer = Sgd::new(vec![ParamGroup::new(params, SgdConfig::new(0.1))]).unwrap();
    let mut train = blob_loader(40, true, 0);
    let mut trainer =
        Trainer::builder().progress(Progress::quiet()).on_nonfinite(NonFiniteAction::Skip).build().unwrap();
    // Plain SGD up to lr 1e6 blows the loss up long before the 100th step.
    let config = LrFindConfig { min_lr: 1e-3, max_lr: 1e6, ..Default::default() };
    let finder =
        trainer.lr_find(&mut model, &Classification::new(3), &mut optimizer, &mut train, &config).unwrap();
    assert!(finder.stopped_early, "{:?}", finder.losses);
    assert!(finder.lrs.len() < 100, "{}", finder.lrs.len());
    assert_eq!(optimizer.lrs(), vec![0.1]);
}

#[test]
fn bad_settings_are_refused_by_name() {
    let _lock = torch_rng_lock();
    let mut model = BnMlp::new();
    let mut optimizer = adamw(&model, 1e-3);
    let mut train = blob_loader(16, false, 0);
    let mut trainer = Trainer::builder().progress(Progress::quiet()).build().unwrap();
    let config = LrFindConfig { max_lr: 1e-9, ..Default::default() };
    let err = trainer
        .lr_find(&mut model, &Classification::new(3), &mut optimizer, &mut train, &config)
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_lr"), "{err}");
}
