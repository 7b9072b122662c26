//! The GPU proof kit's report: `parts.tsv` and the parts' files (written by
//! `xtask/gpukit/run.sh`) become `gpu-report.json` with the headline figures; the report is
//! validated (`cargo xtask gpu-kit --check`) and recorded as the GPU section of
//! `docs/benchmarks.md` (`cargo xtask gpu-kit --record REPORT.json`).
//!
//! `parts.tsv` has one line per part: `name \t kind \t status \t seconds \t data \t detail`, where
//! kind is `host` or `cuda`, status `passed`, `failed` or `skipped`, and data a path relative to
//! the report's folder (`-` for none): a `.json` file is embedded as it is, a `.env` file
//! (`key=value` lines) as an object of strings, and a folder as an object of its `.json` files
//! by file stem.

use crate::bench_file::{write_json, BenchFile, Row, NO_CUDA};
use crate::format::{fmt_time, utc_now};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The report's format version.
pub const FORMAT: u32 = 1;
/// The AMP speed-up on resnet50 issue 21 targets.
pub const AMP_SPEEDUP_TARGET: f64 = 1.8;
/// GradScaler on the overflow row: steps skipped and the scale after them, as the optim crate's
/// test derives them from fp16's range.
pub const OVERFLOW_EXPECTED: (f64, f64) = (9.0, 128.0);
/// The parts every kit run has, besides one `tests:<crate>` part per test binary.
pub const REQUIRED_PARTS: &[&str] = &["environment", "device", "train", "bench", "bench-pytorch"];
/// First line of the GPU section of `docs/benchmarks.md`.
pub const BEGIN: &str =
    "<!-- gpu-kit:begin (written by `cargo xtask gpu-kit --record REPORT.json`; do not edit by hand) -->";
/// Last line of the GPU section.
pub const END: &str = "<!-- gpu-kit:end -->";

/// One part of a kit run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// `environment`, `device`, `tests:<crate>`, `train`, `bench`, ...
    pub name: String,
    /// `host` (runs everywhere) or `cuda` (needs a GPU).
    pub kind: String,
    /// `passed`, `failed` or `skipped`.
    pub status: String,
    /// Wall time of the part.
    pub seconds: f64,
    /// One line on what happened.
    pub detail: String,
    /// The part's files (see the module documentation).
    #[serde(default)]
    pub data: Value,
}

/// The headline figures of a run; `None` where the run did not measure one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// resnet50 fp32 step time over AMP step time, Torchlight.
    pub amp_speedup_torchlight: Option<f64>,
    /// The same for PyTorch on the same machine.
    pub amp_speedup_pytorch: Option<f64>,
    /// Median resnet50 fp32 training step, Torchlight (seconds).
    pub resnet50_fp32_step_s_torchlight: Option<f64>,
    /// Median resnet50 AMP training step, Torchlight (seconds).
    pub resnet50_amp_step_s_torchlight: Option<f64>,
    /// Median resnet50 fp32 training step, PyTorch (seconds).
    pub resnet50_fp32_step_s_pytorch: Option<f64>,
    /// Median resnet50 AMP training step, PyTorch (seconds).
    pub resnet50_amp_step_s_pytorch: Option<f64>,
    /// Torchlight's fp32 step time over PyTorch's.
    pub fp32_ratio_torchlight_over_pytorch: Option<f64>,
    /// Torchlight's AMP step time over PyTorch's.
    pub amp_ratio_torchlight_over_pytorch: Option<f64>,
    /// Host-to-device bandwidth from pinned memory, Torchlight (GB/s).
    pub h2d_pinned_gbps_torchlight: Option<f64>,
    /// Host-to-device bandwidth from pageable memory, Torchlight (GB/s).
    pub h2d_pageable_gbps_torchlight: Option<f64>,
    /// Pinned over pageable bandwidth, Torchlight.
    pub pinned_over_pageable_torchlight: Option<f64>,
    /// Host-to-device bandwidth from pinned memory, PyTorch (GB/s).
    pub h2d_pinned_gbps_pytorch: Option<f64>,
    /// Host-to-device bandwidth from pageable memory, PyTorch (GB/s).
    pub h2d_pageable_gbps_pytorch: Option<f64>,
    /// Steps GradScaler skipped on the real fp16 overflow before a finite one, Torchlight.
    pub grad_scaler_skipped_steps_torchlight: Option<f64>,
    /// The same for PyTorch.
    pub grad_scaler_skipped_steps_pytorch: Option<f64>,
    /// The scale after those steps, Torchlight.
    pub grad_scaler_final_scale_torchlight: Option<f64>,
    /// The same for PyTorch.
    pub grad_scaler_final_scale_pytorch: Option<f64>,
    /// Share of epoch time spent waiting for batches at 224 px (0..1).
    pub data_stall_share: Option<f64>,
    /// The same without each epoch's first batch (the pipeline filling).
    pub data_stall_share_after_first_batch: Option<f64>,
    /// Images per second of that loop.
    pub data_stall_images_per_s: Option<f64>,
    /// DataLoader workers of that loop.
    pub data_stall_workers: Option<f64>,
    /// Test accuracy of the short `torchlight train --device cuda --amp` run.
    pub train_test_acc: Option<f64>,
    /// Its training throughput (images per second).
    pub train_images_per_s: Option<f64>,
    /// CUDA tests that passed, over all test binaries.
    pub cuda_tests_passed: Option<f64>,
    /// CUDA tests that failed.
    pub cuda_tests_failed: Option<f64>,
}

