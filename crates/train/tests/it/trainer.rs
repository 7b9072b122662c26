//! The Trainer with a user's own model, dataset and tasks: every built-in task learns a small
//! problem; an interrupted or crashed run resumes mid-epoch to the same weights as a straight
//! run, bit for bit, with a callback's tensor state and a seeded batch transform; callbacks see
//! every hook and can change the model's layers; accumulation equals one large batch; the
//! out-of-memory guard finds the largest batch that fits.

use crate::{temp_dir, torch_rng_lock};
use std::any::Any;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_data::{Array, ArrayToTensor, DataLoader, Dataset};
use torchlight_nn::{named_parameters, state_dict, visit_modules_mut, Dropout, Linear, Module};
use torchlight_optim::{AdamConfig, AdamW, ParamGroup, Sgd, SgdConfig};
use torchlight_tensor::seed::Rng;
use torchlight_tensor::seed_everything;
use torchlight_train::*;

/// A user's model, written as a PyTorch user writes one: two linear layers with dropout.
#[derive(Debug)]
pub(crate) struct Mlp {
    fc1: Linear,
    drop: Dropout,
    fc2: Linear,
}

impl Mlp {
    pub(crate) fn new(inputs: i64, hidden: i64, outputs: i64) -> Self {
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
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A user's in-memory dataset: Gaussian blobs, one per class, with noise drawn from the
/// sample's generator (an augmentation, so resume must reproduce it).
pub(crate) struct Blobs {
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

pub(crate) fn blob_loader(n: usize, shuffle: bool, workers: usize) -> DataLoader<Blobs> {
    DataLoader::builder(Blobs::new(n, 3, 1))
        .batch_size(8)
        .shuffle(shuffle)
        .num_workers(workers)
        .seed(5)
        .build()
        .unwrap()
}

pub(crate) fn adamw(model: &dyn Module, lr: f64) -> AdamW {
    AdamW::new(vec![ParamGroup::new(named_parameters(model), AdamConfig::adamw().with_lr(lr))]).unwrap()
}

pub(crate) fn weights(model: &dyn Module) -> Vec<(String, Tensor)> {
    state_dict(model).into_iter().map(|(k, t)| (k, t.copy())).collect()
}

pub(crate) fn assert_same_weights(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len());
    for ((ka, ta), (kb, tb)) in a.iter().zip(b) {
        assert_eq!(ka, kb);
        assert!(ta.equal(tb), "{ka} differs: max |diff| {}", (ta - tb).abs().max().double_value(&[]));
    }
}

/// Stops the run at optimizer step `at`: by SIGINT (as Ctrl-C would) or by failing (as a crash
/// would, without the graceful save).
pub(crate) struct StopAt {
    pub(crate) at: u64,
    pub(crate) signal: bool,
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

/// The sum of `fc1.weight` over every optimizer step and the step count, as tensors: a
/// callback whose state is tensors (what an EMA of the weights is), saved in checkpoints and
/// restored on resume; its final values are written to `out` when training ends.
struct RunningSum {
    sum: Tensor,
    steps: Tensor,
    out: Rc<RefCell<Option<(Tensor, Tensor)>>>,
}

impl RunningSum {
    fn new(out: Rc<RefCell<Option<(Tensor, Tensor)>>>) -> Self {
        let zeros = Tensor::zeros([16, 4], (Kind::Float, Device::Cpu));
        RunningSum { sum: zeros, steps: Tensor::from(0i64), out }
    }
}

impl Callback for RunningSum {
    fn name(&self) -> String {
        "RunningSum".into()
    }
    fn on_train_batch_end(&mut self, ctx: &mut Context<'_>, batch: &BatchEnd) -> Result<()> {
        if batch.stepped {
            let w = named_parameters(ctx.model()).into_iter().find(|(k, _)| k == "fc1.weight").unwrap().1;
            self.sum = &self.sum + w.detach();
            self.steps = &self.steps + 1;
        }
        Ok(())
    }
    fn on_train_end(&mut self, _: &mut Context<'_>) -> Result<()> {
        *self.out.borrow_mut() = Some((self.sum.copy(), self.steps.copy()));
        Ok(())
    }
    fn tensor_state(&self) -> Vec<(String, Tensor)> {
        vec![("sum".into(), self.sum.shallow_clone()), ("steps".into(), self.steps.shallow_clone())]
    }
    fn load_tensor_state(&mut self, tensors: Vec<(String, Tensor)>) -> Result<()> {
        for (key, t) in tensors {
            match key.as_str() {
                "sum" => self.sum = t,
                "steps" => self.steps = t,
                other => panic!("unexpected tensor {other}"),
            }
        }
        Ok(())
    }
}

/// Noise on every training batch, from both of the batch's generators: torch's (as a PyTorch
/// Mixup draws) and Torchlight's own.
fn noisy(batch: (Tensor, Tensor), ctx: &mut BatchContext) -> Result<(Tensor, Tensor)> {
    let (x, y) = batch;
    let noise = ctx.with_torch_generator(|| Tensor::randn_like(&x) * 0.05)?;
    let shift: f64 = rand::Rng::random_range(ctx.rng(), -0.1..0.1);
    Ok((x + noise + shift, y))
}

/// What a blob run adds to the plain loop: the tensor-state callback and the batch transform.
type Extras = Option<Rc<RefCell<Option<(Tensor, Tensor)>>>>;

/// Trains a fresh seeded Mlp on the blobs for 3 epochs (5 batches each, accumulation 2, so 3
/// steps per epoch) in `run`, with checkpoints every 2 steps; `stop` interrupts it; `extras`
/// adds [`RunningSum`] (its final tensors written there) and the [`noisy`] batch transform.
fn blob_run(
    run: &Path,
    stop: Option<StopAt>,
    resume: bool,
    extras: Extras,
) -> (Result<FitSummary>, Vec<(String, Tensor)>) {
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
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
    if let Some(out) = extras {
        builder = builder.callback(RunningSum::new(out)).batch_transform(noisy);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    let task = Classification::new(3).with_top_k(2);
    let result = trainer.fit(&mut model, &task, &mut optimizer, &mut train, Some(&mut val));
    (result, weights(&model))
}

#[test]
fn a_user_model_resumes_mid_epoch_exactly_after_an_interrupt_or_a_crash() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (straight, want) = blob_run(&tmp.path().join("straight"), None, false, None);
    let straight = straight.unwrap();
    assert_eq!((straight.epochs, straight.global_step), (3, 9));

    // Ctrl-C at step 4 (the middle of epoch 2): the step finishes, `last` is saved there.
    let run = tmp.path().join("interrupted");
    let (err, _) = blob_run(&run, Some(StopAt { at: 4, signal: true }), false, None);
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
    let (resumed, got) = blob_run(&run, None, true, None);
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
    let (err, _) = blob_run(&run, Some(StopAt { at: 7, signal: false }), false, None);
    assert!(err.unwrap_err().to_string().contains("simulated crash"));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    assert_eq!(saved.meta.progress.global_step, 6);
    let (resumed, got) = blob_run(&run, None, true, None);
    assert_eq!(resumed.unwrap().global_step, 9);
    assert_same_weights(&want, &got);
}

#[test]
fn a_callbacks_tensors_and_a_batch_transform_resume_mid_epoch_bit_for_bit() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let straight_out = Rc::new(RefCell::new(None));
    let (straight, want) = blob_run(&tmp.path().join("straight"), None, false, Some(straight_out.clone()));
    assert_eq!(straight.unwrap().global_step, 9);
    let (plain, plain_weights) = blob_run(&tmp.path().join("plain"), None, false, None);
    plain.unwrap();
    assert!(
        want.iter().zip(&plain_weights).any(|((_, a), (_, b))| !a.equal(b)),
        "the batch transform changes what is trained on"
    );

    // Ctrl-C at step 4, the middle of epoch 2: the callback's tensors go into the checkpoint.
    let run = tmp.path().join("interrupted");
    let out = Rc::new(RefCell::new(None));
    let (err, _) = blob_run(&run, Some(StopAt { at: 4, signal: true }), false, Some(out.clone()));
    assert!(matches!(err.unwrap_err(), TrainError::Interrupted { .. }));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let tensors: std::collections::BTreeMap<String, Tensor> = saved.loop_tensors().into_iter().collect();
    assert_eq!(tensors["callbacks.RunningSum.steps"].int64_value(&[]), 4, "saved at step 4");
    assert_eq!(saved.meta.loop_state["callback_tensors"]["RunningSum"], serde_json::json!(["sum", "steps"]));
    assert!(out.borrow().is_none(), "the interrupted run did not end");

    let (resumed, got) = blob_run(&run, None, true, Some(out.clone()));
    assert_eq!(resumed.unwrap().global_step, 9);
    assert_same_weights(&want, &got);
    let (sum, steps) = out.borrow_mut().take().unwrap();
    let (want_sum, want_steps) = straight_out.borrow_mut().take().unwrap();
    assert_eq!(steps.int64_value(&[]), 9);
    assert!(steps.equal(&want_steps) && sum.equal(&want_sum), "the callback's tensors resumed bit for bit");
}

/// Turns every `Dropout` of the model off from epoch `from` on, through the mutable model
/// view a callback gets.
struct DropoutOffFrom {
    from: u64,
}

impl Callback for DropoutOffFrom {
    fn name(&self) -> String {
        "DropoutOffFrom".into()
    }
    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if ctx.position.epoch >= self.from {
            visit_modules_mut(ctx.model_mut(), &mut |_, m| {
                if let Some(d) = m.as_any_mut().downcast_mut::<Dropout>() {
                    d.p = 0.0;
                }
            });
        }
        Ok(())
    }
}

#[test]
fn a_callback_changes_a_layer_of_the_model_it_trains() {
    let _lock = torch_rng_lock();
    seed_everything(3);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let mut trainer = Trainer::builder()
        .epochs(2)
        .progress(Progress::quiet())
        .callback(DropoutOffFrom { from: 1 })
        .build()
        .unwrap();
    let mut train = blob_loader(16, true, 0);
    trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap();
    assert_eq!(model.drop.p, 0.0, "the callback reached the layer through Context::model_mut");
    let x = Tensor::randn([5, 4], (Kind::Float, Device::Cpu));
    assert!(model.forward_t(&x, true).equal(&model.forward_t(&x, false)), "no dropout left");
}

#[test]
fn a_batch_transform_for_another_batch_type_is_refused_before_training() {
    let _lock = torch_rng_lock();
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let wrong = |b: Vec<Tensor>, _: &mut BatchContext| -> Result<Vec<Tensor>> { Ok(b) };
    let mut trainer =
        Trainer::builder().progress(Progress::quiet()).seed(1).batch_transform(wrong).build().unwrap();
    let mut train = blob_loader(16, true, 0);
    let err = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("batch_transform") && text.contains("fit trains on batches of type ("), "{text}");
}

