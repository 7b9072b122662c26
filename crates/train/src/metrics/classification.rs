//! Classification metrics accumulated on the device: top-1 and top-k accuracy and the
//! confusion matrix, plus [`ClassificationMetrics`], the three together with the loss.

use super::{same_batch, Metric, MetricSet, Sums};
use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};

fn check_logits(metric: &str, logits: &Tensor, targets: &Tensor, num_classes: Option<i64>) -> Result<i64> {
    let n = same_batch(metric, logits, targets)?;
    let size = logits.size();
    let fits = size.len() == 2 && targets.dim() == 1 && num_classes.is_none_or(|c| size[1] == c);
    if !fits {
        return Err(TrainError::Metric {
            metric: metric.to_string(),
            reason: format!(
                "expects logits [N, C{}] and class indices [N]; got {size:?} and {:?}",
                num_classes.map_or(String::new(), |c| format!(" = {c}")),
                targets.size()
            ),
        });
    }
    Ok(n)
}

/// Top-1 accuracy (`acc`): `logits.argmax(1) == targets` over logits `[N, C]` and class
/// indices `[N]`, as `torchmetrics.Accuracy(task="multiclass", average="micro")`.
#[derive(Debug)]
pub struct Accuracy {
    sums: Sums,
}

impl Default for Accuracy {
    fn default() -> Self {
        Accuracy { sums: Sums::new(&["correct", "count"]) }
    }
}

