//! The bench report: statistics per workload from the raw timings `cargo xtask bench` records,
//! printed as a table and written as `report.json`, `docs/benchmarks.md` and a bar chart of
//! the ratios (`docs/benchmarks.png`).
//!
//! Raw format (`raw.tsv`, written by xtask): `#key=value` meta lines, then one line per
//! workload: `name \t description \t torchlight seconds (space-separated) \t pytorch seconds`,
//! and per round and side the input pipelines' stage timings (`stages.rs`):
//! `@stages \t pipeline \t torchlight|pytorch \t stage=ms_per_image ...`.

use crate::format::{fmt_time, utc_now};
use crate::gpu_report;
use crate::stats::{summarize, Summary};
use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

static FONT: &[u8] = include_bytes!("../../train/assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// One side's statistics, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct SideStats {
    /// Median time.
    pub median_s: f64,
    /// Fastest repetition.
    pub min_s: f64,
    /// Slowest repetition.
    pub max_s: f64,
    /// First quartile.
    pub q1_s: f64,
    /// Third quartile.
    pub q3_s: f64,
    /// Repetitions measured (warm-up excluded).
    pub reps: usize,
    /// Every repetition, in run order.
    pub times_s: Vec<f64>,
}

impl SideStats {
    fn new(times: Vec<f64>, s: Summary) -> Self {
        SideStats {
            median_s: s.median,
            min_s: s.min,
            max_s: s.max,
            q1_s: s.q1,
            q3_s: s.q3,
            reps: s.n,
            times_s: times,
        }
    }
}

/// One workload's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Workload name (`train_resnet18_64_b32`, ...).
    pub name: String,
    /// What one repetition does.
    pub description: String,
    /// Median seconds per repetition, Torchlight.
    pub torchlight_median_s: f64,
    /// Median seconds per repetition, PyTorch.
    pub pytorch_median_s: f64,
    /// `torchlight_median_s / pytorch_median_s`: below 1 means Torchlight is faster.
    pub ratio: f64,
    /// The ratio issue 10 targets for this workload, if any.
    pub target_ratio: Option<f64>,
    /// Whether the measured ratio meets the target.
    pub target_met: Option<bool>,
    /// Torchlight's statistics.
    pub torchlight: SideStats,
    /// PyTorch's statistics.
    pub pytorch: SideStats,
}

/// One side's stage timings of one input pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct StageTimes {
    /// `train` or `eval`.
    pub pipeline: String,
    /// `torchlight` or `pytorch`.
    pub side: String,
    /// Milliseconds per image by stage: the lowest over the rounds.
    pub ms_per_image: BTreeMap<String, f64>,
}

/// A parsed raw file: meta lines and entries.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `#key=value` lines (threads, mode, image count, versions).
    pub meta: BTreeMap<String, String>,
    /// One entry per workload, in run order.
    pub entries: Vec<Entry>,
    /// The input pipelines' stage timings, per pipeline and side, in first-seen order.
    pub stages: Vec<StageTimes>,
}

/// Records one `@stages` raw line (its fields after the tag), keeping each stage's lowest time.
fn parse_stages(report: &mut Report, fields: &[&str], line: usize) -> Result<()> {
    let [pipeline, side, timings] = fields else {
        bail!("raw line {line}: `@stages` needs pipeline, side and timings, found {} fields", fields.len());
    };
    let i = match report.stages.iter().position(|s| s.pipeline == *pipeline && s.side == *side) {
        Some(i) => i,
        None => {
            report.stages.push(StageTimes {
                pipeline: pipeline.to_string(),
                side: side.to_string(),
                ms_per_image: BTreeMap::new(),
            });
            report.stages.len() - 1
        }
    };
    for kv in timings.split_whitespace() {
        let parsed = kv.split_once('=').and_then(|(k, v)| Some((k, v.parse::<f64>().ok()?)));
        let Some((stage, ms)) = parsed else { bail!("raw line {line}: bad stage timing `{kv}`") };
        let slot = report.stages[i].ms_per_image.entry(stage.to_string()).or_insert(ms);
        *slot = slot.min(ms);
    }
    Ok(())
}