#[test]
fn a_user_model_exports_to_torchscript_after_training() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    seed_everything(3);
    let mut model = Mlp::new(4, 8, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let mut train = blob_loader(24, true, 0);
    let mut trainer = Trainer::builder().epochs(2).progress(Progress::quiet()).build().unwrap();
    trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap();
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
    let fit = |model: &mut Linear,
               task: &dyn Task<Linear, (Tensor, Tensor)>,
               train: &mut dyn BatchSource<(Tensor, Tensor)>,
               val: &mut dyn BatchSource<(Tensor, Tensor)>,
               epochs| {
        let mut optimizer = adamw(model, 5e-2);
        let mut trainer = Trainer::builder().epochs(epochs).progress(Progress::quiet()).build().unwrap();
        trainer.fit(model, task, &mut optimizer, train, Some(val)).unwrap()
    };

    // Classification: three separable blobs.
    let mut model = Linear::new(4, 3, true);
    let (mut train, mut val) = (blob_loader(96, true, 0), blob_loader(48, false, 0));
    let s = fit(&mut model, &Classification::new(3), &mut train, &mut val, 15);
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
    let mut model = Linear::new(4, 4, true);
    let s = fit(&mut model, &MultiLabel::new(), &mut train, &mut val, 15);
    let (f1, map) = (last_val(&s, "val_f1"), last_val(&s, "val_map"));
    assert!(f1 > 0.9 && map > 0.95, "multi-label val f1 {f1}, mAP {map}");

    // Regression: two outputs, linear in the inputs.
    let w = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0, 0.0, 1.0, -1.0, 2.0]).view([4, 2]);
    let y = x.matmul(&w) + 0.5;
    let (mut train, mut val) = (
        pairs_loader(&x.narrow(0, 0, 112), &y.narrow(0, 0, 112), true),
        pairs_loader(&x.narrow(0, 112, 48), &y.narrow(0, 112, 48), false),
    );
    let mut model = Linear::new(4, 2, true);
    let s = fit(&mut model, &Regression::new(RegressionLoss::Huber { delta: 1.0 }), &mut train, &mut val, 40);
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
    fn on_train_batch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        self.seen.borrow_mut().push(format!("batch_start {}", ctx.position.batch));
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
    let mut model = Linear::new(4, 3, true);
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
    let s =
        trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val)).unwrap();
    assert_eq!(s.epochs, 3);
    assert_eq!(s.stopped_early.as_deref(), Some("early stopping: no better val_loss for 2 epochs"));
    let seen = seen.borrow();
    assert_eq!(
        seen[..11],
        [
            "train_start",
            "epoch_start 0",
            "batch_start 0",
            "batch_end false",
            "batch_start 1",
            "before_step grads=true",
            "batch_end true",
            "batch_start 2",
            "before_step grads=true",
            "batch_end true",
            "val_end val_loss,val_acc,val_top3",
        ]
    );
    assert_eq!(seen[11], "epoch_end 1 history 1");
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

