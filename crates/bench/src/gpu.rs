//! `torchlight-bench gpu ...`: the Rust side of the GPU proof kit (`cargo xtask gpu-kit`,
//! `xtask/gpukit/run.sh`).
//!
//! - `gpu probe --out FILE`: what `cuda_status()` finds (through the dlopen of
//!   `libtorch_cuda.so`), as JSON.
//! - `gpu run --data DIR --out FILE --require-cuda yes|no`: the GPU rows (resnet50 training
//!   step in fp32 and AMP, pinned and pageable host-to-device bandwidth, GradScaler on a real
//!   fp16 overflow, data-stall share at 224 px), as a [`BenchFile`]. Without CUDA every
//!   row is `skipped: no CUDA`, unless `--require-cuda yes` (the machine has a GPU), where that
//!   is a failure. Each row is measured on its own: a failing row is reported and the rest run.
//!   `pytorch_gpu_bench.py` writes the same file for PyTorch.
//! - `gpu summarize`, `gpu validate`, `gpu record`: the report (`gpu_report.rs`).

use crate::args::{options, required};
use crate::bench_file::{write_json, BenchFile, Row, NO_CUDA};
use crate::gpu_report;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};
use torchlight_data::DataLoader;
use torchlight_nn::{named_parameters, resnet_by_name_on, CrossEntropyLoss, LayerOptions, ModuleT, ResNet};
use torchlight_optim::{AdamConfig, AdamW, GradScaler, GradScalerConfig, Optimizer, ParamGroup};
use torchlight_tensor::{autocast, autocast_if, cuda_status, empty_pinned, to_device_non_blocking};
use torchlight_vision::{
    Compose, ImageFolder, Normalize, RandomHorizontalFlip, RandomResizedCrop, ToTensor, IMAGENET_MEAN,
    IMAGENET_STD,
};

/// How much the rows measure: [`Plan::GPU`], or the toy sizes of `Plan::SMOKE` (test builds
/// only), with which the unit tests run every row on the CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The model of the training rows (`resnet50`; the smoke plan's is smaller).
    pub model: &'static str,
    /// Images per batch of the resnet50 rows.
    pub batch: i64,
    /// Side of their images.
    pub image_size: i64,
    /// Untimed steps first.
    pub warmup: usize,
    /// Timed rounds.
    pub rounds: usize,
    /// Steps per round.
    pub steps: usize,
    /// Size of the copied buffer.
    pub copy_mib: i64,
    /// Images generated for the data-stall row.
    pub images: usize,
}

impl Plan {
    /// What the kit measures on a GPU.
    pub const GPU: Plan = Plan {
        model: "resnet50",
        batch: 128,
        image_size: 224,
        warmup: 5,
        rounds: 3,
        steps: 10,
        copy_mib: 256,
        images: 2048,
    };
    /// Toy sizes that run every row in seconds (on the CPU, in tests).
    #[cfg(test)]
    pub const SMOKE: Plan = Plan {
        model: "resnet18",
        batch: 2,
        image_size: 16,
        warmup: 1,
        rounds: 1,
        steps: 1,
        copy_mib: 1,
        images: 4,
    };
}
/// The row names and descriptions, in run order. `data_stall_224` is Torchlight's only.
pub const ROWS: &[(&str, &str)] = &[
    (
        "resnet50_train_fp32",
        "resnet50 training step, batch 128, 224 px, float32 (convolutions in TF32, libtorch's default): zero_grad, forward, cross-entropy, backward, fused AdamW",
    ),
    (
        "resnet50_train_amp",
        "the same step under fp16 autocast with GradScaler (the scale and Inf flag go to the fused AdamW kernel)",
    ),
    ("h2d_pageable", "host-to-device copy of 256 MiB from pageable memory (blocking)"),
    ("h2d_pinned", "host-to-device copy of 256 MiB from pinned memory (non-blocking, then synchronised)"),
    (
        "grad_scaler_overflow",
        "GradScaler on a real fp16 overflow: a linear layer under fp16 autocast whose gradient is 256 x scale; steps skipped before the first finite one, and the scale then (analytic: 9 and 128)",
    ),
    (
        "data_stall_224",
        "data-stall share: resnet50 AMP training fed by the DataLoader (photo-like JPEGs, RandomResizedCrop(224) + flip + ToTensor + Normalize, pinned memory, one worker per core but two), batch 128, 2048 images, synchronised each step; time waiting for batches over epoch time in epochs 2-3, as fit's data_stall_pct, and without each epoch's first batch (pipeline fill)",
    ),
];

