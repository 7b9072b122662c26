//! The Trainer with a user's own model, dataset and tasks: every built-in task learns a small
//! problem; an interrupted or crashed run resumes mid-epoch to the same weights as a straight
//! run, bit for bit; callbacks see every hook; accumulation equals one large batch; the
//! out-of-memory guard finds the largest batch that fits.

use crate::{temp_dir, torch_rng_lock};
use std::any::Any;
use std::path::Path;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_data::{Array, DataLoader, Dataset};
use torchlight_nn::{named_parameters, state_dict, Dropout, Linear, Module};
use torchlight_optim::{AdamConfig, AdamW, ParamGroup, Sgd, SgdConfig};
use torchlight_tensor::seed::Rng;
use torchlight_tensor::seed_everything;
use torchlight_train::*;

/// A user's model, written as a PyTorch user writes one: two linear layers with dropout.
#[derive(Debug)]
struct Mlp {
    fc1: Linear,
    drop: Dropout,
    fc2: Linear,
}

impl Mlp {
    fn new(inputs: i64, hidden: i64, outputs: i64) -> Self {
        Mlp {
            fc1: Linear::new(inputs, hidden, true),
            drop: Dropout { p: 0.2 },
            fc2: Linear::new(hidden, outputs, true),
        }
    }
}

impl ModuleT for Mlp {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let h = self.fc1.forward_t(x, train).relu();
        self.fc2.forward_t(&self.drop.forward_t(&h, train), train)
    }
}

impl Module for Mlp {
    fn kind(&self) -> &'static str {
        "Mlp"
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("fc1".into(), &self.fc1), ("drop".into(), &self.drop), ("fc2".into(), &self.fc2)]
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        vec![("fc1".into(), &mut self.fc1), ("drop".into(), &mut self.drop), ("fc2".into(), &mut self.fc2)]
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A user's in-memory dataset: Gaussian blobs, one per class, with noise drawn from the
/// sample's generator (an augmentation, so resume must reproduce it).
struct Blobs {
    x: Vec<[f32; 4]>,
    y: Vec<i64>,
}

impl Blobs {
    fn new(n: usize, classes: i64, seed: i64) -> Self {
        let g = Tensor::randn([n as i64, 4], (Kind::Float, Device::Cpu)) * 0.3;
        let _ = seed;
        let y: Vec<i64> = (0..n as i64).map(|i| (i * 7 + seed) % classes).collect();
        let x = (0..n)
            .map(|i| {
                let c = y[i] as f32;
                let mut v = [c, -c, 0.5 * c, 1.0];
                for (k, slot) in v.iter_mut().enumerate() {
                    *slot += g.double_value(&[i as i64, k as i64]) as f32;
                }
                v
            })
            .collect();
        Blobs { x, y }
    }
}

impl Dataset for Blobs {
    type Item = (Array, i64);
    fn len(&self) -> usize {
        self.y.len()
    }
    fn get(&self, index: usize, rng: &mut Rng) -> torchlight_data::Result<(Array, i64)> {
        let jitter: f32 = rand::Rng::random_range(rng, -0.05..0.05);
        let v: Vec<f32> = self.x[index].iter().map(|x| x + jitter).collect();
        Ok((Array::from_f32(v, vec![4])?, self.y[index]))
    }
}

fn blob_loader(n: usize, shuffle: bool, workers: usize) -> DataLoader<Blobs> {
    DataLoader::builder(Blobs::new(n, 3, 1))
        .batch_size(8)
        .shuffle(shuffle)
        .num_workers(workers)
        .seed(5)
        .build()
        .unwrap()
}

fn adamw(model: &dyn Module, lr: f64) -> AdamW {
    AdamW::new(vec![ParamGroup::new(named_parameters(model), AdamConfig::adamw().with_lr(lr))]).unwrap()
}

fn weights(model: &dyn Module) -> Vec<(String, Tensor)> {
    state_dict(model).into_iter().map(|(k, t)| (k, t.copy())).collect()
}

fn assert_same_weights(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len());
    for ((ka, ta), (kb, tb)) in a.iter().zip(b) {
        assert_eq!(ka, kb);
        assert!(ta.equal(tb), "{ka} differs: max |diff| {}", (ta - tb).abs().max().double_value(&[]));
    }
}