/// Rank 0 of a two-rank world whose collectives leave every tensor as it is (the other rank
/// holds the same values).
struct EchoWorld;

impl Distributed for EchoWorld {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn broadcast_parameters(&mut self, _: &dyn Module) -> Result<()> {
        Ok(())
    }
    fn sync_gradients(&mut self, _: &dyn Module) -> Result<()> {
        Ok(())
    }
    fn all_reduce_sum(&self, tensors: &[Tensor]) -> Result<()> {
        for t in tensors {
            let _ = t.shallow_clone().g_mul_scalar_(2.0);
        }
        Ok(())
    }
    fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        Ok(vec![tensor.copy(), tensor.copy()])
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
}

#[test]
fn out_of_memory_on_one_rank_is_reported_without_a_probe_the_other_ranks_would_not_join() {
    let _lock = torch_rng_lock();
    let mut model = Linear::new(4, 3, true);
    let mut optimizer = adamw(&model, 1e-2);
    let mut train = blob_loader(16, false, 0);
    let mut trainer =
        Trainer::builder().progress(Progress::quiet()).distributed(Box::new(EchoWorld)).build().unwrap();
    let err = trainer.fit(&mut model, &Hungry { fits: 3 }, &mut optimizer, &mut train, None).unwrap_err();
    match &err {
        TrainError::OutOfMemory { batch_size, fits, searched, .. } => {
            assert_eq!((*batch_size, *fits, *searched), (8, None, false), "{err}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("not searched") && text.contains("tune batch-size"), "{text}");
    // The same failure in one process searches it.
    let mut trainer = Trainer::builder().progress(Progress::quiet()).build().unwrap();
    let err = trainer.fit(&mut model, &Hungry { fits: 3 }, &mut optimizer, &mut train, None).unwrap_err();
    assert!(matches!(err, TrainError::OutOfMemory { fits: Some(2), searched: true, .. }), "{err}");
}

/// Classification over a BatchNorm's `[N, 3, 1, 1]` output, flattened to logits.
struct NormedLogits;

impl Task<torchlight_nn::BatchNorm2d, (Tensor, Tensor)> for NormedLogits {
    fn step(
        &self,
        model: &torchlight_nn::BatchNorm2d,
        batch: &(Tensor, Tensor),
        stage: Stage,
    ) -> Result<StepOutput> {
        let logits = model.forward_t(&batch.0, stage == Stage::Train).flatten(1, -1);
        Ok(StepOutput {
            loss: logits.cross_entropy_for_logits(&batch.1),
            output: logits,
            target: batch.1.shallow_clone(),
        })
    }
}

/// A training batch of one through a BatchNorm over a 1x1 map is refused as PyTorch refuses
/// it, naming the batch, instead of filling the running statistics with NaN; a batch of two
/// trains.
#[test]
fn a_batch_norm_left_one_value_per_channel_stops_the_step_with_the_batch_named() {
    // Nothing drawn from torch's generator, and the lock keeps this test out of the seeded
    // tests' way all the same.
    let _lock = torch_rng_lock();
    let model = torchlight_nn::BatchNorm2d::new(3, torchlight_nn::BatchNormConfig::default());
    let batch = |n: i64| {
        let x = Tensor::arange(n * 3, (Kind::Float, Device::Cpu)).view([n, 3, 1, 1]);
        (x, Tensor::zeros([n], (Kind::Int64, Device::Cpu)))
    };
    let mut runner = StepRunner::new(StepConfig::default(), Device::Cpu).unwrap();
    let err = runner.forward_backward(&model, &NormedLogits, &batch(1)).unwrap_err();
    match &err {
        TrainError::BatchNormSingleValue { batch_size, input_shape, layer_input } => {
            assert_eq!(
                (*batch_size, input_shape.as_slice(), layer_input.as_slice()),
                (1, &[1i64, 3, 1, 1][..], &[1i64, 3, 1, 1][..])
            );
        }
        other => panic!("expected BatchNormSingleValue, got {other:?}"),
    }
    assert!(err.to_string().contains("Expected more than 1 value per channel when training"), "{err}");
    let var = model.running_var.as_ref().unwrap();
    assert!(bool::try_from(var.isfinite().all()).unwrap(), "the running statistics stayed finite");
    runner.forward_backward(&model, &NormedLogits, &batch(2)).unwrap();
}

/// A model with two inputs, as a text model has (ids and lengths): features and a per-sample
/// scale. Its one-tensor forward is the scale-1 case.
#[derive(Debug, torchlight_nn::Module)]
struct Scaled {
    fc: Linear,
}

impl ModuleT for Scaled {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.fc.forward_t(x, train)
    }
}

impl torchlight_nn::MultiInput for Scaled {
    fn forward_inputs(&self, inputs: &torchlight_nn::Inputs, train: bool) -> torchlight_nn::Result<Tensor> {
        let (x, scale) = (inputs.get("x")?, inputs.get("scale")?);
        Ok(self.fc.forward_t(&(x * scale.unsqueeze(1)), train))
    }
}

/// `(Inputs, targets)` batches held in memory: a BatchSource of a user's own.
struct InputBatches(Vec<(torchlight_nn::Inputs, Tensor)>);

struct InputIter<'a>(std::slice::Iter<'a, (torchlight_nn::Inputs, Tensor)>);

impl Iterator for InputIter<'_> {
    type Item = Result<(torchlight_nn::Inputs, Tensor)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(i, y)| Ok((i.map(Tensor::shallow_clone), y.shallow_clone())))
    }
}

