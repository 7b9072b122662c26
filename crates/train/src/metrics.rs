//! Classification metrics accumulated on the device: loss, top-1/top-k accuracy, per-class
//! accuracy and the confusion matrix, read back to the host only when asked.

use tch::{Device, Kind, Tensor};

/// Accumulates an epoch's classification metrics without host synchronisation.
///
/// Each [`update`](Self::update) adds to tensors that live on the model's device (the loss sum
/// in f64, the top-k hit count and the `[C, C]` confusion matrix in i64), queueing work without
/// waiting for it, so a CUDA training loop is never stalled by `loss.item()`. Values reach the
/// host in [`running_loss`](Self::running_loss) (once per logging interval) and
/// [`compute`](Self::compute) (once per epoch). The sample count is known on the host from the
/// batch shapes, so it costs no synchronisation either.
///
/// Predictions are `logits.argmax(1)` like a PyTorch user writes; top-k counts a sample as right
/// when its target is among the `k` largest logits (`logits.topk(k)`), with `k` clamped to the
/// class count as timm's `accuracy` does.
#[derive(Debug)]
pub struct ClassificationMetrics {
    num_classes: i64,
    top_k: i64,
    device: Device,
    loss_sum: Tensor,
    topk_correct: Tensor,
    confusion: Tensor,
    count: u64,
}

impl ClassificationMetrics {
    /// Empty metrics for `num_classes` classes with tensors on `device`.
    ///
    /// # Panics
    /// When `num_classes` or `top_k` is 0.
    pub fn new(num_classes: usize, top_k: usize, device: Device) -> Self {
        assert!(num_classes > 0 && top_k > 0, "ClassificationMetrics needs num_classes > 0 and top_k > 0");
        let c = num_classes as i64;
        ClassificationMetrics {
            num_classes: c,
            top_k: (top_k as i64).min(c),
            device,
            loss_sum: Tensor::zeros([], (Kind::Double, device)),
            topk_correct: Tensor::zeros([], (Kind::Int64, device)),
            confusion: Tensor::zeros([c, c], (Kind::Int64, device)),
            count: 0,
        }
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
    /// Like tch on tensors of the wrong shape or device: `logits` must be `[N, C]` with the `C`
    /// given to [`new`](Self::new) and `targets` `[N]` integers in `[0, C)`, both on this
    /// metrics' device. Targets are the ones the loss already checked.
    pub fn update(&mut self, loss: &Tensor, logits: &Tensor, targets: &Tensor) {
        let n = targets.size1().expect("targets are [N]");
        let size = logits.size();
        assert!(
            size.len() == 2 && size[0] == n && size[1] == self.num_classes,
            "logits {size:?} do not fit targets [{n}] and {} classes",
            self.num_classes
        );
        let _guard = tch::no_grad_guard();
        let logits = logits.detach();
        let targets = targets.to_kind(Kind::Int64);
        self.loss_sum += loss.detach().to_kind(Kind::Double).reshape([]) * (n as f64);

        let preds = logits.argmax(1, false);
        let flat = &targets * self.num_classes + &preds;
        let ones = Tensor::ones([n], (Kind::Int64, self.device));
        // index_put_ with accumulate has a deterministic CUDA kernel (bincount does not).
        let _ = self.confusion.view([-1]).index_put_(&[Some(flat)], &ones, true);

        let (_, top) = logits.topk(self.top_k, 1, true, true);
        let hit = top.eq_tensor(&targets.unsqueeze(1)).any_dim(1, false).sum(Kind::Int64);
        self.topk_correct += hit;
        self.count += n as u64;
    }

    /// Samples seen since the last reset.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The mean loss so far, read back to the host (one synchronisation); NaN before any update.
    pub fn running_loss(&self) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        self.loss_sum.double_value(&[]) / self.count as f64
    }

    /// Everything accumulated so far, read back to the host in one copy.
    pub fn compute(&self) -> MetricsSummary {
        let c = self.num_classes;
        let packed = Tensor::cat(
            &[
                self.confusion.view([-1]).to_kind(Kind::Double),
                self.topk_correct.to_kind(Kind::Double).view([1]),
                self.loss_sum.view([1]),
            ],
            0,
        )
        .to_device(Device::Cpu);
        let values = Vec::<f64>::try_from(&packed).expect("a CPU f64 tensor converts to Vec<f64>");
        let cells = (c * c) as usize;
        let counts: Vec<u64> = values[..cells].iter().map(|&v| v as u64).collect();
        let confusion = ConfusionMatrix::from_counts(c as usize, counts);
        let n = self.count as f64;
        let (top_k_correct, loss_sum) = (values[cells], values[cells + 1]);
        MetricsSummary {
            loss: if self.count == 0 { f64::NAN } else { loss_sum / n },
            top1: confusion.accuracy(),
            topk: if self.count == 0 { f64::NAN } else { top_k_correct / n },
            k: self.top_k as usize,
            count: self.count,
            confusion,
        }
    }

    /// Clears everything for the next epoch (the tensors are zeroed in place).
    pub fn reset(&mut self) {
        let _ = self.loss_sum.zero_();
        let _ = self.topk_correct.zero_();
        let _ = self.confusion.zero_();
        self.count = 0;
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