fn description(name: &str) -> String {
    ROWS.iter().find(|(n, _)| *n == name).map(|(_, d)| d.to_string()).unwrap_or_default()
}

/// `torchlight-bench gpu <action> [--key value]..`.
pub fn main(args: &[String]) -> Result<()> {
    let Some((action, rest)) = args.split_first() else {
        bail!("usage: torchlight-bench gpu probe|run|summarize|validate|record [--key value]..");
    };
    let opts = options(rest)?;
    let path = |key: &str| required(&opts, key).map(PathBuf::from);
    match action.as_str() {
        "probe" => probe(&path("out")?),
        "run" => {
            let require = match required(&opts, "require-cuda")? {
                "yes" => true,
                "no" => false,
                other => bail!("--require-cuda {other}: expected `yes` or `no`"),
            };
            let file = run(&path("data")?, require);
            write_json(&path("out")?, &file)
        }
        "summarize" => gpu_report::summarize(&path("out-dir")?, &path("out")?),
        "validate" => {
            let report = gpu_report::read_report(&path("report")?)?;
            let lines = gpu_report::validate(&report)?;
            for line in lines {
                println!("{line}");
            }
            Ok(())
        }
        "record" => gpu_report::record(&path("report")?, &path("docs")?),
        other => bail!("unknown gpu action `{other}`"),
    }
}

/// What this process sees of CUDA, as the kit's `device` part records it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Probe {
    /// `cuda_status().available`.
    pub available: bool,
    /// Visible CUDA devices.
    pub device_count: usize,
    /// cuDNN available.
    pub cudnn: bool,
    /// The folder of the `libtorch_cpu.so` this process loaded.
    pub libtorch_lib_dir: Option<PathBuf>,
    /// Why CUDA is unavailable.
    pub reason: Option<String>,
}

fn probe(out: &Path) -> Result<()> {
    let s = cuda_status();
    let probe = Probe {
        available: s.available,
        device_count: s.device_count,
        cudnn: s.cudnn,
        libtorch_lib_dir: s.libtorch_lib_dir.clone(),
        reason: s.reason.clone(),
    };
    println!(
        "cuda available={} devices={} cudnn={} libtorch={}{}",
        probe.available,
        probe.device_count,
        probe.cudnn,
        probe.libtorch_lib_dir.as_deref().map_or("?".into(), |p| p.display().to_string()),
        probe.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
    );
    write_json(out, &probe)
}

/// Every row, measured on `cuda:0` with [`Plan::GPU`], or skipped.
pub fn run(data: &Path, require_cuda: bool) -> BenchFile {
    let status = cuda_status();
    // libtorch is the GPU machine's own (the environment part records its version).
    let versions = BTreeMap::from([
        ("tch".to_string(), "0.24.0".to_string()),
        ("model".to_string(), "torchlight_nn::resnet50".to_string()),
    ]);
    let mut file = BenchFile {
        side: "torchlight".into(),
        cuda: status.available,
        reason: status.reason.clone(),
        versions,
        rows: Vec::new(),
    };
    file.rows = if status.available {
        ROWS.iter()
            .map(|(name, _)| {
                let row = measure(name, data, Plan::GPU, Device::Cuda(0));
                println!("{}", row_line(&row));
                row
            })
            .collect()
    } else {
        let rows = unavailable_rows(require_cuda, status.reason.as_deref());
        rows.iter().for_each(|row| println!("{}", row_line(row)));
        rows
    };
    file
}