impl EpochBatches<(torchlight_nn::Inputs, Tensor)> for InputIter<'_> {
    fn stall(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl BatchSource<(torchlight_nn::Inputs, Tensor)> for InputBatches {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn batches(
        &mut self,
        _: u64,
        first: usize,
    ) -> Box<dyn EpochBatches<(torchlight_nn::Inputs, Tensor)> + '_> {
        Box::new(InputIter(self.0[first.min(self.0.len())..].iter()))
    }
}

#[test]
fn a_model_with_two_inputs_trains_through_the_same_task() {
    let _lock = torch_rng_lock();
    seed_everything(8);
    let batch = |seed: i64, names: &[&str]| {
        let blobs = Blobs::new(16, 3, seed);
        let x = Tensor::from_slice(&blobs.x.concat()).view([16, 4]);
        // The scale undoes a per-sample shrink of the features: only both inputs together
        // show the classes.
        let scale = Tensor::rand([16], (Kind::Float, Device::Cpu)) + 0.5;
        let mut inputs = torchlight_nn::Inputs::new();
        for &name in names {
            inputs = match name {
                "x" => inputs.with("x", &x / scale.unsqueeze(1)),
                _ => inputs.with("scale", scale.shallow_clone()),
            };
        }
        (inputs, Tensor::from_slice(&blobs.y))
    };
    let both = ["x", "scale"];
    let mut train = InputBatches((0..6).map(|s| batch(s, &both)).collect());
    let mut val = InputBatches((6..8).map(|s| batch(s, &both)).collect());
    let mut model = Scaled { fc: Linear::new(4, 3, true) };
    let mut optimizer = adamw(&model, 5e-2);
    let mut trainer = Trainer::builder().epochs(15).progress(Progress::quiet()).build().unwrap();
    let s =
        trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val)).unwrap();
    let acc = last_val(&s, "val_acc");
    assert!(acc > 0.9, "val_acc {acc}");

    let mut missing = InputBatches(vec![batch(9, &["x"])]);
    let mut trainer = Trainer::builder().progress(Progress::quiet()).build().unwrap();
    let err =
        trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut missing, None).unwrap_err();
    assert_eq!(err.to_string(), "the batch has no input `scale`; it has `x`");
}