/// Stops the run at optimizer step `at`: by SIGINT (as Ctrl-C would) or by failing (as a crash
/// would, without the graceful save).
struct StopAt {
    at: u64,
    signal: bool,
}

impl Callback for StopAt {
    fn name(&self) -> String {
        "StopAt".into()
    }
    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        if batch.stepped && ctx.position.global_step == self.at {
            if self.signal {
                signal_hook::low_level::raise(signal_hook::consts::SIGINT).unwrap();
            } else {
                return Err(TrainError::Training {
                    epoch: ctx.position.epoch + 1,
                    reason: "simulated crash".into(),
                });
            }
        }
        Ok(())
    }
}

/// Trains a fresh seeded Mlp on the blobs for 3 epochs (5 batches each, accumulation 2, so 3
/// steps per epoch) in `run`, with checkpoints every 2 steps; `stop` interrupts it.
fn blob_run(run: &Path, stop: Option<StopAt>, resume: bool) -> (Result<FitSummary>, Vec<(String, Tensor)>) {
    seed_everything(11);
    let model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let mut train = blob_loader(40, true, 2);
    let mut val = blob_loader(24, false, 0);
    let mut builder = Trainer::builder()
        .epochs(3)
        .accumulation(2)
        .seed(11)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(2)
        .callback(EarlyStopping::new(10));
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    let task = Classification::new(3).with_top_k(2);
    let result = trainer.fit(&model, &task, &mut optimizer, &mut train, Some(&mut val));
    (result, weights(&model))
}

