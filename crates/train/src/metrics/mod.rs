//! Metrics: a small trait (`update` / `compute` / `reset`, with a saveable state) and the
//! built-in metrics of the classification, multi-label and regression tasks, and calibration.
//!
//! Metrics accumulate on the device the model's outputs live on and read back to the host only
//! in [`Metric::compute`], once per epoch (or per logging interval), so a CUDA training loop is
//! never stalled by `.item()` calls. Their state is a list of named tensors, saved in mid-epoch
//! checkpoints so that a resumed epoch reports the same figures as an uninterrupted one.

mod calibration;
mod classification;
mod errors;
mod multilabel;
mod regression;
mod report;

pub use calibration::{
    brier_score, calibration_scores, expected_calibration_error, fit_temperature, maximum_calibration_error,
    negative_log_likelihood, reliability_bins, Calibration, CalibrationScores, ReliabilityBin,
    CALIBRATION_BINS, TEMPERATURE_RANGE,
};
pub use classification::{
    Accuracy, ClassificationMetrics, ConfusionMatrix, ConfusionMatrixMetric, MetricsSummary, TopKAccuracy,
};
pub use errors::{worst_misclassified, Misclassified};
pub use multilabel::{MeanAveragePrecision, MultiLabelF1};
pub use regression::{MeanAbsoluteError, RootMeanSquaredError};
pub use report::{ClassScores, ClassificationReport, Confusion};

use crate::distributed::Distributed;
use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};

/// A metric accumulated over an epoch (`torchmetrics.Metric`'s `update` / `compute` / `reset`).
///
/// `update` gets the model's output and the targets of one batch as the task hands them over
/// (see each task for the shapes) and must not read anything back to the host; `compute` reads
/// the accumulated state once and returns named values (`("acc", 0.93)`), which the Trainer
/// prefixes with the stage (`val_acc`) for logs, checkpoints and early stopping.
pub trait Metric {
    /// Adds one batch.
    fn update(&mut self, output: &Tensor, target: &Tensor) -> Result<()>;

    /// The values so far, as `(name, value)` pairs; NaN where nothing was seen yet.
    fn compute(&self) -> Vec<(String, f64)>;

    /// Clears the state for the next epoch.
    fn reset(&mut self);

    /// The accumulated state as named tensors (empty before the first update), for checkpoints.
    fn state(&self) -> Vec<(String, Tensor)>;

    /// Restores a state saved by [`Metric::state`].
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()>;

    /// `self` as `Any`, to reach a metric's own accessors (e.g. the confusion matrix).
    fn as_any(&self) -> &dyn Any;

    /// How the [`state`](Metric::state) of several data-parallel ranks combines into the
    /// state of the whole data; default [`Reduction::Sum`].
    fn reduction(&self) -> Reduction {
        Reduction::Sum
    }
}

/// How a metric's state tensors combine across the ranks of a distributed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// Added element-wise (counts, sums, a confusion matrix).
    Sum,
    /// Concatenated along the first dimension in rank order (kept scores and targets).
    Concat,
}

/// Named running sums on the device of the first update: the state most metrics need.
#[derive(Debug, Default)]
pub(crate) struct Sums {
    names: &'static [&'static str],
    values: Option<Vec<Tensor>>,
}