/// The target ratio of issue 10 for a workload: input pipeline 2x PyTorch's throughput,
/// training step and eval within 5%, optimizer step and checkpoint I/O no slower; and issue
/// 18's for a whole small-image training run: 2x PyTorch's images/s; issue 28's for a model-EMA
/// update and a Mixup/CutMix batch: no slower than `torch._foreach_lerp_` and torchvision's v2;
/// issue 31's for a text classifier's training step: no slower than PyTorch's (the text input
/// pipeline has no target); issue 40's for a whole run of the modern recipe: 0.6 of PyTorch's
/// time.
pub fn target_ratio(name: &str) -> Option<f64> {
    if name.starts_with("train_e2e_modern") {
        Some(0.6)
    } else if name.starts_with("pipeline") || name.starts_with("train_e2e") {
        Some(0.5)
    } else if name.starts_with("train_text") {
        Some(1.0)
    } else if name.starts_with("train") || name.starts_with("eval") {
        Some(1.05)
    } else if name.starts_with("adamw")
        || name.starts_with("checkpoint")
        || name.starts_with("ema")
        || name.starts_with("mixup")
    {
        Some(1.0)
    } else {
        None
    }
}

fn parse_times(field: &str, line: usize) -> Result<Vec<f64>> {
    field
        .split_whitespace()
        .map(|t| t.parse::<f64>().with_context(|| format!("raw line {line}: bad time `{t}`")))
        .collect()
}

/// Parses the raw timings; workloads where a side has no valid time are skipped with a note.
pub fn parse_raw(text: &str) -> Result<Report> {
    let mut report = Report::default();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        if let Some(meta) = line.strip_prefix('#') {
            if let Some((k, v)) = meta.split_once('=') {
                report.meta.insert(k.trim().to_string(), v.trim().to_string());
            }
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields[0] == "@stages" {
            parse_stages(&mut report, &fields[1..], line_no)?;
            continue;
        }
        if fields.len() != 4 {
            bail!("raw line {line_no}: expected 4 tab-separated fields, found {}", fields.len());
        }
        let (tl, pt) = (parse_times(fields[2], line_no)?, parse_times(fields[3], line_no)?);
        let (Some(ts), Some(ps)) = (summarize(&tl), summarize(&pt)) else {
            eprintln!("report: `{}` has no timings on one side; left out", fields[0]);
            continue;
        };
        let ratio = ts.median / ps.median;
        let target = target_ratio(fields[0]);
        report.entries.push(Entry {
            name: fields[0].to_string(),
            description: fields[1].to_string(),
            torchlight_median_s: ts.median,
            pytorch_median_s: ps.median,
            ratio,
            target_ratio: target,
            target_met: target.map(|t| ratio <= t),
            torchlight: SideStats::new(tl, ts),
            pytorch: SideStats::new(pt, ps),
        });
    }
    Ok(report)
}

fn spread(s: &SideStats) -> String {
    format!("{}-{}", fmt_time(s.min_s), fmt_time(s.max_s))
}

/// The table: workload, medians, ratio, spreads (min-max), target.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| workload | torchlight median | pytorch median | ratio TL/PT | torchlight min-max | pytorch min-max | target | met |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|:---:|");
    for e in &report.entries {
        let target = e.target_ratio.map(|t| format!("<= {t:.2}")).unwrap_or_else(|| "-".into());
        let met = match e.target_met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {} | {} | {} | {} |",
            e.name,
            fmt_time(e.torchlight_median_s),
            fmt_time(e.pytorch_median_s),
            e.ratio,
            spread(&e.torchlight),
            spread(&e.pytorch),
            target,
            met
        );
    }
    out
}

/// How close each side's input pipeline comes to its decode-only ceiling (pipeline time /
/// decode time; with 2 workers the ceiling is half the one-thread decode time).
pub fn ceiling_lines(report: &Report) -> Vec<String> {
    let find = |n: &str| report.entries.iter().find(|e| e.name == n);
    let Some(decode) = find("decode") else { return Vec::new() };
    let mut lines = Vec::new();
    for (name, workers) in [("pipeline_w0", 1.0), ("pipeline_w2", 2.0)] {
        if let Some(p) = find(name) {
            lines.push(format!(
                "- `{name}`: Torchlight {:.2}x its decode-only ceiling, PyTorch {:.2}x (target: Torchlight within 2x)",
                p.torchlight_median_s / (decode.torchlight_median_s / workers),
                p.pytorch_median_s / (decode.pytorch_median_s / workers),
            ));
        }
    }
    lines
}

