//! `Trainer::batch_size_find` on the CPU, with an injected allocation limit (a task that fails
//! as a device out of memory does on batches past a size, after its forward ran, as the
//! out-of-memory guard's test does): the largest batch that trains for several limits, whether
//! the failure is a panic or an error; the doublings then the bisection, in order; the search
//! leaves nothing behind (search then `fit` trains to the same weights as `fit` alone, bit for
//! bit, with BatchNorm statistics, dropout, AdamW state, accumulation, clipping, a schedule and
//! a seeded batch transform); a failure that is not out of memory ends the search as it came,
//! with everything put back; every try starts from the weights and generator state the search
//! started from; a distributed Trainer refuses it.

use crate::lr_find::{noisy, BnMlp};
use crate::torch_rng_lock;
use crate::trainer::{adamw, assert_same_weights, blob_loader, weights, Mlp};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tch::{Device, Kind, Tensor};
use torchlight_nn::Module;
use torchlight_optim::{CosineAnnealingLR, Optimizer};
use torchlight_tensor::{seed_everything, TensorError};
use torchlight_train::*;

/// How [`Hungry`] fails past its limit.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// Panics with CUDA's out-of-memory message, as a tch op does.
    OomPanic,
    /// Returns libtorch's out-of-memory error, as a checked (`f_`) op does.
    OomError,
    /// Panics with another message.
    OtherPanic,
    /// Returns another error.
    OtherError,
}

/// Classification of 3 classes that fails past `limit` samples, after the forward ran (the
/// BatchNorm statistics updated, dropout drawn), as an allocation failing in the backward
/// would.
struct Hungry {
    limit: i64,
    failure: Failure,
}

impl<M: Module> Task<M, (Tensor, Tensor)> for Hungry {
    fn step(&self, model: &M, batch: &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        let out = Classification::new(3).step(model, batch, stage)?;
        if batch.0.size()[0] <= self.limit {
            return Ok(out);
        }
        match self.failure {
            Failure::OomPanic => panic!("CUDA out of memory. Tried to allocate 2.00 GiB"),
            Failure::OomError => Err(TrainError::Tensor(TensorError::Torch {
                op: "addmm",
                message: "CUDA out of memory. Tried to allocate 20.00 MiB".into(),
            })),
            Failure::OtherPanic => panic!("index 9 is out of bounds for dimension 0 with size 3"),
            Failure::OtherError => Err(TrainError::InvalidSetting {
                setting: "labels".into(),
                value: "9".into(),
                reason: "out of range".into(),
            }),
        }
    }
}

/// `n` samples of the blobs' shape: the first `n` of a fixed pool of 128.
fn pool_batch(n: usize) -> Result<(Tensor, Tensor)> {
    let x = Tensor::arange(128 * 4, (Kind::Float, Device::Cpu)).view([128, 4]).sin();
    let y = Tensor::arange(128, (Kind::Int64, Device::Cpu)).remainder(3);
    Ok((x.narrow(0, 0, n as i64), y.narrow(0, 0, n as i64)))
}

fn quiet_trainer(amp: bool) -> Trainer {
    Trainer::builder().amp(amp).data_seed(5).progress(Progress::quiet()).build().unwrap()
}