/// The blobs with samples `bad` failing, as unreadable files do.
struct Holey {
    blobs: Blobs,
    bad: std::ops::Range<usize>,
}

impl Dataset for Holey {
    type Item = (Array, i64);
    fn len(&self) -> usize {
        self.blobs.len()
    }
    fn get(&self, index: usize, rng: &mut Rng) -> torchlight_data::Result<(Array, i64)> {
        if self.bad.contains(&index) {
            return Err(torchlight_data::DataError::Sample {
                index,
                path: None,
                message: "unreadable".into(),
            });
        }
        self.blobs.get(index, rng)
    }
}

/// Two epochs over 40 blobs in batches of 8 (shuffled, 2 workers) where samples 8..16 fail,
/// under `ErrorPolicy::Skip`; with the batch transform, so the batch index each batch is given
/// must match too; checkpoints every 2 steps.
fn holey_run(run: &Path, stop: Option<StopAt>, resume: bool) -> (Result<FitSummary>, Vec<(String, Tensor)>) {
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let holey = Holey { blobs: Blobs::new(40, 3, 1), bad: 8..16 };
    // Unshuffled, batch 1 (samples 8..16) fails whole in both epochs.
    let mut train = DataLoader::builder(holey)
        .batch_size(8)
        .num_workers(2)
        .seed(5)
        .on_error(torchlight_data::ErrorPolicy::Skip)
        .build()
        .unwrap();
    let mut builder = Trainer::builder()
        .epochs(2)
        .seed(11)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(2)
        .batch_transform(noisy);
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    let result = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None);
    (result, weights(&model))
}