/// The rows of a process without CUDA: `skipped: no CUDA`, or failed when the machine has a
/// GPU (`require_cuda`) and so the dlopen of `libtorch_cuda.so` must have gone wrong.
pub fn unavailable_rows(require_cuda: bool, reason: Option<&str>) -> Vec<Row> {
    let detail = if require_cuda {
        format!("the machine has a GPU but Torchlight sees no CUDA: {}", reason.unwrap_or("no reason given"))
    } else {
        NO_CUDA.to_string()
    };
    ROWS.iter()
        .map(|(name, description)| Row {
            name: name.to_string(),
            status: if require_cuda { "failed" } else { "skipped" }.into(),
            description: description.to_string(),
            detail: Some(detail.clone()),
            values: BTreeMap::new(),
            times_s: Vec::new(),
        })
        .collect()
}

/// One line per row for the kit's log.
fn row_line(row: &Row) -> String {
    let values: Vec<String> = row.values.iter().map(|(k, v)| format!("{k}={v:.6}")).collect();
    format!("{:<22} {:<7} {} {}", row.name, row.status, values.join(" "), row.detail.as_deref().unwrap_or(""))
}

/// Runs one row on `d`, turning an error or a libtorch panic into a `failed` row.
pub fn measure(name: &str, data: &Path, plan: Plan, d: Device) -> Row {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(BTreeMap<String, f64>, Vec<f64>)> {
        match name {
            "resnet50_train_fp32" => resnet50_row(false, plan, d),
            "resnet50_train_amp" => resnet50_row(true, plan, d),
            "h2d_pageable" => copy_row(false, plan, d),
            "h2d_pinned" => copy_row(true, plan, d),
            "grad_scaler_overflow" => overflow_row(d),
            "data_stall_224" => data_stall_row(data, plan, d),
            other => bail!("unknown row `{other}`"),
        }
    }));
    let (status, detail, mut values, times_s) = match result {
        Ok(Ok((values, times))) => ("ok", None, values, times),
        Ok(Err(e)) => ("failed", Some(format!("{e:#}")), BTreeMap::new(), Vec::new()),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            ("failed", Some(format!("panicked: {message}")), BTreeMap::new(), Vec::new())
        }
    };
    values.insert("row_seconds".into(), started.elapsed().as_secs_f64());
    // JSON has no NaN or Inf: a figure that could not be computed is left out.
    values.retain(|_, v| v.is_finite());
    Row {
        name: name.to_string(),
        status: status.into(),
        description: description(name),
        detail: detail.map(|d| d.replace('\n', " ")),
        values,
        times_s,
    }
}

/// Waits for `d`'s queued work (nothing to wait for on the CPU).
fn sync(d: Device) {
    if let Device::Cuda(i) = d {
        tch::Cuda::synchronize(i as i64);
    }
}

/// The median of `times` (sorted copy).
pub fn median(times: &[f64]) -> f64 {
    let mut s = times.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A ResNet (resnet50 on the GPU) with fused AdamW and a GradScaler (disabled in fp32), on `d`.
struct AmpTrainStep {
    model: ResNet,
    optimizer: AdamW,
    scaler: GradScaler,
    loss: CrossEntropyLoss,
    amp: bool,
    device: Device,
}

impl AmpTrainStep {
    fn new(model: &str, amp: bool, device: Device) -> Result<Self> {
        tch::manual_seed(0);
        let model = resnet_by_name_on(model, 1000, LayerOptions::new(Kind::Float, device))
            .with_context(|| format!("unknown model `{model}`"))?;
        let optimizer =
            AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(1e-3))])?;
        let scaler = GradScaler::new(GradScalerConfig::default().with_enabled(amp))?;
        Ok(AmpTrainStep { model, optimizer, scaler, loss: CrossEntropyLoss::new(), amp, device })
    }

    fn step(&mut self, x: &Tensor, y: &Tensor) -> Result<()> {
        self.optimizer.zero_grad()?;
        let logits = {
            let _amp = autocast_if(self.amp, self.device, Kind::Half)?;
            self.model.forward_t(x, true)
        }
        .to_kind(Kind::Float);
        let loss = self.loss.forward(&logits, y)?;
        self.scaler.scale(&loss).backward();
        self.scaler.step(&mut self.optimizer)?;
        self.scaler.update()?;
        Ok(())
    }
}