/// The Mixup/CutMix row against the training step at the same batch and image size: each
/// side's share of a step (issue 40's target: Torchlight's under 2%).
pub fn mixup_share_lines(report: &Report) -> Vec<String> {
    let find = |n: &str| report.entries.iter().find(|e| e.name == n);
    let (Some(mix), Some(step)) = (find("mixup_cutmix_64_b32"), find("train_resnet18_64_b32")) else {
        return Vec::new();
    };
    vec![format!(
        "- `mixup_cutmix_64_b32` against `train_resnet18_64_b32` (32 images of 64x64 per batch): \
         Torchlight {:.2}% of a training step, PyTorch {:.2}% (target: Torchlight under 2%)",
        100.0 * mix.torchlight_median_s / step.torchlight_median_s,
        100.0 * mix.pytorch_median_s / step.pytorch_median_s,
    )]
}

/// The data-parallel rows against the one-process training step on the same images per step:
/// each side's speed-up from 1 process to 2 ranks.
pub fn scaling_lines(report: &Report) -> Vec<String> {
    let find = |n: &str| report.entries.iter().find(|e| e.name == n);
    let Some(single) = find("train_resnet18_64_b32") else { return Vec::new() };
    crate::allreduce::DDP_WORKLOADS
        .iter()
        .filter_map(|&(name, _, _)| {
            let ddp = find(name)?;
            let steps = crate::allreduce::DDP_STEPS as f64;
            Some(format!(
                "- `{name}` against `train_resnet18_64_b32` (the same 32 images per step): 2 ranks run a \
                 step {:.2}x as fast as 1 process in Torchlight, {:.2}x in PyTorch",
                single.torchlight_median_s / (ddp.torchlight_median_s / steps),
                single.pytorch_median_s / (ddp.pytorch_median_s / steps),
            ))
        })
        .collect()
}

/// The all-reduce rows as bandwidths, `- name: Torchlight X MB/s, PyTorch Y MB/s`.
pub fn bandwidth_lines(report: &Report) -> Vec<String> {
    report
        .entries
        .iter()
        .filter_map(|e| {
            let bytes = crate::allreduce::bytes_per_rep(&e.name)?;
            Some(format!(
                "- `{}`: Torchlight {:.0} MB/s, PyTorch {:.0} MB/s",
                e.name,
                bytes / e.torchlight_median_s / 1e6,
                bytes / e.pytorch_median_s / 1e6
            ))
        })
        .collect()
}

/// What each pipeline with a stage table runs.
fn pipeline_description(pipeline: &str) -> &'static str {
    match pipeline {
        "train" => "RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, batch 32",
        "eval" => "Resize(256) + CenterCrop(224) + ToTensor + Normalize, batch 32",
        "policy" => {
            "RandomResizedCrop(224) + RandomHorizontalFlip + TrivialAugmentWide + ToTensor + Normalize + \
             RandomErasing(0.25), batch 32"
        }
        _ => "",
    }
}

/// What a stage does, as the table's row label.
fn stage_label(pipeline: &str, stage: &str) -> String {
    match (pipeline, stage) {
        (_, "read") => "read the file (PIL: open + read + parse the header)".into(),
        ("train" | "policy", "decode") => {
            "decode to RGB u8 (Torchlight: header size, draw the crop, decode only the crop box with \
             the header and truncation checks, as ImageFolder does; PIL: `convert(\"RGB\")`, which \
             decodes the whole image)"
                .into()
        }
        (_, "decode") => {
            "decode to RGB u8 (Torchlight: `decode_bytes`, with the header and truncation checks; \
                          PIL: `convert(\"RGB\")`, which loads)"
                .into()
        }
        ("train" | "policy", "crop_resize") => {
            "RandomResizedCrop(224): draw, crop and resize (Torchlight: resize the decoded box; the draw \
             is in decode)"
                .into()
        }
        ("eval", "crop_resize") => {
            "Resize(256) + CenterCrop(224) (Torchlight: fused, resamples only the kept window)".into()
        }
        (_, "flip") => "horizontal flip (every other image, as p = 0.5)".into(),
        (_, "to_tensor") => "ToTensor".into(),
        (_, "normalize") => "Normalize".into(),
        (_, "policy") => "TrivialAugmentWide (one op of 14 at a random magnitude bin, Pillow's ops)".into(),
        (_, "erase") => "RandomErasing(0.25) on the normalised tensor".into(),
        (_, "to_tensor_normalize") => "ToTensor + Normalize (Torchlight: fused, one pass)".into(),
        (_, "batch") => "collate into batches of 32 (per image)".into(),
        (_, other) => other.into(),
    }
}