impl Sums {
    pub(crate) fn new(names: &'static [&'static str]) -> Self {
        Sums { names, values: None }
    }

    /// The sums, created as zeros shaped `shape` (of dtype `kind`) on `device` at first use.
    pub(crate) fn get(&mut self, shape: &[i64], kind: Kind, device: Device) -> &mut [Tensor] {
        let n = self.names.len();
        self.values.get_or_insert_with(|| (0..n).map(|_| Tensor::zeros(shape, (kind, device))).collect())
    }

    /// The sums on the host as `f64` vectors (one read), or `None` before any update.
    pub(crate) fn read(&self) -> Option<Vec<Vec<f64>>> {
        let values = self.values.as_ref()?;
        let flat: Vec<Tensor> = values.iter().map(|t| t.to_kind(Kind::Double).reshape([-1])).collect();
        let lens: Vec<usize> = flat.iter().map(|t| t.numel()).collect();
        let packed = Tensor::cat(&flat, 0).to_device(Device::Cpu);
        let all = Vec::<f64>::try_from(&packed).expect("a CPU f64 tensor converts to Vec<f64>");
        let mut out = Vec::new();
        let mut at = 0;
        for len in lens {
            out.push(all[at..at + len].to_vec());
            at += len;
        }
        Some(out)
    }

    pub(crate) fn reset(&mut self) {
        self.values = None;
    }

    pub(crate) fn state(&self) -> Vec<(String, Tensor)> {
        match &self.values {
            Some(values) => {
                self.names.iter().zip(values).map(|(n, t)| (n.to_string(), t.shallow_clone())).collect()
            }
            None => Vec::new(),
        }
    }

    pub(crate) fn load_state(&mut self, what: &str, state: &[(String, Tensor)]) -> Result<()> {
        if state.is_empty() {
            self.values = None;
            return Ok(());
        }
        let values = self
            .names
            .iter()
            .map(|name| {
                state.iter().find(|(k, _)| k == name).map(|(_, t)| t.copy()).ok_or_else(|| {
                    TrainError::State {
                        what: what.to_string(),
                        reason: format!("the saved state has no `{name}`"),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.values = Some(values);
        Ok(())
    }
}

/// Checks that `output` and `target` have the same first dimension, naming the metric.
pub(crate) fn same_batch(metric: &str, output: &Tensor, target: &Tensor) -> Result<i64> {
    let (o, t) = (output.size(), target.size());
    match (o.first(), t.first()) {
        (Some(a), Some(b)) if a == b => Ok(*a),
        _ => Err(TrainError::Metric {
            metric: metric.to_string(),
            reason: format!("output {o:?} and target {t:?} do not have the same batch size"),
        }),
    }
}

/// An epoch's metrics: the loss (tracked for every task) and the task's metrics, all on the
/// device, read back together.
pub struct MetricSet {
    loss: Sums,
    samples: u64,
    metrics: Vec<Box<dyn Metric>>,
}

impl std::fmt::Debug for MetricSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricSet")
            .field("samples", &self.samples)
            .field("metrics", &self.metrics.len())
            .finish()
    }
}

impl MetricSet {
    /// A set over `metrics`, plus the mean loss.
    pub fn new(metrics: Vec<Box<dyn Metric>>) -> Self {
        MetricSet { loss: Sums::new(&["loss_sum"]), samples: 0, metrics }
    }

    /// Adds a batch: its mean `loss` (a scalar, weighted by the batch's samples, the first
    /// dimension of `target`, so the epoch loss is the per-sample mean), and the output and
    /// target every metric reads.
    pub fn update(&mut self, loss: &Tensor, output: &Tensor, target: &Tensor) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let n = target.size().first().copied().unwrap_or(1).max(0) as usize;
        let sum = &mut self.loss.get(&[], Kind::Double, loss.device())[0];
        *sum += loss.detach().to_kind(Kind::Double).reshape([]) * n as f64;
        self.samples += n as u64;
        let (output, target) = (output.detach(), target.detach());
        for m in &mut self.metrics {
            m.update(&output, &target)?;
        }
        Ok(())
    }

    /// Samples seen.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The mean loss so far (one host read); NaN before any update.
    pub fn running_loss(&self) -> f64 {
        match self.loss.read() {
            Some(v) if self.samples > 0 => v[0][0] / self.samples as f64,
            _ => f64::NAN,
        }
    }

    /// `loss` first, then every metric's values, in order.
    pub fn compute(&self) -> Vec<(String, f64)> {
        let mut out = vec![("loss".to_string(), self.running_loss())];
        for m in &self.metrics {
            out.extend(m.compute());
        }
        out
    }

    /// Clears every accumulator.
    pub fn reset(&mut self) {
        self.loss.reset();
        self.samples = 0;
        self.metrics.iter_mut().for_each(|m| m.reset());
    }

    /// The metrics, e.g. to downcast one and read its own accessors.
    pub fn metrics(&self) -> &[Box<dyn Metric>] {
        &self.metrics
    }

    /// The first metric of type `T`.
    pub fn find<T: 'static>(&self) -> Option<&T> {
        self.metrics.iter().find_map(|m| m.as_any().downcast_ref::<T>())
    }

    /// Everything accumulated, as named tensors (`loss_sum`, `samples`, `<i>.<field>`).
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut out = self.loss.state();
        out.push(("samples".into(), Tensor::from(self.samples as i64)));
        for (i, m) in self.metrics.iter().enumerate() {
            out.extend(m.state().into_iter().map(|(k, t)| (format!("{i}.{k}"), t)));
        }
        out
    }

    /// Combines the state of every rank of `dist` into the state of the whole data, on every
    /// rank (a collective: every rank calls it at the same point): sums are all-reduced in one
    /// call, [`Reduction::Concat`] states gathered. Fails on a rank whose metrics differ.
    pub fn reduce(&mut self, dist: &dyn Distributed) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let state = self.state();
        let device = state.first().map_or(Device::Cpu, |(_, t)| t.device());
        let concat: Vec<bool> = self.metrics.iter().map(|m| m.reduction() == Reduction::Concat).collect();
        let is_concat = |key: &str| {
            key.split_once('.').and_then(|(i, _)| i.parse::<usize>().ok()).is_some_and(|i| concat[i])
        };
        let mut reduced = Vec::with_capacity(state.len());
        let mut sums = Vec::new();
        for (key, t) in state {
            if is_concat(&key) {
                let t = gather_rows(dist, &t.to_device(device))?;
                reduced.push((key, t));
            } else {
                // Contiguous copies on one device, so a backend reduces them in one call.
                let t = t.to_device(device).contiguous().copy();
                sums.push(t.shallow_clone());
                reduced.push((key, t));
            }
        }
        dist.all_reduce_sum(&sums)?;
        self.load_state(&reduced)
    }

    /// Restores [`MetricSet::state`].
    pub fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let own: Vec<(String, Tensor)> = state
            .iter()
            .filter(|(k, _)| k == "loss_sum")
            .map(|(k, t)| (k.clone(), t.shallow_clone()))
            .collect();
        self.loss.load_state("the loss", &own)?;
        self.samples =
            state.iter().find(|(k, _)| k == "samples").map(|(_, t)| t.int64_value(&[]) as u64).unwrap_or(0);
        for (i, m) in self.metrics.iter_mut().enumerate() {
            let prefix = format!("{i}.");
            let part: Vec<(String, Tensor)> = state
                .iter()
                .filter_map(|(k, t)| k.strip_prefix(&prefix).map(|k| (k.to_string(), t.shallow_clone())))
                .collect();
            m.load_state(&part)?;
        }
        Ok(())
    }
}