impl Accuracy {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Metric for Accuracy {
    fn update(&mut self, logits: &Tensor, targets: &Tensor) -> Result<()> {
        let n = check_logits("accuracy", logits, targets, None)?;
        let hits = logits.argmax(1, false).eq_tensor(&targets.to_kind(Kind::Int64)).sum(Kind::Int64);
        let sums = self.sums.get(&[], Kind::Int64, logits.device());
        sums[0] += hits;
        sums[1] += n;
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        let acc = self.sums.read().map_or(f64::NAN, |v| ratio(v[0][0], v[1][0]));
        vec![("acc".into(), acc)]
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("accuracy", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else {
        f64::NAN
    }
}

/// Top-k accuracy (`top{k}`): a sample counts as right when its class is among the `k` largest
/// logits, with `k` clamped to the class count as timm's `accuracy` does
/// (`sklearn.metrics.top_k_accuracy_score` on logits without ties).
#[derive(Debug)]
pub struct TopKAccuracy {
    k: i64,
    sums: Sums,
}

impl TopKAccuracy {
    /// Top-`k` accuracy.
    ///
    /// # Panics
    /// When `k` is 0.
    pub fn new(k: usize) -> Self {
        assert!(k > 0, "top-k accuracy needs k > 0");
        TopKAccuracy { k: k as i64, sums: Sums::new(&["correct", "count"]) }
    }

    /// The `k`.
    pub fn k(&self) -> usize {
        self.k as usize
    }
}

impl Metric for TopKAccuracy {
    fn update(&mut self, logits: &Tensor, targets: &Tensor) -> Result<()> {
        let n = check_logits("top-k accuracy", logits, targets, None)?;
        let k = self.k.min(logits.size()[1]);
        let (_, top) = logits.topk(k, 1, true, true);
        let hits =
            top.eq_tensor(&targets.to_kind(Kind::Int64).unsqueeze(1)).any_dim(1, false).sum(Kind::Int64);
        let sums = self.sums.get(&[], Kind::Int64, logits.device());
        sums[0] += hits;
        sums[1] += n;
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        let acc = self.sums.read().map_or(f64::NAN, |v| ratio(v[0][0], v[1][0]));
        vec![(format!("top{}", self.k), acc)]
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("top-k accuracy", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The `[C, C]` confusion matrix (rows: true class, columns: `argmax` prediction), counted on
/// the device; [`ConfusionMatrixMetric::matrix`] reads it back. It adds no scalar to the logs.
#[derive(Debug)]
pub struct ConfusionMatrixMetric {
    num_classes: i64,
    sums: Sums,
}

impl ConfusionMatrixMetric {
    /// A `[num_classes, num_classes]` matrix of zeros.
    ///
    /// # Panics
    /// When `num_classes` is 0.
    pub fn new(num_classes: usize) -> Self {
        assert!(num_classes > 0, "a confusion matrix needs at least one class");
        ConfusionMatrixMetric { num_classes: num_classes as i64, sums: Sums::new(&["counts"]) }
    }

    /// The counts so far.
    pub fn matrix(&self) -> ConfusionMatrix {
        let c = self.num_classes as usize;
        let counts = match self.sums.read() {
            Some(v) => v[0].iter().map(|&x| x as u64).collect(),
            None => vec![0; c * c],
        };
        ConfusionMatrix::from_counts(c, counts)
    }
}

impl Metric for ConfusionMatrixMetric {
    fn update(&mut self, logits: &Tensor, targets: &Tensor) -> Result<()> {
        let n = check_logits("confusion matrix", logits, targets, Some(self.num_classes))?;
        let c = self.num_classes;
        let flat = targets.to_kind(Kind::Int64) * c + logits.argmax(1, false);
        let ones = Tensor::ones([n], (Kind::Int64, logits.device()));
        let counts = &mut self.sums.get(&[c, c], Kind::Int64, logits.device())[0];
        // index_put_ with accumulate has a deterministic CUDA kernel (bincount does not).
        let _ = counts.view([-1]).index_put_(&[Some(flat)], &ones, true);
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("confusion matrix", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The loss, top-1 and top-k accuracy and the confusion matrix of a classifier, accumulated on
/// the device without host synchronisation and read back together in
/// [`compute`](Self::compute) (what `torchlight eval` and the test split report).
#[derive(Debug)]
pub struct ClassificationMetrics {
    num_classes: i64,
    top_k: i64,
    set: MetricSet,
}

impl ClassificationMetrics {
    /// Empty metrics for `num_classes` classes. `device` is where the first batch will be;
    /// the accumulators are created on the device of the first update.
    ///
    /// # Panics
    /// When `num_classes` or `top_k` is 0.
    pub fn new(num_classes: usize, top_k: usize, _device: Device) -> Self {
        assert!(num_classes > 0 && top_k > 0, "ClassificationMetrics needs num_classes > 0 and top_k > 0");
        let top_k = top_k.min(num_classes);
        let set = MetricSet::new(vec![
            Box::new(ConfusionMatrixMetric::new(num_classes)),
            Box::new(TopKAccuracy::new(top_k)),
        ]);
        ClassificationMetrics { num_classes: num_classes as i64, top_k: top_k as i64, set }
    }

    /// The `k` of top-k accuracy after clamping to the class count.
    pub fn top_k(&self) -> usize {
        self.top_k as usize
    }

    /// Adds one batch: `logits` `[N, C]`, `targets` `[N]` class indices, and `loss` the batch's
    /// mean loss (a scalar, as `CrossEntropyLoss(reduction="mean")` returns), weighted by `N` so
    /// the epoch loss is the per-sample mean whatever the batch sizes. Nothing is read back.
    ///
    /// # Panics
    /// On tensors of the wrong shape: `logits` must be `[N, C]` with the `C` given to
    /// [`new`](Self::new) and `targets` `[N]` integers in `[0, C)`.
    pub fn update(&mut self, loss: &Tensor, logits: &Tensor, targets: &Tensor) {
        let n = targets.size1().expect("targets are [N]");
        let size = logits.size();
        assert!(
            size.len() == 2 && size[0] == n && size[1] == self.num_classes,
            "logits {size:?} do not fit targets [{n}] and {} classes",
            self.num_classes
        );
        self.set.update(loss, logits, targets).expect("shapes checked above");
    }

    /// Samples seen since the last reset.
    pub fn count(&self) -> u64 {
        self.set.samples()
    }

    /// The mean loss so far, read back to the host (one synchronisation); NaN before any update.
    pub fn running_loss(&self) -> f64 {
        self.set.running_loss()
    }

    /// Everything accumulated so far, read back to the host.
    pub fn compute(&self) -> MetricsSummary {
        MetricsSummary::from_metrics(&self.set).expect("built with a confusion matrix and top-k")
    }

    /// Clears everything for the next epoch.
    pub fn reset(&mut self) {
        self.set.reset()
    }
}

/// An epoch's metrics on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSummary {
    /// Mean loss per sample (NaN when empty).
    pub loss: f64,
    /// Top-1 accuracy in `[0, 1]` (NaN when empty).
    pub top1: f64,
    /// Top-k accuracy in `[0, 1]` (NaN when empty).
    pub topk: f64,
    /// The `k` of `topk`.
    pub k: usize,
    /// Samples seen.
    pub count: u64,
    /// Counts by (true class, predicted class).
    pub confusion: ConfusionMatrix,
}

impl MetricsSummary {
    /// The summary of a classifier's metrics, read back to the host: `metrics` must hold a
    /// [`ConfusionMatrixMetric`] and a [`TopKAccuracy`] (as [`Classification`]'s test metrics
    /// do, and [`ClassificationMetrics`]).
    ///
    /// [`Classification`]: crate::Classification
    pub fn from_metrics(metrics: &MetricSet) -> Result<Self> {
        let missing = |what: &str| TrainError::Metric {
            metric: "MetricsSummary".into(),
            reason: format!("the metrics hold no {what}"),
        };
        let confusion =
            metrics.find::<ConfusionMatrixMetric>().ok_or_else(|| missing("ConfusionMatrixMetric"))?;
        let topk = metrics.find::<TopKAccuracy>().ok_or_else(|| missing("TopKAccuracy"))?;
        let confusion = confusion.matrix();
        Ok(MetricsSummary {
            loss: metrics.running_loss(),
            top1: confusion.accuracy(),
            topk: topk.compute()[0].1,
            k: topk.k(),
            count: metrics.samples(),
            confusion,
        })
    }
}

/// A `[C, C]` confusion matrix of counts, rows = true class and columns = predicted class, as
/// in scikit-learn's `confusion_matrix(y_true, y_pred)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfusionMatrix {
    num_classes: usize,
    counts: Vec<u64>,
}

impl ConfusionMatrix {
    /// From row-major counts (`counts[t * C + p]`).
    ///
    /// # Panics
    /// When `counts.len() != num_classes * num_classes`.
    pub fn from_counts(num_classes: usize, counts: Vec<u64>) -> Self {
        assert_eq!(counts.len(), num_classes * num_classes, "a confusion matrix has C * C counts");
        ConfusionMatrix { num_classes, counts }
    }

    /// Counts pairs of host labels, as `sklearn.metrics.confusion_matrix` does.
    ///
    /// # Panics
    /// When the slices differ in length or a label is not below `num_classes`.
    pub fn from_labels(num_classes: usize, targets: &[usize], preds: &[usize]) -> Self {
        assert_eq!(targets.len(), preds.len(), "as many predictions as targets");
        let mut counts = vec![0; num_classes * num_classes];
        for (&t, &p) in targets.iter().zip(preds) {
            assert!(t < num_classes && p < num_classes, "label ({t}, {p}) outside {num_classes} classes");
            counts[t * num_classes + p] += 1;
        }
        ConfusionMatrix { num_classes, counts }
    }

    /// C.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// Samples of class `target` predicted as `pred`.
    pub fn get(&self, target: usize, pred: usize) -> u64 {
        self.counts[target * self.num_classes + pred]
    }

    /// Row-major counts.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The matrix as rows (one per true class).
    pub fn rows(&self) -> Vec<Vec<u64>> {
        self.counts.chunks(self.num_classes.max(1)).map(<[u64]>::to_vec).collect()
    }

    /// All samples counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Correct predictions (the trace).
    pub fn correct(&self) -> u64 {
        (0..self.num_classes).map(|i| self.get(i, i)).sum()
    }

    /// Overall accuracy, trace / total (NaN when empty).
    pub fn accuracy(&self) -> f64 {
        let total = self.total();
        if total == 0 {
            f64::NAN
        } else {
            self.correct() as f64 / total as f64
        }
    }

    /// Per-class accuracy (recall): diagonal / row sum, `None` for a class with no samples.
    pub fn per_class_accuracy(&self) -> Vec<Option<f64>> {
        (0..self.num_classes)
            .map(|t| {
                let row: u64 = (0..self.num_classes).map(|p| self.get(t, p)).sum();
                (row > 0).then(|| self.get(t, t) as f64 / row as f64)
            })
            .collect()
    }

    /// Samples per true class (row sums).
    pub fn support(&self) -> Vec<u64> {
        self.rows().iter().map(|r| r.iter().sum()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_batch() {
        // 3 classes; preds = argmax = [0, 2, 1, 1]; targets = [0, 0, 1, 2].
        let logits = Tensor::from_slice(&[
            3.0f32, 1.0, 0.0, //
            0.0, 1.0, 2.0, //
            0.5, 2.0, 0.0, //
            0.0, 2.0, 1.0,
        ])
        .view([4, 3]);
        let targets = Tensor::from_slice(&[0i64, 0, 1, 2]);
        let mut m = ClassificationMetrics::new(3, 2, Device::Cpu);
        m.update(&Tensor::from(0.5f32), &logits, &targets);
        m.update(&Tensor::from(1.5f32), &logits.narrow(0, 0, 2), &targets.narrow(0, 0, 2));
        let s = m.compute();
        assert_eq!(s.count, 6);
        // (0.5 * 4 + 1.5 * 2) / 6
        assert!((s.loss - 5.0 / 6.0).abs() < 1e-12, "{}", s.loss);
        assert_eq!(s.confusion.rows(), vec![vec![2, 0, 2], vec![0, 1, 0], vec![0, 1, 0]]);
        assert_eq!(s.top1, 3.0 / 6.0);
        // Top-2 sets: {0, 1}, {2, 1}, {1, 0}, {1, 2}: hits for rows 0, 2, 3, and row 0 again.
        assert_eq!(s.topk, 4.0 / 6.0);
        assert_eq!(s.k, 2);
        assert_eq!(s.confusion.per_class_accuracy(), vec![Some(0.5), Some(1.0), Some(0.0)]);
        assert!((m.running_loss() - 5.0 / 6.0).abs() < 1e-12);
        m.reset();
        assert_eq!(m.count(), 0);
        assert_eq!(m.compute().confusion.total(), 0);
        assert!(m.running_loss().is_nan());
    }

    #[test]
    fn top_k_is_clamped_to_the_class_count() {
        let m = ClassificationMetrics::new(3, 5, Device::Cpu);
        assert_eq!(m.top_k(), 3);
    }

    #[test]
    fn confusion_from_labels_matches_sklearn_layout() {
        // sklearn.metrics.confusion_matrix([2, 0, 2, 2, 0, 1], [0, 0, 2, 2, 0, 2])
        // == [[2, 0, 0], [0, 0, 1], [1, 0, 2]]
        let cm = ConfusionMatrix::from_labels(3, &[2, 0, 2, 2, 0, 1], &[0, 0, 2, 2, 0, 2]);
        assert_eq!(cm.rows(), vec![vec![2, 0, 0], vec![0, 0, 1], vec![1, 0, 2]]);
        assert_eq!(cm.support(), vec![2, 1, 3]);
        assert_eq!(cm.correct(), 4);
        let empty = ConfusionMatrix::from_labels(2, &[0], &[1]);
        assert_eq!(empty.per_class_accuracy(), vec![Some(0.0), None]);
    }
}