/// The stage tables: per pipeline, milliseconds per image of each stage on both sides, their
/// ratio, and the total. PyTorch's `ToTensor + Normalize` row is the sum of its two rows.
pub fn stage_tables(report: &Report) -> String {
    let mut out = String::new();
    let mut pipelines: Vec<&str> = Vec::new();
    for s in &report.stages {
        if !pipelines.contains(&s.pipeline.as_str()) {
            pipelines.push(&s.pipeline);
        }
    }
    let cell = |v: Option<&f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
    let ratio = |a: Option<&f64>, b: Option<&f64>| match (a, b) {
        (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    // The total counts ToTensor + Normalize once (fused or summed).
    let total = |ms: &BTreeMap<String, f64>| {
        (!ms.is_empty())
            .then(|| ms.iter().filter(|(k, _)| *k != "to_tensor" && *k != "normalize").map(|(_, v)| v).sum())
    };
    for pipeline in pipelines {
        let side = |name: &str| {
            let times = report.stages.iter().find(|s| s.pipeline == pipeline && s.side == name);
            let mut ms = times.map(|s| s.ms_per_image.clone()).unwrap_or_default();
            if let (None, Some(t), Some(n)) =
                (ms.get("to_tensor_normalize"), ms.get("to_tensor"), ms.get("normalize"))
            {
                ms.insert("to_tensor_normalize".into(), t + n);
            }
            ms
        };
        let (tl, pt) = (side("torchlight"), side("pytorch"));
        let _ = writeln!(out, "`{pipeline}`: {}\n", pipeline_description(pipeline));
        let _ = writeln!(out, "| stage | Torchlight ms/image | PIL/torchvision ms/image | ratio TL/PT |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        let mut stages: Vec<&str> = crate::stages::STAGES.to_vec();
        let others = tl.keys().chain(pt.keys()).map(String::as_str);
        for other in others {
            if !stages.contains(&other) {
                stages.push(other);
            }
        }
        for stage in stages {
            let (a, b) = (tl.get(stage), pt.get(stage));
            if a.is_some() || b.is_some() {
                let label = stage_label(pipeline, stage);
                let _ = writeln!(out, "| {label} | {} | {} | {} |", cell(a), cell(b), ratio(a, b));
            }
        }
        let (a, b): (Option<f64>, Option<f64>) = (total(&tl), total(&pt));
        let (a, b) = (a.as_ref(), b.as_ref());
        let _ = writeln!(out, "| **total** | **{}** | **{}** | **{}** |\n", cell(a), cell(b), ratio(a, b));
    }
    out
}

/// `Model name` of the first CPU in /proc/cpuinfo and its logical CPU count.
pub fn machine() -> (String, usize) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (model, cores)
}

/// `docs/benchmarks.md`: how it was made, the machine, the table, the chart, the ceiling lines.
pub fn markdown(report: &Report, date: &str, cpu: &str, cores: usize) -> String {
    let meta = |k: &str| report.meta.get(k).cloned().unwrap_or_else(|| "?".into());
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks: Torchlight against PyTorch\n");
    let _ = writeln!(
        md,
        "Generated by `cargo xtask bench{}` on {date}; do not edit by hand. Each workload runs \
         in a Torchlight process and a PyTorch process that stay alive for the whole bench and \
         take turns (rounds alternate which side goes first), on the same inputs and the same \
         thread count; warm-up repetitions are excluded. The ratio is Torchlight's median over \
         PyTorch's: below 1 means Torchlight is faster. Spreads are min-max over all repetitions.\n",
        if meta("mode") == "quick" { " --quick" } else { "" }
    );
    let _ = writeln!(md, "- Machine: {cpu}, {cores} logical CPUs (shared machine: absolute times are noisy, ratios are the figures)");
    let _ = writeln!(md, "- Threads: {} (`tch::set_num_threads` / `torch.set_num_threads`)", meta("threads"));
    let _ = writeln!(
        md,
        "- Versions: libtorch {} through tch {}; PyTorch {}, torchvision {}",
        meta("libtorch"),
        meta("tch"),
        meta("torch"),
        meta("torchvision")
    );
    let _ = writeln!(md, "- Mode: {} ({} images, {} rounds)\n", meta("mode"), meta("images"), meta("rounds"));
    md.push_str(&table(report));
    md.push_str("\n![Torchlight/PyTorch time ratio per workload](benchmarks.png)\n\n");
    md.push_str("## Workloads\n\n");
    for e in &report.entries {
        let _ = writeln!(md, "- `{}`: {}", e.name, e.description);
    }
    let bandwidth = bandwidth_lines(report);
    if !bandwidth.is_empty() {
        md.push_str("\n## All-reduce bandwidth\n\n");
        md.push_str(
            "Algorithm bandwidth: bytes each rank contributes per second (median repetition), \
             2 ranks on one machine over Gloo and loopback TCP.\n\n",
        );
        for line in bandwidth {
            let _ = writeln!(md, "{line}");
        }
    }
    let scaling = scaling_lines(report);
    if !scaling.is_empty() {
        md.push_str("\n## One process against two ranks\n\n");
        for line in scaling {
            let _ = writeln!(md, "{line}");
        }
    }
    let share = mixup_share_lines(report);
    if !share.is_empty() {
        md.push_str("\n## Mixup/CutMix against a training step\n\n");
        for line in share {
            let _ = writeln!(md, "{line}");
        }
    }
    let ceiling = ceiling_lines(report);
    if !ceiling.is_empty() {
        md.push_str("\n## Input pipeline against the decode-only ceiling\n\n");
        for line in ceiling {
            let _ = writeln!(md, "{line}");
        }
    }
    if !report.stages.is_empty() {
        md.push_str("\n## Input pipeline stage by stage\n\n");
        let _ = writeln!(
            md,
            "Milliseconds per image of each step, one thread (intra-op threads set to 1 on both \
             sides), over {} images spread over the bench's image folder, in the Torchlight and \
             PyTorch servers of this run; each figure is the lower of the rounds' means \
             (`stage_timings` in `pytorch_bench.py`, `stages.rs` in torchlight-bench).\n",
            meta("stage_images")
        );
        md.push_str(&stage_tables(report));
    }
    md.trim_end().to_string() + "\n"
}

fn register_font() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            panic!("the DejaVu Sans font compiled into torchlight-bench is a valid TrueType font");
        }
    });
}