/// `gpu-report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    /// [`FORMAT`].
    pub format: u32,
    /// When the report was written, `YYYY-MM-DD HH:MM UTC`.
    pub generated: String,
    /// Whether the machine had a GPU (then every part must pass).
    pub cuda: bool,
    /// The environment part's `key=value` facts (GPU, torch, glibc, cores).
    pub machine: BTreeMap<String, String>,
    /// The kit's manifest (`kit.env`: profile, commit, build time, test binaries).
    pub kit: BTreeMap<String, String>,
    /// Every part, in run order.
    pub parts: Vec<Part>,
    /// The headline figures.
    pub figures: Figures,
    /// Parts per status.
    pub counts: BTreeMap<String, usize>,
}

/// `key=value` lines (shell style, optional double quotes) as a map; other lines are ignored.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

/// A part's data from its path relative to `dir` (see the module documentation).
fn load_data(dir: &Path, rel: &str) -> Result<Value> {
    if rel == "-" || rel.is_empty() {
        return Ok(Value::Null);
    }
    let path = dir.join(rel);
    if path.is_dir() {
        let mut map = serde_json::Map::new();
        let mut entries: Vec<_> = std::fs::read_dir(&path)
            .with_context(|| format!("{}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        entries.sort();
        for p in entries {
            let stem = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            map.insert(stem, load_data(dir, &p.strip_prefix(dir).unwrap_or(&p).to_string_lossy())?);
        }
        return Ok(Value::Object(map));
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    if rel.ends_with(".env") {
        let map = parse_env(&text).into_iter().map(|(k, v)| (k, Value::String(v))).collect();
        return Ok(Value::Object(map));
    }
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// Parses `parts.tsv`, loading each part's data from `dir`. A part whose data cannot be read
/// keeps its status and says so in its detail (the report is written whatever happened).
pub fn parse_parts(text: &str, dir: &Path) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.splitn(6, '\t').collect();
        if f.len() != 6 {
            bail!("parts.tsv line {}: expected 6 tab-separated fields, found {}", i + 1, f.len());
        }
        let seconds = f[3]
            .parse::<f64>()
            .with_context(|| format!("parts.tsv line {}: bad seconds `{}`", i + 1, f[3]))?;
        let mut detail = f[5].to_string();
        let data = load_data(dir, f[4]).unwrap_or_else(|e| {
            detail.push_str(&format!(" (its data could not be read: {e:#})"));
            Value::Null
        });
        parts.push(Part { name: f[0].into(), kind: f[1].into(), status: f[2].into(), seconds, detail, data });
    }
    Ok(parts)
}

fn part<'a>(parts: &'a [Part], name: &str) -> Option<&'a Part> {
    parts.iter().find(|p| p.name == name)
}

/// A bench part's rows, when its data is a [`BenchFile`].
fn bench_rows(parts: &[Part], name: &str) -> Vec<Row> {
    part(parts, name)
        .and_then(|p| serde_json::from_value::<BenchFile>(p.data.clone()).ok())
        .map(|f| f.rows)
        .unwrap_or_default()
}