#[test]
fn a_user_model_resumes_mid_epoch_exactly_after_an_interrupt_or_a_crash() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (straight, want) = blob_run(&tmp.path().join("straight"), None, false);
    let straight = straight.unwrap();
    assert_eq!((straight.epochs, straight.global_step), (3, 9));

    // Ctrl-C at step 4 (the middle of epoch 2): the step finishes, `last` is saved there.
    let run = tmp.path().join("interrupted");
    let (err, _) = blob_run(&run, Some(StopAt { at: 4, signal: true }), false);
    let err = err.unwrap_err();
    match &err {
        TrainError::Interrupted { signal, epoch, step, checkpoint } => {
            assert_eq!((signal.as_str(), *epoch, *step), ("SIGINT", 2, 4));
            assert_eq!(checkpoint.as_deref(), Some(run.join("checkpoints/last").as_path()));
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let p = saved.meta.progress;
    assert_eq!((p.epoch, p.batch, p.global_step), (1, 2, 4), "mid-epoch, at the exact batch");
    let (resumed, got) = blob_run(&run, None, true);
    let resumed = resumed.unwrap();
    assert_same_weights(&want, &got);
    assert_eq!(resumed.history.len(), 3);
    for (a, b) in straight.history.iter().zip(&resumed.history) {
        assert_eq!((&a.train, &a.val, a.lr), (&b.train, &b.val, b.lr), "epoch {} logs the same", a.epoch);
    }
    let csv = read_metrics_csv(run.join("metrics.csv")).unwrap();
    assert_eq!(csv.iter().map(|r| r.epoch).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(csv[1].train, straight.history[1].train, "the interrupted epoch's row is whole");

    // A crash at step 7 loses nothing before the step-6 checkpoint (every 2 steps).
    let run = tmp.path().join("crashed");
    let (err, _) = blob_run(&run, Some(StopAt { at: 7, signal: false }), false);
    assert!(err.unwrap_err().to_string().contains("simulated crash"));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    assert_eq!(saved.meta.progress.global_step, 6);
    let (resumed, got) = blob_run(&run, None, true);
    assert_eq!(resumed.unwrap().global_step, 9);
    assert_same_weights(&want, &got);
}

#[test]
fn a_user_model_exports_to_torchscript_after_training() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    seed_everything(3);
    let model = Mlp::new(4, 8, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let mut train = blob_loader(24, true, 0);
    let mut trainer = Trainer::builder().epochs(2).progress(Progress::quiet()).build().unwrap();
    trainer.fit(&model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap();
    let path = tmp.path().join("mlp.pt");
    let x = Tensor::randn([5, 4], (Kind::Float, Device::Cpu));
    torchlight_export::export_torchscript(&model, &x, &path).unwrap();
    let loaded = tch::CModule::load(&path).unwrap();
    let want = tch::no_grad(|| model.forward_t(&x, false));
    let got = loaded.forward_ts(&[x]).unwrap();
    assert!(want.allclose(&got, 1e-6, 1e-6, false));
}

/// Features and labels already in tensors, as a user's in-memory regression or multi-label
/// dataset would hold them.
struct Pairs {
    x: Vec<Vec<f32>>,
    y: Vec<Vec<f32>>,
}

impl Dataset for Pairs {
    type Item = (Array, Array);
    fn len(&self) -> usize {
        self.x.len()
    }
    fn get(&self, i: usize, _rng: &mut Rng) -> torchlight_data::Result<(Array, Array)> {
        Ok((
            Array::from_f32(self.x[i].clone(), vec![self.x[i].len()])?,
            Array::from_f32(self.y[i].clone(), vec![self.y[i].len()])?,
        ))
    }
}

/// `(Array, Array)` samples collate into `(Tensor, Tensor)` batches.
#[derive(Debug, Clone, Copy)]
struct PairCollate;

impl torchlight_data::Collate<(Array, Array)> for PairCollate {
    type Staged = (Array, Array);
    type Batch = (Tensor, Tensor);
    fn stage(&self, items: Vec<(usize, (Array, Array))>) -> torchlight_data::Result<(Array, Array)> {
        let xs: Vec<(usize, &Array)> = items.iter().map(|(i, (x, _))| (*i, x)).collect();
        let ys: Vec<(usize, &Array)> = items.iter().map(|(i, (_, y))| (*i, y)).collect();
        Ok((Array::stack(&xs, None)?, Array::stack(&ys, None)?))
    }
    fn finish(&self, (x, y): (Array, Array), pin: bool) -> torchlight_data::Result<(Tensor, Tensor)> {
        Ok((x.to_tensor(pin)?, y.to_tensor(pin)?))
    }
}

fn pairs_loader(x: &Tensor, y: &Tensor, shuffle: bool) -> DataLoader<Pairs, PairCollate> {
    let rows = |t: &Tensor| -> Vec<Vec<f32>> {
        (0..t.size()[0]).map(|i| Vec::<f32>::try_from(t.get(i).to_kind(Kind::Float)).unwrap()).collect()
    };
    torchlight_data::DataLoaderBuilder::new(Pairs { x: rows(x), y: rows(y) })
        .collate(PairCollate)
        .batch_size(16)
        .shuffle(shuffle)
        .seed(1)
        .build()
        .unwrap()
}

fn last_val(summary: &FitSummary, name: &str) -> f64 {
    summary.history.last().unwrap().get(name).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn each_built_in_task_learns_a_small_problem() {
    let _lock = torch_rng_lock();
    seed_everything(2);
    let fit = |model: &Linear,
               task: &dyn Task<Linear, (Tensor, Tensor)>,
               train: &mut dyn BatchSource<(Tensor, Tensor)>,
               val: &mut dyn BatchSource<(Tensor, Tensor)>,
               epochs| {
        let mut optimizer = adamw(model, 5e-2);
        let mut trainer = Trainer::builder().epochs(epochs).progress(Progress::quiet()).build().unwrap();
        trainer.fit(model, task, &mut optimizer, train, Some(val)).unwrap()
    };

    // Classification: three separable blobs.
    let model = Linear::new(4, 3, true);
    let (mut train, mut val) = (blob_loader(96, true, 0), blob_loader(48, false, 0));
    let s = fit(&model, &Classification::new(3), &mut train, &mut val, 15);
    let acc = last_val(&s, "val_acc");
    assert!(acc > 0.9, "classification val_acc {acc}: {:?}", s.history.last());
    assert_eq!(s.best.map(|b| b.0), s.history.iter().map(|r| r.get("val_acc").unwrap()).reduce(f64::max));

    // Multi-label: label j is on when feature j is positive.
    let x = Tensor::randn([160, 4], (Kind::Float, Device::Cpu));
    let y = x.gt(0.0).to_kind(Kind::Float);
    let (mut train, mut val) = (
        pairs_loader(&x.narrow(0, 0, 112), &y.narrow(0, 0, 112), true),
        pairs_loader(&x.narrow(0, 112, 48), &y.narrow(0, 112, 48), false),
    );
    let model = Linear::new(4, 4, true);
    let s = fit(&model, &MultiLabel::new(), &mut train, &mut val, 15);
    let (f1, map) = (last_val(&s, "val_f1"), last_val(&s, "val_map"));
    assert!(f1 > 0.9 && map > 0.95, "multi-label val f1 {f1}, mAP {map}");

    // Regression: two outputs, linear in the inputs.
    let w = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0, 0.0, 1.0, -1.0, 2.0]).view([4, 2]);
    let y = x.matmul(&w) + 0.5;
    let (mut train, mut val) = (
        pairs_loader(&x.narrow(0, 0, 112), &y.narrow(0, 0, 112), true),
        pairs_loader(&x.narrow(0, 112, 48), &y.narrow(0, 112, 48), false),
    );
    let model = Linear::new(4, 2, true);
    let s = fit(&model, &Regression::new(RegressionLoss::Huber { delta: 1.0 }), &mut train, &mut val, 40);
    let (first, mae, rmse) =
        (s.history[0].get("val_mae").unwrap(), last_val(&s, "val_mae"), last_val(&s, "val_rmse"));
    assert!(
        mae < 0.1 && mae < first / 10.0 && rmse >= mae,
        "regression val mae {first} -> {mae}, rmse {rmse}"
    );
    assert_eq!(
        s.best.unwrap().0,
        s.history.iter().map(|r| r.get("val_mae").unwrap()).reduce(f64::min).unwrap()
    );
}

/// Records every hook it sees.
#[derive(Default)]
struct Recorder {
    seen: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
}

impl Callback for Recorder {
    fn name(&self) -> String {
        "Recorder".into()
    }
    fn on_train_start(&mut self, _: &mut Context<'_>) -> Result<()> {
        self.seen.borrow_mut().push("train_start".into());
        Ok(())
    }
    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        self.seen.borrow_mut().push(format!("epoch_start {}", ctx.position.epoch));
        Ok(())
    }
    fn on_train_batch_end(&mut self, _: &mut Context<'_>, b: &BatchEnd) -> Result<()> {
        self.seen.borrow_mut().push(format!("batch_end {}", b.stepped));
        Ok(())
    }
    fn on_before_optimizer_step(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let has_grad = ctx.optimizer.named_parameters().iter().all(|(_, p)| p.grad().defined());
        self.seen.borrow_mut().push(format!("before_step grads={has_grad}"));
        Ok(())
    }
    fn on_validation_epoch_end(&mut self, _: &mut Context<'_>, metrics: &[(String, f64)]) -> Result<()> {
        let names: Vec<&str> = metrics.iter().map(|(k, _)| k.as_str()).collect();
        self.seen.borrow_mut().push(format!("val_end {}", names.join(",")));
        Ok(())
    }
    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, r: &EpochRecord) -> Result<()> {
        self.seen.borrow_mut().push(format!("epoch_end {} history {}", r.epoch, ctx.history.len()));
        Ok(())
    }
    fn on_train_end(&mut self, _: &mut Context<'_>) -> Result<()> {
        self.seen.borrow_mut().push("train_end".into());
        Ok(())
    }
    fn state_dict(&self) -> serde_json::Value {
        serde_json::json!({ "hooks": self.seen.borrow().len() })
    }
}