/// Every rank's `t` concatenated along the first dimension, in rank order; the ranks may hold
/// different numbers of rows (padded to the longest for the gather, then trimmed).
fn gather_rows(dist: &dyn Distributed, t: &Tensor) -> Result<Tensor> {
    let (rank, world) = (dist.rank(), dist.world_size());
    let rows = t.size().first().copied().unwrap_or(1);
    let counts = Tensor::zeros([world as i64], (Kind::Int64, t.device()));
    let _ = counts.get(rank as i64).fill_(rows);
    dist.all_reduce_sum(&[counts.shallow_clone()])?;
    let counts = Vec::<i64>::try_from(&counts.to_device(Device::Cpu)).map_err(|e| TrainError::Metric {
        metric: "the distributed metric state".into(),
        reason: e.to_string(),
    })?;
    let longest = counts.iter().copied().max().unwrap_or(0);
    let mut shape = t.size();
    let padded = if rows < longest {
        shape[0] = longest - rows;
        Tensor::cat(&[t.shallow_clone(), Tensor::zeros(shape.as_slice(), (t.kind(), t.device()))], 0)
    } else {
        t.contiguous()
    };
    let parts = dist.all_gather(&padded)?;
    let kept: Vec<Tensor> = parts.iter().zip(&counts).map(|(p, &n)| p.narrow(0, 0, n)).collect();
    Ok(Tensor::cat(&kept, 0))
}