#[test]
fn a_batch_left_out_by_the_skip_policy_keeps_the_resume_position_exact() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (straight, want) = holey_run(&tmp.path().join("straight"), None, false);
    assert_eq!(straight.unwrap().global_step, 8, "4 batches of 5 per epoch are yielded");
    // A crash at step 3 resumes from the step-2 checkpoint. Step 2 is the batch at sampler
    // index 2 (batch 1 was left out): the checkpoint resumes at index 3, not at the count of
    // batches received.
    let run = tmp.path().join("crashed");
    let (err, _) = holey_run(&run, Some(StopAt { at: 3, signal: false }), false);
    assert!(err.unwrap_err().to_string().contains("simulated crash"));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let p = saved.meta.progress;
    assert_eq!((p.epoch, p.batch, p.global_step), (0, 3, 2), "the sampler's position");
    let (resumed, got) = holey_run(&run, None, true);
    assert_eq!(resumed.unwrap().global_step, 8);
    assert_same_weights(&want, &got);
}

/// A blob run (3 epochs of 3 steps, checkpoints every 2 steps) with the per-step learning
/// rate logged (a StepLR scheduler stepped per optimizer step makes it change).
fn lr_logged_run(run: &Path, stop: Option<StopAt>, resume: bool) -> Result<FitSummary> {
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let scheduler = torchlight_optim::StepLR::new(&mut optimizer, 1, 0.5).unwrap();
    let mut train = blob_loader(40, true, 0);
    let mut builder = Trainer::builder()
        .epochs(3)
        .accumulation(2)
        .seed(11)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(2)
        .lr_scheduler(Box::new(scheduler), Interval::Step)
        .callback(LearningRateMonitor::new(Interval::Step));
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None)
}

#[test]
fn a_resumed_run_keeps_the_per_step_points_tensorboard_showed_before_the_checkpoint() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    lr_logged_run(&tmp.path().join("straight"), None, false).unwrap();
    let (_, want) = crate::tfevents::read_back(&tmp.path().join("straight"));
    assert_eq!(want["lr/group0"].iter().map(|p| p.0).collect::<Vec<_>>(), (1..=9).collect::<Vec<i64>>());
    // A crash at step 5 (epoch 2), after the step-4 checkpoint: epoch 1 is done, steps 2 to 4
    // are before the checkpoint (kept), step 5 after it (dropped, then logged again).
    let run = tmp.path().join("crashed");
    let err = lr_logged_run(&run, Some(StopAt { at: 5, signal: false }), false).unwrap_err();
    assert!(err.to_string().contains("simulated crash"), "{err}");
    lr_logged_run(&run, None, true).unwrap();
    let (_, got) = crate::tfevents::read_back(&run);
    assert_eq!(got["lr/group0"], want["lr/group0"], "every step's lr once, as the straight run's");
    assert_eq!(got["loss/train"].iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 3]);
}