/// With an MLP (dropout, no BatchNorm, which a try of one sample would stop with PyTorch's
/// error about one value per channel).
#[test]
fn the_largest_batch_that_trains_is_found_for_each_limit() {
    let _lock = torch_rng_lock();
    seed_everything(1);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let before = weights(&model);
    let config = BatchSizeFindConfig::new(64);
    for (i, limit) in [1i64, 5, 7, 12, 40, 64, 100].into_iter().enumerate() {
        // Both ways an allocation failure comes back, with and without (bf16) autocast.
        let failure = if i % 2 == 0 { Failure::OomPanic } else { Failure::OomError };
        let mut trainer = quiet_trainer(i % 3 == 0);
        let task = Hungry { limit, failure };
        let found = trainer
            .batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config)
            .unwrap_or_else(|e| panic!("limit {limit}: {e}"));
        assert_eq!(found.largest, Some(limit.min(64) as usize), "limit {limit}: {:?}", found.tries);
        assert_eq!(found.hit_ceiling(), limit >= 64, "limit {limit}");
        for t in &found.tries {
            assert_eq!(t.fits, t.batch_size as i64 <= limit, "limit {limit}: {t:?}");
            assert_eq!(t.peak_bytes, None, "no device counters on the CPU");
        }
        assert_eq!(found.allocated_bytes, None);
        assert_same_weights(&before, &weights(&model));
        assert!(
            optimizer.state_dict().tensors.is_empty(),
            "limit {limit}: the tries' AdamW state is dropped"
        );
    }
    let task = Hungry { limit: 7, failure: Failure::OomPanic };
    let found = quiet_trainer(false)
        .batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config)
        .unwrap();
    let tries: Vec<(usize, bool)> = found.tries.iter().map(|t| (t.batch_size, t.fits)).collect();
    assert_eq!(tries, [(2, true), (4, true), (8, false), (6, true), (7, true)], "doubling, then bisection");
    let s = found.suggest(64).unwrap();
    assert_eq!((s.batch_size, s.accumulation_steps), (7, 10));
    let task = Hungry { limit: 0, failure: Failure::OomPanic };
    let found = quiet_trainer(false)
        .batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config)
        .unwrap();
    assert_eq!((found.largest, found.tries.len()), (None, 2), "2 and 1 fail: nothing trains");
    assert_eq!(found.suggest(64), None);
}

/// Records, at every step, the batch size, the sum of the model's weights and a draw from
/// torch's generator (taken before the forward, whose dropout draws after it).
struct Spy {
    seen: std::cell::RefCell<Vec<(i64, f64, f64)>>,
}

impl<M: Module> Task<M, (Tensor, Tensor)> for Spy {
    fn step(&self, model: &M, batch: &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        let sum: f64 = weights(model).iter().map(|(_, t)| t.sum(Kind::Double).double_value(&[])).sum();
        let draw = Tensor::rand([1], (Kind::Float, Device::Cpu)).double_value(&[0]);
        self.seen.borrow_mut().push((batch.0.size()[0], sum, draw));
        Classification::new(3).step(model, batch, stage)
    }
}

#[test]
fn every_try_starts_from_the_weights_and_generator_the_search_started_from() {
    let _lock = torch_rng_lock();
    seed_everything(2);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 0.1);
    let spy = Spy { seen: Default::default() };
    let config = BatchSizeFindConfig::new(16);
    let found = quiet_trainer(false)
        .batch_size_find(&mut model, &spy, &mut optimizer, &mut pool_batch, &config)
        .unwrap();
    assert_eq!(found.largest, Some(16));
    let seen = spy.seen.into_inner();
    let sizes: Vec<i64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(sizes, [2, 2, 4, 4, 8, 8, 16, 16], "two steps per try");
    let first = seen[0];
    for (i, s) in seen.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(
                (s.1, s.2),
                (first.1, first.2),
                "try of {}: weights and generator as at the start",
                s.0
            );
        } else {
            assert_ne!(s.1, first.1, "the try's first AdamW step at lr 0.1 moved the weights");
        }
    }
}

/// Two epochs of a fresh BnMlp on the blobs (as the lr finder's test trains it: batches of 8,
/// two workers, accumulation 2, clipping, a cosine schedule, the noisy transform, a data seed
/// but no Trainer seed, so only restored generators give the same dropout masks), with a batch
/// size search first when `find` is set: tries 2, 4, 8, 16 (out of memory after its forward),
/// 12, 14 and 13 (out of memory) under a limit of 12, each two AdamW steps.
fn run(find: bool) -> (FitSummary, Vec<(String, Tensor)>, Option<BatchSizeFinder>) {
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
    let task = Hungry { limit: 12, failure: Failure::OomPanic };
    let found = find.then(|| {
        let config = BatchSizeFindConfig::new(32);
        trainer.batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config).unwrap()
    });
    let summary = trainer.fit(&mut model, &task, &mut optimizer, &mut train, None).unwrap();
    (summary, weights(&model), found)
}