/// `plan.warmup` steps, then `plan.rounds` rounds of `plan.steps` steps; each time is a
/// round's mean step time.
fn resnet50_row(amp: bool, plan: Plan, d: Device) -> Result<(BTreeMap<String, f64>, Vec<f64>)> {
    let mut step = AmpTrainStep::new(plan.model, amp, d)?;
    let x = Tensor::randn([plan.batch, 3, plan.image_size, plan.image_size], (Kind::Float, d));
    let y = Tensor::randint(1000, [plan.batch], (Kind::Int64, d));
    for _ in 0..plan.warmup {
        step.step(&x, &y)?;
    }
    sync(d);
    let mut times = Vec::new();
    for _ in 0..plan.rounds {
        let start = Instant::now();
        for _ in 0..plan.steps {
            step.step(&x, &y)?;
        }
        sync(d);
        times.push(start.elapsed().as_secs_f64() / plan.steps as f64);
    }
    let m = median(&times);
    let values = BTreeMap::from([
        ("median_step_s".to_string(), m),
        ("images_per_s".to_string(), plan.batch as f64 / m),
        ("batch".to_string(), plan.batch as f64),
        ("image_size".to_string(), plan.image_size as f64),
    ]);
    Ok((values, times))
}

/// `plan.copy_mib` host to device, one warm-up and five timed copies.
fn copy_row(pinned: bool, plan: Plan, d: Device) -> Result<(BTreeMap<String, f64>, Vec<f64>)> {
    let n: i64 = plan.copy_mib << 18;
    let bytes = (n * 4) as f64;
    let pageable = Tensor::ones([n], (Kind::Float, Device::Cpu));
    let source = if pinned {
        let mut t = empty_pinned(&[n], Kind::Float)?;
        t.copy_(&pageable);
        t
    } else {
        pageable
    };
    let mut times = Vec::new();
    for rep in 0..6 {
        sync(d);
        let start = Instant::now();
        let on_device = if pinned { to_device_non_blocking(&source, d) } else { source.to_device(d) };
        sync(d);
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
        drop(on_device);
    }
    let m = median(&times);
    let values =
        BTreeMap::from([("gbps".to_string(), bytes / m / 1e9), ("mib".to_string(), bytes / 1048576.0)]);
    Ok((values, times))
}

/// The scenario of the optim crate's `grad_scaler_skips_steps_on_a_real_fp16_overflow` test:
/// twelve iterations, counting the skipped ones before the first step that moves the weights.
fn overflow_row(d: Device) -> Result<(BTreeMap<String, f64>, Vec<f64>)> {
    let w = Tensor::full([8, 256], 0.01, (Kind::Float, d)).set_requires_grad(true);
    let x = Tensor::full([64, 256], 4.0, (Kind::Float, d));
    let mut opt = AdamW::new(vec![ParamGroup::new(
        vec![("w".into(), w.shallow_clone())],
        AdamConfig::adamw().with_lr(1e-3),
    )])?;
    let mut scaler = GradScaler::new(GradScalerConfig::default())?;
    let mut first_finite = None;
    let mut scales = Vec::new();
    for i in 0..12 {
        let before = w.detach().copy();
        opt.zero_grad()?;
        let y = {
            let _amp = autocast(d, Kind::Half)?;
            x.linear(&w, None::<Tensor>)
        };
        scaler.scale(&y.to_kind(Kind::Float).sum(Kind::Float)).backward();
        scaler.step(&mut opt)?;
        scaler.update()?;
        scales.push(scaler.get_scale());
        if first_finite.is_none() && !w.equal(&before) {
            first_finite = Some(i);
        }
    }
    let Some(first) = first_finite else { bail!("no step in 12 was finite; scales {scales:?}") };
    let values = BTreeMap::from([
        ("skipped_steps".to_string(), first as f64),
        ("final_scale".to_string(), *scales.last().expect("12 iterations")),
    ]);
    Ok((values, Vec::new()))
}

