//! Shared by the tests and the ranks they start: launching ranks, a world of one, small
//! models with deterministic weights, and data.

use rand::Rng as _;
use std::path::Path;
use std::time::Duration;
use tch::{Device, Kind, Tensor};
use torchlight_distributed::{InitOptions, LaunchOutcome, Launcher, ProcessGroup, TcpStore};
use torchlight_nn::{
    named_tensors, AdaptiveAvgPool2d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Flatten, Linear,
    Module, ReLU, Sequential,
};
use torchlight_tensor::seed::rng_from_seed;

/// The environment variable naming the scenario a rank runs (see `ranks.rs`).
pub const SCENARIO: &str = "TL_DIST_SCENARIO";
/// The folder where ranks write their results.
pub const OUT: &str = "TL_DIST_OUT";
/// The collective timeout ranks use, in milliseconds.
pub const TIMEOUT_MS: &str = "TL_DIST_TIMEOUT_MS";
/// The timeout the `hangs` scenario sets once its ranks have joined, in milliseconds.
pub const HANG_TIMEOUT_MS: &str = "TL_DIST_HANG_TIMEOUT_MS";

/// The libtest arguments that run only `ranks::entry` in this binary.
pub fn rank_args() -> [&'static str; 5] {
    ["ranks::entry", "--exact", "--nocapture", "--test-threads=1", "-q"]
}

/// A launcher for `nproc` ranks of this test binary running `scenario`, writing into `out`.
/// The deadline only keeps a broken test from hanging the suite.
pub fn launcher(scenario: &str, nproc: usize, out: &Path) -> Launcher {
    Launcher::new(std::env::current_exe().expect("test binary path"), nproc)
        .args(rank_args())
        .env(SCENARIO, scenario)
        .env(OUT, out)
        .echo(false)
        .deadline(Duration::from_secs(240))
}

/// Launches and returns the outcome.
pub fn launch(scenario: &str, nproc: usize, out: &Path) -> LaunchOutcome {
    launcher(scenario, nproc, out).run().expect("the launcher starts")
}

/// Every rank's status and last lines, for assertion messages.
pub fn describe(outcome: &LaunchOutcome) -> String {
    let mut s = String::new();
    for r in &outcome.ranks {
        s.push_str(&format!("--- rank {} ({}, terminated: {})\n", r.rank, r.status, r.terminated));
        for line in &r.output {
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// One rank's output as one string.
pub fn output_of(outcome: &LaunchOutcome, rank: usize) -> String {
    outcome.ranks[rank].output.join("\n")
}

/// A process group of one rank over a store on a free port, in this process.
pub fn world_of_one() -> ProcessGroup {
    let options = InitOptions::default().with_timeout(Duration::from_secs(60));
    let store = TcpStore::host(0, 1, options.timeout).expect("store");
    ProcessGroup::with_store(&store, 0, 1, &options).expect("group of one")
}

/// Sets every tensor of `model` (parameters and buffers alike, keeping BatchNorm's counters
/// and variances sensible) from a seeded generator, so no test touches torch's global one.
pub fn init_deterministic(model: &dyn Module, seed: u64) {
    let mut rng = rng_from_seed(seed);
    let _guard = torchlight_tensor::no_grad();
    for (name, t, _) in named_tensors(model) {
        let n = t.numel();
        let values: Vec<f64> = if name.ends_with("running_var") {
            (0..n).map(|_| rng.random_range(0.5..1.5)).collect()
        } else {
            (0..n).map(|_| rng.random_range(-0.5..0.5)).collect()
        };
        let filled = Tensor::from_slice(&values).to_kind(t.kind()).view(t.size().as_slice());
        t.shallow_clone().copy_(&filled);
        if name.ends_with("num_batches_tracked") {
            let _ = t.shallow_clone().fill_(0);
        }
    }
}

/// `[n, c, h, w]` inputs and `n` labels in `0..classes`, from a seed.
pub fn data(seed: u64, n: usize, shape: [i64; 3], classes: i64) -> (Tensor, Tensor) {
    let mut rng = rng_from_seed(seed);
    let numel = n * (shape[0] * shape[1] * shape[2]) as usize;
    let xs: Vec<f32> = (0..numel).map(|_| rng.random_range(-1.0..1.0)).collect();
    let ys: Vec<i64> = (0..n).map(|_| rng.random_range(0..classes)).collect();
    (Tensor::from_slice(&xs).view([n as i64, shape[0], shape[1], shape[2]]), Tensor::from_slice(&ys))
}

/// Conv -> ReLU -> Flatten -> Linear on `[N, 2, 4, 4]` inputs, 3 classes; no BatchNorm, so
/// data-parallel training equals one process on the concatenated batch.
pub fn conv_mlp() -> Sequential {
    Sequential::new()
        .add(Conv2d::new(2, 4, 3, Conv2dConfig::default().with_padding(1)))
        .add(ReLU)
        .add(Flatten::default())
        .add(Linear::new(4 * 4 * 4, 3, true))
}

/// Conv -> BatchNorm -> ReLU -> pool -> Flatten -> Linear on `[N, 3, 6, 6]`, 3 classes, with
/// the same keys as `nn.Sequential` in `tests/fixtures/make_ddp.py`.
pub fn conv_bn() -> Sequential {
    Sequential::new()
        .add(Conv2d::new(3, 4, 3, Conv2dConfig::default().with_padding(1)))
        .add(BatchNorm2d::new(4, BatchNormConfig::default()))
        .add(ReLU)
        .add(AdaptiveAvgPool2d { output_size: [1, 1] })
        .add(Flatten::default())
        .add(Linear::new(4, 3, true))
}

/// The model's parameters and buffers, by key, on the CPU.
pub fn state(model: &dyn Module) -> Vec<(String, Tensor)> {
    named_tensors(model).into_iter().map(|(n, t, _)| (n, t.detach().to_device(Device::Cpu).copy())).collect()
}

/// The largest absolute difference between two states with the same keys, in any order.
pub fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len(), "states with different sizes");
    let sorted = |s: &[(String, Tensor)]| {
        let mut v: Vec<(String, Tensor)> = s.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let (a, b) = (sorted(a), sorted(b));
    a.iter()
        .zip(&b)
        .map(|((na, ta), (nb, tb))| {
            assert_eq!(na, nb);
            (ta.to_kind(Kind::Double) - tb.to_kind(Kind::Double)).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}