#[test]
fn callbacks_see_every_hook_in_order_and_early_stopping_stops() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    seed_everything(4);
    let model = Linear::new(4, 3, true);
    // lr 0: nothing improves, so patience 2 stops after epoch 3.
    let mut optimizer =
        Sgd::new(vec![ParamGroup::new(named_parameters(&model), SgdConfig::new(0.0))]).unwrap();
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut trainer = Trainer::builder()
        .epochs(10)
        .accumulation(2)
        .progress(Progress::quiet())
        .run_dir(tmp.path())
        .callback(Recorder { seen: seen.clone() })
        .callback(EarlyStopping::new(2).monitor(Monitor::min("val_loss")))
        .callback(LearningRateMonitor::new(Interval::Epoch))
        .build()
        .unwrap();
    let (mut train, mut val) = (blob_loader(24, true, 0), blob_loader(16, false, 0));
    let s = trainer.fit(&model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val)).unwrap();
    assert_eq!(s.epochs, 3);
    assert_eq!(s.stopped_early.as_deref(), Some("early stopping: no better val_loss for 2 epochs"));
    let seen = seen.borrow();
    assert_eq!(
        seen[..8],
        [
            "train_start",
            "epoch_start 0",
            "batch_end false",
            "before_step grads=true",
            "batch_end true",
            "before_step grads=true",
            "batch_end true",
            "val_end val_loss,val_acc,val_top3",
        ]
    );
    assert_eq!(seen[8], "epoch_end 1 history 1");
    assert_eq!(seen.last().unwrap(), "train_end");
    // The callbacks' states are in the checkpoint.
    let last = torchlight_checkpoint::Checkpoint::load(tmp.path().join("checkpoints/last")).unwrap();
    let states = &last.meta.loop_state["callbacks"];
    assert_eq!(states["EarlyStopping"]["stale"], 2);
    assert!(states["Recorder"]["hooks"].as_u64().unwrap() > 20);
}

