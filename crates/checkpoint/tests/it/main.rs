//! Integration tests of torchlight-checkpoint (one binary: each test binary links libtorch).

mod corrupt;
mod kill;
mod manager;
mod python;
mod resume;
mod retention;
mod update;

use rand::Rng as _;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use tch::{Kind, Tensor};
use torchlight_data::{Array, DataError, DataLoader, Dataset, DefaultCollate};
use torchlight_nn::*;
use torchlight_optim::{
    AdamConfig, AdamW, GradScaler, GradScalerConfig, LrScheduler, Optimizer, ParamGroup, StepLR,
};
use torchlight_tensor::seed::Rng;

/// Tests that create models or train draw from torch's global generator; they hold this lock
/// so the harness's threads do not interleave their draws.
pub(crate) fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts this test binary again, running only `test` with the env var `env` naming `dir`;
/// waits until `ready()` holds (a child that exits first fails the test), lets it run
/// `delay_ms` more, then kills it with SIGKILL: no destructor, no clean-up, as in a crash or an
/// OOM kill. There is no deadline: a child that never gets ready hangs the test rather than
/// failing it on a slow machine.
pub(crate) fn kill_child_when(
    test: &str,
    env: &str,
    dir: &std::path::Path,
    ready: impl Fn() -> bool,
    delay_ms: u64,
) {
    use std::time::Duration;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads", "1"])
        .env(env, dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child running {test} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A fresh folder under the system temp dir, removed when dropped (also when the test fails).
pub(crate) struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("tl-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// 48 tiny images in 3 classes with random noise drawn from the per-sample generator.
pub(crate) struct Toy;

impl Dataset for Toy {
    type Item = (Array, i64);
    fn len(&self) -> usize {
        48
    }
    fn get(&self, index: usize, rng: &mut Rng) -> Result<Self::Item, DataError> {
        let label = (index % 3) as i64;
        let pixels: Vec<f32> = (0..3 * 8 * 8)
            .map(|p| if p / 64 == label as usize { 1.0 } else { 0.0 } + rng.random::<f32>() * 0.5)
            .collect();
        Ok((Array::from_f32(pixels, vec![3, 8, 8]).unwrap(), label))
    }
}

/// A small training setup: model with BatchNorm and Dropout, AdamW, StepLR, GradScaler.
pub(crate) struct Run {
    pub model: Sequential,
    pub optimizer: AdamW,
    pub scheduler: StepLR,
    pub scaler: GradScaler,
    pub loader: DataLoader<Toy, DefaultCollate>,
    pub step: u64,
}

impl Run {
    pub fn new(workers: usize) -> Run {
        let model = Sequential::new()
            .add(Conv2d::new(3, 6, 3, Conv2dConfig::default().with_padding(1)))
            .add(BatchNorm2d::new(6, BatchNormConfig::default()))
            .add(ReLU)
            .add(Dropout { p: 0.3 })
            .add(AdaptiveAvgPool2d { output_size: [1, 1] })
            .add(Flatten::default())
            .add(Linear::new(6, 3, true));
        let mut optimizer = AdamW::new(vec![ParamGroup::new(
            named_parameters(&model),
            AdamConfig::new(0.01).with_weight_decay(0.05),
        )])
        .unwrap();
        let scheduler = StepLR::new(&mut optimizer, 1, 0.7).unwrap();
        let scaler = GradScaler::new(GradScalerConfig::default()).unwrap();
        let loader = DataLoader::builder(Toy)
            .batch_size(8)
            .shuffle(true)
            .seed(7)
            .num_workers(workers)
            .build()
            .unwrap();
        Run { model, optimizer, scheduler, scaler, loader, step: 0 }
    }

    pub fn train_epoch(&mut self, epoch: u64) {
        let loss_fn = CrossEntropyLoss::new();
        for batch in self.loader.epoch(epoch) {
            let (x, y) = batch.unwrap();
            let loss = loss_fn.forward(&self.model.forward_t(&x, true), &y).unwrap();
            self.scaler.scale(&loss).backward();
            self.scaler.step(&mut self.optimizer).unwrap();
            self.scaler.update().unwrap();
            self.optimizer.zero_grad().unwrap();
            self.step += 1;
        }
        self.scheduler.step(&mut self.optimizer).unwrap();
    }

    /// Every tensor of model and optimizer, for exact comparison.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let mut all = state_dict(&self.model);
        all.extend(self.optimizer.state_dict().tensors.into_iter().map(|(k, t)| (format!("opt.{k}"), t)));
        all
    }
}

pub(crate) fn assert_identical(a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len());
    for ((ka, ta), (kb, tb)) in a.iter().zip(b) {
        assert_eq!(ka, kb);
        assert_eq!(ta.kind(), tb.kind(), "{ka}");
        assert!(ta.to_kind(Kind::Double).equal(&tb.to_kind(Kind::Double)), "{ka} differs");
    }
}