/// One warm-up epoch and two measured ones of resnet50 AMP training fed by the DataLoader.
fn data_stall_row(data: &Path, plan: Plan, d: Device) -> Result<(BTreeMap<String, f64>, Vec<f64>)> {
    let generated = Instant::now();
    crate::imagegen::write_photo_folder(data, plan.images, 10)?;
    let generation_s = generated.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let workers = cores.saturating_sub(2).max(1);
    let transform = Compose::default()
        .then(RandomResizedCrop::new(plan.image_size as usize))
        .then(RandomHorizontalFlip::default())
        .then(ToTensor)
        .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD));
    let dataset = ImageFolder::new(data)?.with_transform(transform);
    let mut loader = DataLoader::builder(dataset)
        .batch_size(plan.batch as usize)
        .shuffle(true)
        .drop_last(true)
        .num_workers(workers)
        .persistent_workers(true)
        .pin_memory(d.is_cuda())
        .seed(0)
        .build()?;
    let mut step = AmpTrainStep::new(plan.model, true, d)?;
    // Totals over the measured epochs; `first` is the wait for each epoch's first batch, which
    // a long epoch amortises (one batch is decoded by one worker).
    let (mut stall, mut wall, mut first, mut seen) = (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0);
    let mut shares = Vec::new();
    for epoch in 0..3 {
        let start = Instant::now();
        let mut batches = loader.epoch(epoch);
        let first_wait = Instant::now();
        let mut next = batches.next();
        let first_wait = first_wait.elapsed();
        let mut n = 0;
        while let Some(batch) = next {
            let (x, y) = batch?;
            n += y.size()[0] as usize;
            step.step(&to_device_non_blocking(&x, d), &to_device_non_blocking(&y, d))?;
            sync(d);
            next = batches.next();
        }
        let epoch_stall = batches.stats().stall;
        drop(batches);
        let epoch_wall = start.elapsed();
        if epoch > 0 {
            stall += epoch_stall;
            wall += epoch_wall;
            first += first_wait;
            seen += n;
            shares.push(epoch_stall.as_secs_f64() / epoch_wall.as_secs_f64());
        }
    }
    if seen == 0 {
        bail!("the loader yielded no full batch of {} from {} images", plan.batch, plan.images);
    }
    let steady = (stall.saturating_sub(first)).as_secs_f64() / (wall.saturating_sub(first)).as_secs_f64();
    let values = BTreeMap::from([
        ("stall_share".to_string(), stall.as_secs_f64() / wall.as_secs_f64()),
        ("stall_share_after_first_batch".to_string(), steady),
        ("first_batch_wait_s".to_string(), first.as_secs_f64() / 2.0),
        ("images_per_s".to_string(), seen as f64 / wall.as_secs_f64()),
        ("workers".to_string(), workers as f64),
        ("images".to_string(), plan.images as f64),
        ("batch".to_string(), plan.batch as f64),
        ("generation_s".to_string(), generation_s),
    ]);
    Ok((values, shares))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cuda_every_row_is_skipped_or_failed_when_a_gpu_was_expected() {
        let skipped = unavailable_rows(false, Some("no driver"));
        assert_eq!(skipped.len(), ROWS.len());
        for row in &skipped {
            assert_eq!((row.status.as_str(), row.detail.as_deref()), ("skipped", Some(NO_CUDA)), "{row:?}");
            assert!(!row.description.is_empty());
        }
        let failed = unavailable_rows(true, Some("no driver"));
        for row in &failed {
            assert_eq!(row.status, "failed");
            assert_eq!(
                row.detail.as_deref(),
                Some("the machine has a GPU but Torchlight sees no CUDA: no driver"),
                "{row:?}"
            );
        }
    }

    #[test]
    fn bench_files_round_trip_through_json() {
        let file = BenchFile {
            side: "torchlight".into(),
            cuda: true,
            reason: None,
            versions: BTreeMap::new(),
            rows: vec![Row {
                name: "h2d_pinned".into(),
                status: "ok".into(),
                description: description("h2d_pinned"),
                detail: None,
                values: BTreeMap::from([("gbps".to_string(), 50.0)]),
                times_s: vec![0.005],
            }],
        };
        let text = serde_json::to_string(&file).unwrap();
        assert_eq!(serde_json::from_str::<BenchFile>(&text).unwrap(), file);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    /// The values of a measured row, with the row's failure as the panic message otherwise.
    fn ok_values(row: &Row) -> &BTreeMap<String, f64> {
        assert_eq!(row.status, "ok", "{}: {:?}", row.name, row.detail);
        &row.values
    }

    #[test]
    fn every_row_runs_on_the_cpu_at_toy_sizes() {
        let dir = tempfile::tempdir().unwrap();
        for (name, _) in ROWS {
            let row = measure(name, &dir.path().join("photos"), Plan::SMOKE, Device::Cpu);
            let values = ok_values(&row);
            eprintln!("{name}: {:.1} s", values["row_seconds"]);
            let expect = match *name {
                "resnet50_train_fp32" | "resnet50_train_amp" => &["median_step_s", "images_per_s"][..],
                "h2d_pageable" | "h2d_pinned" => &["gbps"][..],
                "grad_scaler_overflow" => &["skipped_steps", "final_scale"][..],
                _ => &["stall_share", "stall_share_after_first_batch", "images_per_s"][..],
            };
            for key in expect {
                assert!(
                    values[*key].is_finite() && values[*key] >= 0.0,
                    "{name}: {key} = {:?}",
                    values.get(*key)
                );
            }
        }
    }

    #[test]
    fn the_pytorch_scripts_own_resnet50_is_torchvisions() {
        // Without torchvision on the GPU machine, pytorch_gpu_bench.py builds resnet50 itself.
        let check = "import torch, pytorch_gpu_bench as b\n\
                     from torchvision.models import resnet50\n\
                     own, tv = b.ResNet50(1000).eval(), resnet50().eval()\n\
                     shapes = lambda m: [(k, tuple(v.shape)) for k, v in m.state_dict().items()]\n\
                     assert shapes(own) == shapes(tv), 'state_dict keys, order or shapes differ'\n\
                     own.load_state_dict(tv.state_dict())\n\
                     x = torch.randn(2, 3, 64, 64)\n\
                     assert torch.equal(own(x), tv(x)), 'the forward passes differ'\n";
        let python = torchlight_testing::reference_python().unwrap();
        let output = std::process::Command::new(&python)
            .current_dir(torchlight_testing::workspace_root().join("crates/bench"))
            .args(["-c", check])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }

    #[test]
    fn grad_scaler_overflow_matches_pytorch_on_the_cpu() {
        // fp16 rounding is the same on every device: the row gives the analytic 9 skipped
        // steps and scale 128 on the CPU too, and so does PyTorch's side of the kit, which
        // runs every row at toy sizes with --smoke.
        let ours = measure("grad_scaler_overflow", Path::new("-"), Plan::SMOKE, Device::Cpu);
        assert_eq!(ok_values(&ours)["skipped_steps"], 9.0);
        assert_eq!(ok_values(&ours)["final_scale"], 128.0);
        let python = torchlight_testing::reference_python().unwrap();
        let script = torchlight_testing::workspace_root().join("crates/bench/pytorch_gpu_bench.py");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pytorch.json");
        let status = std::process::Command::new(&python)
            .arg(&script)
            .args(["--smoke", "--require-cuda", "no", "--out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "{} {} --smoke failed", python.display(), script.display());
        let theirs: BenchFile = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(theirs.side, "pytorch");
        let names: Vec<&str> = theirs.rows.iter().map(|r| r.name.as_str()).collect();
        let ours_names: Vec<&str> = ROWS.iter().map(|(n, _)| *n).filter(|n| *n != "data_stall_224").collect();
        assert_eq!(names, ours_names, "both sides measure the same rows");
        for row in &theirs.rows {
            ok_values(row);
        }
        let overflow = theirs.rows.iter().find(|r| r.name == "grad_scaler_overflow").unwrap();
        for key in ["skipped_steps", "final_scale"] {
            assert_eq!(overflow.values[key], ours.values[key], "{key}: PyTorch vs Torchlight");
        }
    }
}