/// Draws the ratio of each workload as a horizontal bar, with the parity line at 1 and each
/// target marked; green where the target is met, orange where not, grey without a target.
pub fn plot(report: &Report, path: &Path) -> Result<()> {
    register_font();
    let (w, h) = (1100u32, 120 + 46 * report.entries.len().max(1) as u32);
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        draw(&root, report).map_err(|e| anyhow::anyhow!("plotting {}: {e}", path.display()))?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let image = image::RgbImage::from_raw(w, h, buffer).expect("the buffer is w * h * 3 bytes");
    image.save_with_format(path, image::ImageFormat::Png).with_context(|| format!("{}", path.display()))?;
    Ok(())
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>, report: &Report) -> DrawResult {
    let n = report.entries.len();
    let max_ratio = report.entries.iter().map(|e| e.ratio).fold(1.2f64, f64::max);
    let x_max = (max_ratio * 1.15).min(20.0);
    let names: Vec<String> = report.entries.iter().map(|e| e.name.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption("Torchlight / PyTorch time (lower is better; 1 = parity)", (FAMILY, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(250)
        // `0..n - 1` segmented holds exactly `n` rows (segments `0..=n - 1`).
        .build_cartesian_2d(0.0..x_max, (0..n.saturating_sub(1)).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("time ratio Torchlight / PyTorch (median)")
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if *i < n => names[n - 1 - *i].clone(),
            _ => String::new(),
        })
        .y_labels(n.max(1))
        .axis_desc_style((FAMILY, 17))
        .label_style((FAMILY, 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (i, e) in report.entries.iter().enumerate() {
        // The first workload at the top.
        let row = n - 1 - i;
        let colour = match e.target_met {
            Some(true) => RGBColor(44, 160, 44),
            Some(false) => RGBColor(255, 127, 14),
            None => RGBColor(150, 150, 150),
        };
        let bar = e.ratio.min(x_max);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, SegmentValue::Exact(row)), (bar, SegmentValue::Exact(row + 1))],
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{:.2}", e.ratio),
            (bar + x_max * 0.01, SegmentValue::CenterOf(row)),
            (FAMILY, 15).into_font().color(&BLACK),
        )))?;
        if let Some(t) = e.target_ratio {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(t, SegmentValue::Exact(row)), (t, SegmentValue::Exact(row + 1))],
                BLACK.stroke_width(2),
            )))?;
        }
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
        RGBColor(200, 0, 0).stroke_width(1),
    )))?;
    Ok(())
}