/// The value `key` of row `row` when the row was measured.
fn value(rows: &[Row], row: &str, key: &str) -> Option<f64> {
    rows.iter().find(|r| r.name == row && r.status == "ok").and_then(|r| r.values.get(key).copied())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The headline figures from the parts' data.
pub fn figures(parts: &[Part]) -> Figures {
    let tl = bench_rows(parts, "bench");
    let pt = bench_rows(parts, "bench-pytorch");
    let step = |rows: &[Row], amp: bool| {
        value(rows, if amp { "resnet50_train_amp" } else { "resnet50_train_fp32" }, "median_step_s")
    };
    let (tl32, tlamp, pt32, ptamp) = (step(&tl, false), step(&tl, true), step(&pt, false), step(&pt, true));
    let gbps = |rows: &[Row], row: &str| value(rows, row, "gbps");
    let train = part(parts, "train").filter(|p| p.status == "passed").map(|p| &p.data["summary"]);
    let tests: Vec<&Part> = parts.iter().filter(|p| p.name.starts_with("tests:")).collect();
    let count = |key: &str| -> Option<f64> {
        let values: Vec<f64> = tests.iter().filter_map(|p| p.data.get(key).and_then(Value::as_f64)).collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    Figures {
        amp_speedup_torchlight: ratio(tl32, tlamp),
        amp_speedup_pytorch: ratio(pt32, ptamp),
        resnet50_fp32_step_s_torchlight: tl32,
        resnet50_amp_step_s_torchlight: tlamp,
        resnet50_fp32_step_s_pytorch: pt32,
        resnet50_amp_step_s_pytorch: ptamp,
        fp32_ratio_torchlight_over_pytorch: ratio(tl32, pt32),
        amp_ratio_torchlight_over_pytorch: ratio(tlamp, ptamp),
        h2d_pinned_gbps_torchlight: gbps(&tl, "h2d_pinned"),
        h2d_pageable_gbps_torchlight: gbps(&tl, "h2d_pageable"),
        pinned_over_pageable_torchlight: ratio(gbps(&tl, "h2d_pinned"), gbps(&tl, "h2d_pageable")),
        h2d_pinned_gbps_pytorch: gbps(&pt, "h2d_pinned"),
        h2d_pageable_gbps_pytorch: gbps(&pt, "h2d_pageable"),
        grad_scaler_skipped_steps_torchlight: value(&tl, "grad_scaler_overflow", "skipped_steps"),
        grad_scaler_skipped_steps_pytorch: value(&pt, "grad_scaler_overflow", "skipped_steps"),
        grad_scaler_final_scale_torchlight: value(&tl, "grad_scaler_overflow", "final_scale"),
        grad_scaler_final_scale_pytorch: value(&pt, "grad_scaler_overflow", "final_scale"),
        data_stall_share: value(&tl, "data_stall_224", "stall_share"),
        data_stall_share_after_first_batch: value(&tl, "data_stall_224", "stall_share_after_first_batch"),
        data_stall_images_per_s: value(&tl, "data_stall_224", "images_per_s"),
        data_stall_workers: value(&tl, "data_stall_224", "workers"),
        train_test_acc: train.and_then(|s| s.get("test_acc")).and_then(Value::as_f64),
        train_images_per_s: train.and_then(|s| s.get("train_images_per_s")).and_then(Value::as_f64),
        cuda_tests_passed: count("passed"),
        cuda_tests_failed: count("failed"),
    }
}

/// The report of the run whose files are in `dir` (`parts.tsv`, `parts/`).
pub fn build_report(dir: &Path) -> Result<GpuReport> {
    let tsv = dir.join("parts.tsv");
    let text = std::fs::read_to_string(&tsv).with_context(|| format!("{}", tsv.display()))?;
    let parts = parse_parts(&text, dir)?;
    let read_env = |name: &str| {
        std::fs::read_to_string(dir.join("parts").join(name)).map(|t| parse_env(&t)).unwrap_or_default()
    };
    let machine = read_env("environment.env");
    let mut counts = BTreeMap::new();
    for p in &parts {
        *counts.entry(p.status.clone()).or_insert(0) += 1;
    }
    Ok(GpuReport {
        format: FORMAT,
        generated: utc_now(),
        cuda: machine.get("gpu_present").is_some_and(|v| v == "yes"),
        kit: read_env("kit.env"),
        figures: figures(&parts),
        machine,
        parts,
        counts,
    })
}

/// `gpu summarize`: writes the report of the run in `dir` to `out` and prints its parts and
/// figures.
pub fn summarize(dir: &Path, out: &Path) -> Result<()> {
    let report = build_report(dir)?;
    write_json(out, &report)?;
    print!("{}", summary_text(&report));
    Ok(())
}

/// The parts and the measured figures, one per line, for the kit's output.
pub fn summary_text(report: &GpuReport) -> String {
    let mut out = String::new();
    for p in &report.parts {
        let _ = writeln!(out, "{:<28} {:<8} {:>6.1} s  {}", p.name, p.status, p.seconds, p.detail);
    }
    let figures = serde_json::to_value(&report.figures).unwrap_or(Value::Null);
    if let Some(map) = figures.as_object() {
        for (k, v) in map.iter().filter(|(_, v)| !v.is_null()) {
            let _ = writeln!(out, "{k:<40} {v}");
        }
    }
    out
}

/// Reads a `gpu-report.json`.
pub fn read_report(path: &Path) -> Result<GpuReport> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a GPU kit report", path.display()))
}

/// Checks a report's consistency: the format, every required part and one test part per test
/// binary of the kit; without a GPU, every `cuda` part `skipped: no CUDA` (test binaries that
/// list their tests), every `host` part passed and no figure; with a GPU, every part passed.
/// Returns a line per part.
pub fn validate(report: &GpuReport) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    if report.format != FORMAT {
        problems.push(format!("format {} (expected {FORMAT})", report.format));
    }
    let tests = report.kit.get("KIT_TESTS").map(String::as_str).unwrap_or_default();
    if tests.split_whitespace().count() == 0 {
        problems.push("the kit's manifest names no test binaries (KIT_TESTS)".into());
    }
    let names: Vec<String> = REQUIRED_PARTS
        .iter()
        .map(|s| s.to_string())
        .chain(tests.split_whitespace().map(|c| format!("tests:{c}")))
        .chain((!report.cuda).then(|| "train-cpu-stand-in".to_string()))
        .collect();
    for name in &names {
        if !report.parts.iter().any(|p| &p.name == name) {
            problems.push(format!("part `{name}` is missing"));
        }
    }
    for p in &report.parts {
        if !["passed", "failed", "skipped"].contains(&p.status.as_str()) {
            problems.push(format!("part `{}` has status `{}`", p.name, p.status));
        } else if report.cuda && p.status != "passed" {
            problems.push(format!("part `{}` {}: {}", p.name, p.status, p.detail));
        } else if !report.cuda
            && p.kind == "cuda"
            && (p.status != "skipped" || !p.detail.starts_with(NO_CUDA))
        {
            problems.push(format!("part `{}` needs CUDA but is {} ({})", p.name, p.status, p.detail));
        } else if !report.cuda && p.kind != "cuda" && p.status != "passed" {
            problems.push(format!("part `{}` {}: {}", p.name, p.status, p.detail));
        }
        if !report.cuda
            && p.name.starts_with("tests:")
            && p.data.get("listed").and_then(Value::as_u64).unwrap_or(0) == 0
        {
            problems.push(format!("part `{}` lists no cuda tests", p.name));
        }
    }
    if !report.cuda && report.figures != Figures::default() {
        problems.push("a run without CUDA reports GPU figures".into());
    }
    if !problems.is_empty() {
        bail!("the GPU kit report is not consistent:\n  {}", problems.join("\n  "));
    }
    Ok(report.parts.iter().map(|p| format!("{:<28} {:<8} {}", p.name, p.status, p.detail)).collect())
}