#[test]
fn search_then_fit_equals_fit_alone_bit_for_bit() {
    let _lock = torch_rng_lock();
    let (plain, plain_weights, _) = run(false);
    let (after, after_weights, found) = run(true);
    let found = found.unwrap();
    let sizes: Vec<usize> = found.tries.iter().map(|t| t.batch_size).collect();
    assert_eq!(sizes, [2, 4, 8, 16, 12, 14, 13]);
    assert_eq!(found.largest, Some(12));
    assert_same_weights(&plain_weights, &after_weights);
    assert!(plain_weights.iter().any(|(k, _)| k == "bn.running_mean"), "buffers are compared too");
    assert_eq!(plain.global_step, after.global_step);
    for (a, b) in plain.history.iter().zip(&after.history) {
        assert_eq!(a.get("train_loss"), b.get("train_loss"), "epoch {}", a.epoch);
        assert_eq!(a.lr, b.lr, "the schedule's lr at epoch {}", a.epoch);
    }
}

#[test]
fn a_failure_that_is_not_out_of_memory_ends_the_search_with_everything_put_back() {
    let _lock = torch_rng_lock();
    seed_everything(4);
    let mut model = BnMlp::new();
    let mut optimizer = adamw(&model, 1e-2);
    let before = weights(&model);
    let config = BatchSizeFindConfig::new(64);
    // The generator as it stands: a restored one draws the same next values.
    let state = torchlight_tensor::torch_rng_state().unwrap();

    let task = Hungry { limit: 6, failure: Failure::OtherPanic };
    let mut trainer = quiet_trainer(false);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        trainer.batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config)
    }))
    .expect_err("the panic comes back as it was");
    assert!(guard::panic_message(panicked.as_ref()).contains("index 9 is out of bounds"));
    assert_same_weights(&before, &weights(&model));
    assert!(optimizer.state_dict().tensors.is_empty());
    let drawn = Tensor::rand([4], (Kind::Float, Device::Cpu));
    torchlight_tensor::set_torch_rng_state(&state).unwrap();
    assert!(drawn.equal(&Tensor::rand([4], (Kind::Float, Device::Cpu))), "torch's generator is put back");

    let task = Hungry { limit: 6, failure: Failure::OtherError };
    let err =
        trainer.batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &config).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    assert_same_weights(&before, &weights(&model));

    // A batch maker that gives other than the size asked for is named.
    let mut short = |n: usize| pool_batch(n.min(3));
    let err = trainer
        .batch_size_find(
            &mut model,
            &Hungry { limit: 64, failure: Failure::OomPanic },
            &mut optimizer,
            &mut short,
            &config,
        )
        .unwrap_err();
    assert!(err.to_string().contains("a batch of 3 samples for a try of 4"), "{err}");
    assert_same_weights(&before, &weights(&model));
}

/// A world of two ranks that the search must not reach.
struct TwoRanks;

impl Distributed for TwoRanks {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn broadcast_parameters(&mut self, _: &dyn Module) -> Result<()> {
        unreachable!("the search refuses before any collective")
    }
    fn sync_gradients(&mut self, _: &dyn Module) -> Result<()> {
        unreachable!("the search refuses before any collective")
    }
    fn all_reduce_sum(&self, _: &[Tensor]) -> Result<()> {
        unreachable!("the search refuses before any collective")
    }
    fn all_gather(&self, _: &Tensor) -> Result<Vec<Tensor>> {
        unreachable!("the search refuses before any collective")
    }
    fn barrier(&self) -> Result<()> {
        unreachable!("the search refuses before any collective")
    }
}

#[test]
fn a_distributed_trainer_refuses_the_search() {
    let _lock = torch_rng_lock();
    let mut model = BnMlp::new();
    let mut optimizer = adamw(&model, 1e-2);
    let mut trainer =
        Trainer::builder().progress(Progress::quiet()).distributed(Box::new(TwoRanks)).build().unwrap();
    let task = Hungry { limit: 64, failure: Failure::OomPanic };
    let err = trainer
        .batch_size_find(&mut model, &task, &mut optimizer, &mut pool_batch, &BatchSizeFindConfig::new(8))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("2 ranks") && text.contains("one process"), "{text}");
}
