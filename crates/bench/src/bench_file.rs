//! The files of the GPU proof kit's bench rows: a [`BenchFile`] of [`Row`]s, which `gpu.rs`
//! writes for Torchlight and `pytorch_gpu_bench.py` for PyTorch, and which the report
//! (`gpu_report.rs`) reads; and [`write_json`], how every kit file is written.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The detail of a row or part that needs CUDA on a machine without it.
pub const NO_CUDA: &str = "skipped: no CUDA";

/// One measured row of a [`BenchFile`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Row name, the same on both sides (`resnet50_train_amp`, ...).
    pub name: String,
    /// `ok`, `failed` or `skipped`.
    pub status: String,
    /// What the row measures.
    #[serde(default)]
    pub description: String,
    /// Why a row failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The row's figures by name (`median_step_s`, `gbps`, `stall_share`, ...).
    #[serde(default)]
    pub values: BTreeMap<String, f64>,
    /// Every timed repetition, in seconds.
    #[serde(default)]
    pub times_s: Vec<f64>,
}

/// What one side (Torchlight or PyTorch) measured on the GPU machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// `torchlight` or `pytorch`.
    pub side: String,
    /// Whether this side could use CUDA.
    pub cuda: bool,
    /// Why not, when it could not.
    #[serde(default)]
    pub reason: Option<String>,
    /// Versions of what ran (`torch`, `tch`, `model`, ...).
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// The rows, in run order.
    pub rows: Vec<Row>,
}

/// Writes `value` as pretty JSON through a temporary file and a rename, so a reader never
/// sees half a file.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let tmp = path.with_extension("json.partial");
    let text = serde_json::to_string_pretty(value)? + "\n";
    std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}", path.display()))?;
    Ok(())
}