/// A blob run with a ReduceLROnPlateau on `val_loss` in `max` mode (so each better epoch
/// counts as bad: patience 0 cuts the lr after it), checkpoints every 2 steps. Returns the
/// summary, the weights and the plateau's final state.
fn plateau_run(
    run: &Path,
    stop: Option<StopAt>,
    resume: bool,
) -> (Result<FitSummary>, Vec<(String, Tensor)>, Option<torchlight_optim::ReduceLROnPlateauState>) {
    use torchlight_optim::{PlateauMode, ReduceLROnPlateau, ReduceLROnPlateauConfig};
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let config =
        ReduceLROnPlateauConfig::default().with_mode(PlateauMode::Max).with_patience(0).with_factor(0.5);
    let plateau = ReduceLROnPlateau::new(&optimizer, config).unwrap();
    let mut train = blob_loader(40, true, 0);
    let mut val = blob_loader(24, false, 0);
    let mut builder = Trainer::builder()
        .epochs(4)
        .accumulation(2)
        .seed(11)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(2)
        .plateau_scheduler(plateau, "val_loss");
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    let result = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val));
    let state = trainer.plateau_scheduler().map(|(p, _)| p.state_dict());
    (result, weights(&model), state)
}

#[test]
fn reduce_lr_on_plateau_steps_on_the_monitored_metric_and_resumes_exactly() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (straight, want, want_state) = plateau_run(&tmp.path().join("straight"), None, false);
    let straight = straight.unwrap();
    let lrs: Vec<f64> = straight.history.iter().map(|r| r.lr).collect();
    assert!(lrs.windows(2).any(|w| w[1] < w[0]), "the plateau cut the lr: {lrs:?}");
    for (r, next) in straight.history.iter().zip(&straight.history[1..]) {
        // mode max on a loss: the lr is halved after each epoch whose val_loss is lower than
        // every epoch's before it, kept otherwise.
        let best_before = straight.history[..r.epoch - 1]
            .iter()
            .map(|e| e.get("val_loss").unwrap())
            .fold(f64::MIN, f64::max);
        let better = r.get("val_loss").unwrap() > best_before * (1.0 + 1e-4) || r.epoch == 1;
        let expected = if better { r.lr } else { r.lr * 0.5 };
        assert!((next.lr - expected).abs() <= 1e-15, "epoch {} lr {} then {}", r.epoch, r.lr, next.lr);
    }
    // A crash at step 5 (epoch 2), resumed from the step-4 checkpoint: the plateau's state
    // (best, bad epochs, steps) and the lrs it set come back.
    let run = tmp.path().join("crashed");
    let (err, _, _) = plateau_run(&run, Some(StopAt { at: 5, signal: false }), false);
    assert!(err.unwrap_err().to_string().contains("simulated crash"));
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    assert_eq!(saved.meta.loop_state["plateau"]["last_epoch"], 1, "stepped once, after epoch 1");
    let (resumed, got, got_state) = plateau_run(&run, None, true);
    let resumed = resumed.unwrap();
    assert_same_weights(&want, &got);
    assert_eq!(got_state, want_state);
    assert_eq!(resumed.history.iter().map(|r| r.lr).collect::<Vec<_>>(), lrs);
}

#[test]
fn reduce_lr_on_plateau_refuses_an_lr_scheduler_beside_it_and_a_metric_never_logged() {
    use torchlight_optim::{ReduceLROnPlateau, ReduceLROnPlateauConfig};
    let _lock = torch_rng_lock();
    seed_everything(3);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let plateau = || ReduceLROnPlateau::new(&optimizer, ReduceLROnPlateauConfig::default()).unwrap();
    let step = torchlight_optim::StepLR::new(&mut adamw(&model, 1e-2), 1, 0.5).unwrap();
    let both = Trainer::builder()
        .lr_scheduler(Box::new(step), Interval::Epoch)
        .plateau_scheduler(plateau(), "val_loss")
        .build();
    let err = both.err().expect("refused").to_string();
    assert!(err.contains("plateau_scheduler") && err.contains("StepLR"), "{err}");
    // No validation data: `val_loss` is never logged.
    let mut trainer = Trainer::builder()
        .progress(Progress::quiet())
        .plateau_scheduler(plateau(), "val_loss")
        .build()
        .unwrap();
    let mut train = blob_loader(16, false, 0);
    let err = trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("val_loss") && msg.contains("train_loss"), "{msg}");
}