/// First line of the history section of `benchmarks.md`: before/after measurements of speed
/// work, written by hand from bench runs, which a bench run keeps as it is.
pub const HISTORY_BEGIN: &str =
    "<!-- history:begin (before/after tables of speed work, kept by `cargo xtask bench`) -->";
/// Last line of the history section.
pub const HISTORY_END: &str = "<!-- history:end -->";

/// The history section of `doc` (markers included, ending in a newline), if it has one.
fn history_section_of(doc: &str) -> Option<String> {
    let b = doc.find(HISTORY_BEGIN)?;
    let e = doc[b..].find(HISTORY_END)? + b + HISTORY_END.len();
    Some(format!("{}\n", &doc[b..e]))
}

/// Writes `report.json` into `out_dir` and, when `docs` is given, `benchmarks.md` and
/// `benchmarks.png` into it (keeping the history and GPU sections an existing `benchmarks.md`
/// has); returns the table for the terminal.
pub fn write_all(report: &Report, out_dir: &Path, docs: Option<&Path>) -> Result<String> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("{}", out_dir.display()))?;
    let json = serde_json::to_string_pretty(&report.entries)?;
    std::fs::write(out_dir.join("report.json"), json + "\n")?;
    if !report.stages.is_empty() {
        let json = serde_json::to_string_pretty(&report.stages)?;
        std::fs::write(out_dir.join("stages.json"), json + "\n")?;
    }
    if let Some(docs) = docs {
        std::fs::create_dir_all(docs)?;
        let (cpu, cores) = machine();
        let path = docs.join("benchmarks.md");
        // The GPU section belongs to the GPU kit's report (`gpu_report.rs`), the history to
        // the people who measured it: both kept as they are.
        let existing = std::fs::read_to_string(&path).ok();
        let gpu = existing
            .as_deref()
            .and_then(gpu_report::gpu_section_of)
            .unwrap_or_else(gpu_report::no_gpu_section);
        let mut md = markdown(report, &utc_now(), &cpu, cores);
        if let Some(history) = existing.as_deref().and_then(history_section_of) {
            md = format!("{}\n\n{history}", md.trim_end());
        }
        let md = gpu_report::with_gpu_section(&md, &gpu);
        std::fs::write(&path, md).with_context(|| format!("{}", path.display()))?;
        plot(report, &docs.join("benchmarks.png"))?;
    }
    let mut text = table(report);
    for line in bandwidth_lines(report)
        .into_iter()
        .chain(scaling_lines(report))
        .chain(mixup_share_lines(report))
        .chain(ceiling_lines(report))
    {
        text.push_str(&line);
        text.push('\n');
    }
    if !report.stages.is_empty() {
        text.push('\n');
        text.push_str(&stage_tables(report));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: &str = "#threads=2\n#mode=quick\n\
        train_resnet18_64_b32\tone step\t0.10 0.12 0.11\t0.10 0.10 0.10\n\
        decode\tdecode all\t1.0 1.0\t2.0 2.0\n\
        pipeline_w0\tone epoch\t1.5 1.5\t4.0 4.0\n\
        empty\tno pytorch\t1.0\t\n";

    #[test]
    fn raw_is_parsed_into_ratios_and_targets() {
        let r = parse_raw(RAW).unwrap();
        assert_eq!(r.meta["threads"], "2");
        assert_eq!(r.entries.len(), 3, "the workload without PyTorch timings is left out");
        let e = &r.entries[0];
        assert!((e.torchlight_median_s - 0.11).abs() < 1e-12);
        assert!((e.ratio - 1.1).abs() < 1e-9);
        assert_eq!((e.target_ratio, e.target_met), (Some(1.05), Some(false)));
        assert_eq!(r.entries[1].target_ratio, None);
        assert_eq!(r.entries[2].target_met, Some(true));
        assert!(parse_raw("a\tb\tc\n").is_err());
        assert!(parse_raw("a\tb\tx\t1\n").is_err());
    }

    #[test]
    fn text_rows_have_their_targets() {
        assert_eq!(target_ratio("train_text_bilstm_b64"), Some(1.0));
        assert_eq!(target_ratio("train_resnet18_64_b32"), Some(1.05));
        assert_eq!(target_ratio("text_pipeline_w2"), None);
    }

    #[test]
    fn all_reduce_rows_become_bandwidths() {
        // 4 all-reduces of 25 MiB per repetition: 104.9 MB in 0.1 s and in 0.2 s.
        let r = parse_raw("allreduce_2r_25mib\tx\t0.1 0.1\t0.2 0.2\ndecode\ty\t1\t1\n").unwrap();
        assert_eq!(
            bandwidth_lines(&r),
            ["- `allreduce_2r_25mib`: Torchlight 1049 MB/s, PyTorch 524 MB/s".to_string()]
        );
    }

    #[test]
    fn data_parallel_rows_become_speed_ups_over_one_process() {
        // One process: 1.0 s (TL) and 1.2 s (PT) per step; 2 ranks: 2 steps in 1.0 s and 2.0 s.
        let r = parse_raw(
            "train_resnet18_64_b32\tx\t1.0 1.0\t1.2 1.2\ntrain_ddp_2r_resnet18_64_b16\ty\t1.0 1.0\t2.0 2.0\n",
        )
        .unwrap();
        let lines = scaling_lines(&r);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].contains("2.00x as fast as 1 process in Torchlight, 1.20x in PyTorch"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn mixup_row_becomes_a_share_of_a_training_step() {
        // A step: 0.2 s (TL) and 0.25 s (PT); a Mixup/CutMix batch: 2 ms and 10 ms.
        let r = parse_raw(
            "train_resnet18_64_b32\tx\t0.2 0.2\t0.25 0.25\nmixup_cutmix_64_b32\ty\t0.002 0.002\t0.01 0.01\n",
        )
        .unwrap();
        let lines = mixup_share_lines(&r);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("Torchlight 1.00% of a training step, PyTorch 4.00%"), "{}", lines[0]);
        // Without the step row there is nothing to divide by.
        assert!(mixup_share_lines(&parse_raw("mixup_cutmix_64_b32\ty\t0.002\t0.01\n").unwrap()).is_empty());
    }

    #[test]
    fn modern_end_to_end_row_has_its_own_target() {
        assert_eq!(target_ratio("train_e2e_modern_resnet18_32_w2"), Some(0.6));
        assert_eq!(target_ratio("train_e2e_resnet18_32_w2"), Some(0.5));
    }

    #[test]
    fn writer_emits_json_markdown_and_png() {
        let r = parse_raw(RAW).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("docs");
        let text = write_all(&r, dir.path(), Some(&docs)).unwrap();
        assert!(text.contains("| train_resnet18_64_b32 |"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
        let first = &json[0];
        for key in ["name", "torchlight_median_s", "pytorch_median_s", "ratio"] {
            assert!(first.get(key).is_some(), "report.json lacks {key}");
        }
        let md = std::fs::read_to_string(docs.join("benchmarks.md")).unwrap();
        assert!(md.contains("benchmarks.png") && md.contains("logical CPUs"));
        assert!(md.contains("decode-only ceiling"));
        assert!(md.ends_with(&gpu_report::no_gpu_section()), "a new file gets the no-run GPU section");
        // A recorded GPU section survives the next CPU bench.
        let recorded = format!("{}\nrecorded\n{}\n", gpu_report::BEGIN, gpu_report::END);
        std::fs::write(docs.join("benchmarks.md"), gpu_report::with_gpu_section(&md, &recorded)).unwrap();
        write_all(&r, dir.path(), Some(&docs)).unwrap();
        let md = std::fs::read_to_string(docs.join("benchmarks.md")).unwrap();
        assert!(md.contains("decode-only ceiling") && md.ends_with(&recorded), "{md}");
        // So does a history section, between the table and the GPU section.
        let history = format!("{HISTORY_BEGIN}\n| stage | before | after |\n{HISTORY_END}\n");
        let with_history = md.replace(gpu_report::BEGIN, &format!("{history}\n{}", gpu_report::BEGIN));
        std::fs::write(docs.join("benchmarks.md"), with_history).unwrap();
        write_all(&r, dir.path(), Some(&docs)).unwrap();
        let md = std::fs::read_to_string(docs.join("benchmarks.md")).unwrap();
        assert!(md.contains(&history) && md.ends_with(&recorded), "{md}");
        assert!(md.find(&history) > md.find("decode-only ceiling"), "{md}");
        let png = image::open(docs.join("benchmarks.png")).unwrap();
        assert!(png.width() > 100);
    }

    #[test]
    fn stage_lines_become_per_stage_tables() {
        // Two rounds per side: the lower figure of each stage counts.
        let raw = "#stage_images=4\n\
            @stages\ttrain\ttorchlight\tread=0.2 decode=2.0 crop_resize=1.0 flip=0.1 to_tensor_normalize=0.2 batch=0.5\n\
            @stages\ttrain\tpytorch\tread=0.3 decode=3.0 crop_resize=2.0 flip=0.1 to_tensor=0.4 normalize=0.6 batch=0.6\n\
            @stages\ttrain\ttorchlight\tread=0.1 decode=2.5 crop_resize=0.5 flip=0.1 to_tensor_normalize=0.2 batch=0.6\n\
            @stages\teval\ttorchlight\tread=0.1 decode=2.0 crop_resize=1.0 to_tensor_normalize=0.2 batch=0.5\n\
            decode\ty\t1\t1\n";
        let r = parse_raw(raw).unwrap();
        assert_eq!(r.entries.len(), 1);
        assert_eq!(r.stages.len(), 3);
        assert_eq!(r.stages[0].ms_per_image["crop_resize"], 0.5);
        assert_eq!(r.stages[0].ms_per_image["decode"], 2.0);
        let t = stage_tables(&r);
        assert!(
            t.contains(
                "| RandomResizedCrop(224): draw, crop and resize (Torchlight: resize the decoded box; \
                 the draw is in decode) | 0.500 | 2.000 | 0.25 |"
            ),
            "{t}"
        );
        // PyTorch's ToTensor + Normalize is the sum of its two stages, counted once in the total.
        assert!(
            t.contains("| ToTensor + Normalize (Torchlight: fused, one pass) | 0.200 | 1.000 | 0.20 |"),
            "{t}"
        );
        assert!(t.contains("| ToTensor | - | 0.400 | - |"), "{t}");
        assert!(t.contains("| **total** | **3.400** | **7.000** | **0.49** |"), "{t}");
        // Eval has no flip row and no PyTorch column here.
        let eval = &t[t.find("`eval`").unwrap()..];
        assert!(
            !eval.contains("flip") && eval.contains("| **total** | **3.800** | **-** | **-** |"),
            "{eval}"
        );
        let dir = tempfile::tempdir().unwrap();
        let text = write_all(&r, dir.path(), Some(&dir.path().join("docs"))).unwrap();
        assert!(text.contains("`train`: RandomResizedCrop(224)"), "{text}");
        let md = std::fs::read_to_string(dir.path().join("docs/benchmarks.md")).unwrap();
        assert!(md.contains("## Input pipeline stage by stage") && md.contains("over 4 images"), "{md}");
        assert!(dir.path().join("stages.json").exists());
        assert!(parse_raw("@stages\ttrain\ttorchlight\tread=x\n").is_err());
        assert!(parse_raw("@stages\ttrain\n").is_err());
    }
}