fn or_dash(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn yes_no(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

/// The GPU section of `docs/benchmarks.md` before any GPU run.
pub fn no_gpu_section() -> String {
    format!(
        "{BEGIN}\n## GPU\n\nNo GPU run yet. The GPU proof kit (`cargo xtask gpu-kit`, see \
         [setup.md](setup.md#the-gpu-proof-kit)) fills this section from its report \
         (`cargo xtask gpu-kit --record gpu-report.json`) once a GPU machine has run it: resnet50 \
         training step in fp32 and AMP against PyTorch on the same GPU, pinned against pageable \
         host-to-device bandwidth, GradScaler on a real fp16 overflow, and the data-stall share at \
         224 px.\n{END}\n"
    )
}

/// The GPU section of `docs/benchmarks.md` for a report from a GPU machine.
pub fn gpu_section(r: &GpuReport) -> String {
    let f = &r.figures;
    let m = |k: &str| r.machine.get(k).cloned().unwrap_or_else(|| "?".into());
    let k = |k: &str| r.kit.get(k).cloned().unwrap_or_else(|| "?".into());
    let time = |v: Option<f64>| or_dash(v, fmt_time);
    let x = |v: Option<f64>| or_dash(v, |v| format!("{v:.2}x"));
    let gb = |v: Option<f64>| or_dash(v, |v| format!("{v:.1} GB/s"));
    let mut md = String::new();
    let _ = writeln!(md, "{BEGIN}\n## GPU\n");
    let _ = writeln!(
        md,
        "Recorded by `cargo xtask gpu-kit --record` from the GPU proof kit's report of {}; do not \
         edit by hand. The kit (see [setup.md](setup.md#the-gpu-proof-kit)) ran Torchlight's \
         release binaries against the GPU machine's own PyTorch libraries, then the same rows in \
         that PyTorch as the reference. Step times are the median of three rounds of ten steps \
         after five warm-up steps.\n",
        r.generated
    );
    let gpu = match (r.machine.get("gpu"), r.machine.get("nvidia_smi")) {
        (Some(name), Some(smi)) => format!("{name} (nvidia-smi: {smi})"),
        (Some(name), None) => name.clone(),
        (None, Some(smi)) => format!("nvidia-smi: {smi}"),
        (None, None) => "?".into(),
    };
    let _ = writeln!(md, "- GPU: {gpu}; {} CPU cores", m("cpu_cores"));
    let _ = writeln!(
        md,
        "- PyTorch {} (CUDA {}), python {}; Torchlight commit {} ({} build of {})\n",
        m("torch"),
        m("torch_cuda_version"),
        m("python_version"),
        k("KIT_COMMIT"),
        k("KIT_PROFILE"),
        k("KIT_BUILT")
    );
    let _ = writeln!(md, "| figure | Torchlight | PyTorch | target | met |");
    let _ = writeln!(md, "|---|---:|---:|---:|:---:|");
    let rows: Vec<(String, String, String, String, &str)> = vec![
        (
            "resnet50 training step, batch 128, 224 px, fp32 (TF32 convolutions)".into(),
            time(f.resnet50_fp32_step_s_torchlight),
            time(f.resnet50_fp32_step_s_pytorch),
            "-".into(),
            "-",
        ),
        (
            "the same step, AMP (fp16 autocast + GradScaler)".into(),
            time(f.resnet50_amp_step_s_torchlight),
            time(f.resnet50_amp_step_s_pytorch),
            "-".into(),
            "-",
        ),
        (
            "AMP speed-up (fp32 step / AMP step)".into(),
            x(f.amp_speedup_torchlight),
            x(f.amp_speedup_pytorch),
            format!(">= {AMP_SPEEDUP_TARGET:.1}x"),
            yes_no(f.amp_speedup_torchlight.map(|v| v >= AMP_SPEEDUP_TARGET)),
        ),
        (
            "Torchlight / PyTorch step time, fp32 and AMP".into(),
            format!(
                "{} / {}",
                or_dash(f.fp32_ratio_torchlight_over_pytorch, |v| format!("{v:.3}")),
                or_dash(f.amp_ratio_torchlight_over_pytorch, |v| format!("{v:.3}"))
            ),
            "1".into(),
            "<= 1.05".into(),
            yes_no(
                f.fp32_ratio_torchlight_over_pytorch
                    .zip(f.amp_ratio_torchlight_over_pytorch)
                    .map(|(a, b)| a <= 1.05 && b <= 1.05),
            ),
        ),
        (
            "host-to-device copy of 256 MiB, pinned (non-blocking)".into(),
            gb(f.h2d_pinned_gbps_torchlight),
            gb(f.h2d_pinned_gbps_pytorch),
            "-".into(),
            "-",
        ),
        (
            "host-to-device copy of 256 MiB, pageable".into(),
            gb(f.h2d_pageable_gbps_torchlight),
            gb(f.h2d_pageable_gbps_pytorch),
            "-".into(),
            "-",
        ),
        (
            "pinned / pageable bandwidth".into(),
            x(f.pinned_over_pageable_torchlight),
            x(ratio(f.h2d_pinned_gbps_pytorch, f.h2d_pageable_gbps_pytorch)),
            "> 1x".into(),
            yes_no(f.pinned_over_pageable_torchlight.map(|v| v > 1.0)),
        ),
        (
            "GradScaler on a real fp16 overflow: steps skipped, then scale".into(),
            overflow_cell(f.grad_scaler_skipped_steps_torchlight, f.grad_scaler_final_scale_torchlight),
            overflow_cell(f.grad_scaler_skipped_steps_pytorch, f.grad_scaler_final_scale_pytorch),
            overflow_cell(Some(OVERFLOW_EXPECTED.0), Some(OVERFLOW_EXPECTED.1)),
            yes_no(
                f.grad_scaler_skipped_steps_torchlight
                    .zip(f.grad_scaler_final_scale_torchlight)
                    .map(|got| got == OVERFLOW_EXPECTED),
            ),
        ),
        (
            format!(
                "data-stall share at 224 px (resnet50 AMP fed by the DataLoader, {} workers)",
                or_dash(f.data_stall_workers, |v| format!("{v:.0}"))
            ),
            or_dash(f.data_stall_share, |v| {
                format!(
                    "{:.0}% ({} after each epoch's first batch; {} img/s)",
                    v * 100.0,
                    or_dash(f.data_stall_share_after_first_batch, |s| format!("{:.0}%", s * 100.0)),
                    or_dash(f.data_stall_images_per_s, |i| format!("{i:.0}"))
                )
            }),
            "-".into(),
            "-".into(),
            "-",
        ),
        (
            "`torchlight train --device cuda --amp` (resnet18, 64 px, 2 epochs of the tiny set)".into(),
            or_dash(f.train_images_per_s, |v| {
                format!(
                    "{v:.0} img/s, test acc {}",
                    or_dash(f.train_test_acc, |a| format!("{:.0}%", a * 100.0))
                )
            }),
            "-".into(),
            "-".into(),
            "-",
        ),
    ];
    for (name, tl, pt, target, met) in rows {
        let _ = writeln!(md, "| {name} | {tl} | {pt} | {target} | {met} |");
    }
    let _ = writeln!(md, "\nParts of the run (each CUDA test binary runs its `cuda::` tests):\n");
    let _ = writeln!(md, "| part | status | seconds | detail |");
    let _ = writeln!(md, "|---|---|---:|---|");
    for p in &r.parts {
        let _ =
            writeln!(md, "| {} | {} | {:.0} | {} |", p.name, p.status, p.seconds, p.detail.replace('|', "/"));
    }
    let _ = writeln!(md, "{END}");
    md
}

fn overflow_cell(skipped: Option<f64>, scale: Option<f64>) -> String {
    match (skipped, scale) {
        (Some(s), Some(c)) => format!("{s:.0}, {c:.0}"),
        _ => "-".into(),
    }
}

/// `doc` with its GPU section replaced by `section`, or `section` appended after a blank
/// line when `doc` has none.
pub fn with_gpu_section(doc: &str, section: &str) -> String {
    if let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) {
        if b < e {
            let end = e + END.len();
            let rest = doc[end..].strip_prefix('\n').unwrap_or(&doc[end..]);
            return format!("{}{section}{rest}", &doc[..b]);
        }
    }
    let sep = if doc.ends_with("\n\n") || doc.is_empty() {
        ""
    } else if doc.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    format!("{doc}{sep}{section}")
}

/// The GPU section of `doc`, markers included, if it has one.
pub fn gpu_section_of(doc: &str) -> Option<String> {
    let b = doc.find(BEGIN)?;
    let e = doc[b..].find(END)? + b + END.len();
    Some(format!("{}\n", &doc[b..e]))
}

/// `gpu record`: writes the GPU section of `docs` from a GPU machine's report.
pub fn record(report_path: &Path, docs: &Path) -> Result<()> {
    let report = read_report(report_path)?;
    if !report.cuda {
        bail!(
            "{} comes from a machine without a GPU (a --check run): there is nothing to record",
            report_path.display()
        );
    }
    let doc = std::fs::read_to_string(docs).with_context(|| format!("{}", docs.display()))?;
    std::fs::write(docs, with_gpu_section(&doc, &gpu_section(&report)))
        .with_context(|| format!("{}", docs.display()))?;
    let failed: Vec<&str> =
        report.parts.iter().filter(|p| p.status != "passed").map(|p| p.name.as_str()).collect();
    println!(
        "recorded the GPU section of {} from {}{}",
        docs.display(),
        report_path.display(),
        if failed.is_empty() { String::new() } else { format!(" (parts not passed: {})", failed.join(", ")) }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn bench_file(side: &str, fp32: f64, amp: f64) -> String {
        let row = |name: &str, values: &[(&str, f64)]| Row {
            name: name.into(),
            status: "ok".into(),
            description: String::new(),
            detail: None,
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            times_s: vec![],
        };
        let file = BenchFile {
            side: side.into(),
            cuda: true,
            reason: None,
            versions: BTreeMap::new(),
            rows: vec![
                row("resnet50_train_fp32", &[("median_step_s", fp32)]),
                row("resnet50_train_amp", &[("median_step_s", amp)]),
                row("h2d_pageable", &[("gbps", 10.0)]),
                row("h2d_pinned", &[("gbps", 40.0)]),
                row("grad_scaler_overflow", &[("skipped_steps", 9.0), ("final_scale", 128.0)]),
                row(
                    "data_stall_224",
                    &[
                        ("stall_share", 0.25),
                        ("stall_share_after_first_batch", 0.1),
                        ("images_per_s", 2000.0),
                        ("workers", 14.0),
                    ],
                ),
            ],
        };
        serde_json::to_string_pretty(&file).unwrap()
    }

    /// A run folder as run.sh leaves it, on a GPU machine or (`gpu = false`) on a CPU one.
    fn run_folder(dir: &Path, gpu: bool) {
        write(
            dir,
            "parts/kit.env",
            "KIT_PROFILE=release\nKIT_TESTS=\"torchlight-tensor torchlight-optim\"\n",
        );
        write(
            dir,
            "parts/environment.env",
            &format!("torch=2.11.0+cu130\ngpu_present={}\n# note\n", if gpu { "yes" } else { "no" }),
        );
        let mut tsv = String::from("environment\thost\tpassed\t1\tparts/environment.env\ttorch 2.11\n");
        tsv.push_str("device\thost\tpassed\t0\t-\tCUDA available\n");
        if gpu {
            write(dir, "parts/t.json", r#"{"listed": 5, "passed": 5, "failed": 0, "failures": []}"#);
            write(dir, "parts/o.json", r#"{"listed": 4, "passed": 4, "failed": 0, "failures": []}"#);
            write(dir, "train/summary.json", r#"{"test_acc": 0.5, "train_images_per_s": 900.0}"#);
            write(dir, "parts/bench-torchlight.json", &bench_file("torchlight", 0.08, 0.04));
            write(dir, "parts/bench-pytorch.json", &bench_file("pytorch", 0.075, 0.0375));
            tsv.push_str("tests:torchlight-tensor\tcuda\tpassed\t9\tparts/t.json\t5 of 5\n");
            tsv.push_str("tests:torchlight-optim\tcuda\tpassed\t9\tparts/o.json\t4 of 4\n");
            tsv.push_str("train\tcuda\tpassed\t20\ttrain\t2 epochs\n");
            tsv.push_str("bench\tcuda\tpassed\t40\tparts/bench-torchlight.json\tevery row\n");
            tsv.push_str("bench-pytorch\tcuda\tpassed\t30\tparts/bench-pytorch.json\tevery row\n");
        } else {
            write(dir, "parts/t.json", r#"{"listed": 5}"#);
            write(dir, "parts/o.json", r#"{"listed": 4}"#);
            tsv.push_str(
                "tests:torchlight-tensor\tcuda\tskipped\t0\tparts/t.json\tskipped: no CUDA (5 listed)\n",
            );
            tsv.push_str(
                "tests:torchlight-optim\tcuda\tskipped\t0\tparts/o.json\tskipped: no CUDA (4 listed)\n",
            );
            tsv.push_str("train\tcuda\tskipped\t0\t-\tskipped: no CUDA\n");
            tsv.push_str("train-cpu-stand-in\thost\tpassed\t12\t-\tthe command on the CPU\n");
            tsv.push_str("bench\tcuda\tskipped\t0\t-\tskipped: no CUDA\n");
            tsv.push_str("bench-pytorch\tcuda\tskipped\t2\t-\tskipped: no CUDA\n");
        }
        write(dir, "parts.tsv", &tsv);
    }

    #[test]
    fn a_cpu_run_validates_with_every_cuda_part_skipped_and_no_figures() {
        let dir = tempfile::tempdir().unwrap();
        run_folder(dir.path(), false);
        let report = build_report(dir.path()).unwrap();
        assert!(!report.cuda);
        assert_eq!(report.machine["torch"], "2.11.0+cu130");
        assert_eq!(report.kit["KIT_TESTS"], "torchlight-tensor torchlight-optim");
        assert_eq!(report.figures, Figures::default());
        assert_eq!((report.counts["passed"], report.counts["skipped"]), (3, 5));
        assert_eq!(validate(&report).unwrap().len(), 8);
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<GpuReport>(&text).unwrap(), report);

        let mut broken = report.clone();
        broken.parts.retain(|p| p.name != "tests:torchlight-optim");
        broken.parts[2].detail = "ran anyway".into();
        let err = validate(&broken).unwrap_err().to_string();
        assert!(err.contains("part `tests:torchlight-optim` is missing"), "{err}");
        assert!(
            err.contains("part `tests:torchlight-tensor` needs CUDA but is skipped (ran anyway)"),
            "{err}"
        );
        let mut failed_host = report.clone();
        failed_host.parts[1].status = "failed".into();
        assert!(validate(&failed_host).unwrap_err().to_string().contains("part `device` failed"));
        let err = record_into(&report).unwrap_err().to_string();
        assert!(err.contains("nothing to record"), "{err}");
    }

    #[test]
    fn a_gpu_run_gives_the_figures_and_its_section() {
        let dir = tempfile::tempdir().unwrap();
        run_folder(dir.path(), true);
        let report = build_report(dir.path()).unwrap();
        assert!(report.cuda);
        let f = &report.figures;
        assert!((f.amp_speedup_torchlight.unwrap() - 2.0).abs() < 1e-12);
        assert!((f.fp32_ratio_torchlight_over_pytorch.unwrap() - 0.08 / 0.075).abs() < 1e-12);
        assert_eq!(f.pinned_over_pageable_torchlight, Some(4.0));
        assert_eq!(f.grad_scaler_skipped_steps_pytorch, Some(9.0));
        assert_eq!(
            (f.train_test_acc, f.cuda_tests_passed, f.cuda_tests_failed),
            (Some(0.5), Some(9.0), Some(0.0))
        );
        assert_eq!(f.data_stall_share, Some(0.25));
        assert_eq!(validate(&report).unwrap().len(), 7);
        let section = gpu_section(&report);
        assert!(section.starts_with(BEGIN) && section.ends_with(&format!("{END}\n")));
        assert!(
            section.contains("| AMP speed-up (fp32 step / AMP step) | 2.00x | 2.00x | >= 1.8x | yes |"),
            "{section}"
        );
        assert!(section.contains("| 9, 128 | 9, 128 | 9, 128 | yes |"), "{section}");
        assert!(section.contains("25% (10% after each epoch's first batch; 2000 img/s)"), "{section}");
        let recorded = record_into(&report).unwrap();
        assert!(recorded.starts_with("# Benchmarks\n\nCPU table\n\n<!-- gpu-kit:begin"), "{recorded}");
        assert!(recorded.ends_with("after\n"), "text after the section is kept: {recorded}");

        let mut failing = report.clone();
        failing.parts[3].status = "failed".into();
        assert!(validate(&failing).unwrap_err().to_string().contains("part `tests:torchlight-optim` failed"));
    }

    /// Records `report` into a document that has the no-run section, and returns the document.
    fn record_into(report: &GpuReport) -> Result<String> {
        let dir = tempfile::tempdir().unwrap();
        let (r, docs) = (dir.path().join("r.json"), dir.path().join("benchmarks.md"));
        std::fs::write(&r, serde_json::to_string(report).unwrap()).unwrap();
        std::fs::write(&docs, format!("# Benchmarks\n\nCPU table\n\n{}after\n", no_gpu_section())).unwrap();
        record(&r, &docs)?;
        Ok(std::fs::read_to_string(&docs).unwrap())
    }

    #[test]
    fn the_section_is_replaced_in_place_or_appended() {
        let section = no_gpu_section();
        assert_eq!(with_gpu_section("# B\n", &section), format!("# B\n\n{section}"));
        assert_eq!(with_gpu_section("# B", &section), format!("# B\n\n{section}"));
        let doc = format!("# B\n\n{section}tail\n");
        let new = format!("{BEGIN}\nnew\n{END}\n");
        assert_eq!(with_gpu_section(&doc, &new), format!("# B\n\n{new}tail\n"));
        assert_eq!(gpu_section_of(&doc), Some(section.clone()));
        assert_eq!(gpu_section_of("# B\n"), None);
        assert!(section.contains("No GPU run yet"));
    }

    #[test]
    fn the_committed_benchmarks_page_has_a_gpu_section() {
        let doc = include_str!("../../../docs/benchmarks.md");
        let section = gpu_section_of(doc).expect("docs/benchmarks.md has the GPU kit's section");
        if !section.contains("| figure | Torchlight | PyTorch | target | met |") {
            assert_eq!(section, no_gpu_section(), "without a recorded run, the section is the no-run text");
        }
    }

    #[test]
    fn env_files_and_bad_lines_are_handled() {
        let env = parse_env("A=1\nB=\"two words\"\n# comment\nnot a pair\nc d=3\n");
        assert_eq!(env.len(), 2);
        assert_eq!(env["B"], "two words");
        let dir = tempfile::tempdir().unwrap();
        let err = parse_parts("a\thost\tpassed\n", dir.path()).unwrap_err().to_string();
        assert!(err.contains("line 1: expected 6 tab-separated fields, found 3"), "{err}");
        let parts = parse_parts("a\thost\tpassed\t1\tmissing.json\tok\n", dir.path()).unwrap();
        assert!(parts[0].detail.starts_with("ok (its data could not be read:"), "{}", parts[0].detail);
        assert!(parse_parts("a\thost\tpassed\tsoon\t-\tok\n", dir.path()).is_err());
    }
}