#[test]
fn accumulating_two_half_batches_equals_one_full_batch() {
    let _lock = torch_rng_lock();
    seed_everything(9);
    let x = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2, 0, 1]);
    let one = Linear::new(4, 3, true);
    let two = Linear::new(4, 3, true);
    tch::no_grad(|| {
        two.weight.shallow_clone().copy_(&one.weight);
        two.bias.as_ref().unwrap().shallow_clone().copy_(one.bias.as_ref().unwrap());
    });
    let task = Classification::new(3);
    let (mut opt_one, mut opt_two) = (adamw(&one, 0.1), adamw(&two, 0.1));
    let mut full = StepRunner::new(StepConfig::default(), Device::Cpu).unwrap();
    let _ = full.step(&one, &task, &(x.shallow_clone(), y.shallow_clone()), &mut opt_one, true).unwrap();
    let mut halves =
        StepRunner::new(StepConfig { accumulation: 2, ..StepConfig::default() }, Device::Cpu).unwrap();
    for part in [0, 4] {
        let batch = (x.narrow(0, part, 4), y.narrow(0, part, 4));
        let _ = halves.step(&two, &task, &batch, &mut opt_two, false).unwrap();
    }
    assert_eq!((full.global_step(), halves.global_step()), (1, 1));
    assert!(
        one.weight.allclose(&two.weight, 1e-6, 1e-7, false),
        "{}",
        (&one.weight - &two.weight).abs().max()
    );
}

/// A task whose step fails like a device out of memory on batches larger than `fits`.
struct Hungry {
    fits: i64,
}

impl Task<Linear, (Tensor, Tensor)> for Hungry {
    fn step(&self, model: &Linear, batch: &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        if batch.0.size()[0] > self.fits {
            panic!("CUDA out of memory. Tried to allocate 2.00 GiB");
        }
        Classification::new(3).step(model, batch, stage)
    }
}

#[test]
fn out_of_memory_reports_the_largest_batch_that_fits() {
    let model = Linear::new(4, 3, true);
    let batch =
        (Tensor::zeros([24, 4], (Kind::Float, Device::Cpu)), Tensor::zeros([24], (Kind::Int64, Device::Cpu)));
    let mut runner = StepRunner::new(StepConfig::default(), Device::Cpu).unwrap();
    let err = runner.forward_backward(&model, &Hungry { fits: 7 }, &batch).unwrap_err();
    match &err {
        TrainError::OutOfMemory { batch_size, input_shape, fits, .. } => {
            assert_eq!((*batch_size, input_shape.as_slice(), *fits), (24, &[24i64, 4][..], Some(6)));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert!(err.to_string().contains("set train.batch_size = 6 (and train.accumulation_steps = 4"), "{err}");
    assert!(!model.weight.grad().defined(), "the failed step left no gradient behind");
}
