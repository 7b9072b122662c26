//! Multi-label metrics: macro F1 at a threshold and mean average precision, over logits
//! `[N, L]` and 0/1 targets `[N, L]`, as scikit-learn computes them.

use super::{same_batch, Metric, Reduction, Sums};
use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};

fn check(metric: &str, logits: &Tensor, targets: &Tensor) -> Result<i64> {
    same_batch(metric, logits, targets)?;
    if logits.dim() != 2 || logits.size() != targets.size() {
        return Err(TrainError::Metric {
            metric: metric.to_string(),
            reason: format!(
                "expects logits [N, L] and targets [N, L] of 0/1; got {:?} and {:?}",
                logits.size(),
                targets.size()
            ),
        });
    }
    Ok(logits.size()[1])
}

/// Macro-averaged F1 over labels (`f1`): a label is predicted when `sigmoid(logit) >= threshold`
/// (default 0.5); each label's F1 is `2 TP / (2 TP + FP + FN)`, 0 for a label never predicted
/// nor present, as `sklearn.metrics.f1_score(average="macro", zero_division=0)`.
#[derive(Debug)]
pub struct MultiLabelF1 {
    threshold: f64,
    sums: Sums,
}

impl Default for MultiLabelF1 {
    fn default() -> Self {
        Self::new(0.5)
    }
}

impl MultiLabelF1 {
    /// F1 at probability `threshold`.
    pub fn new(threshold: f64) -> Self {
        MultiLabelF1 { threshold, sums: Sums::new(&["tp", "fp", "fn"]) }
    }

    /// Each label's F1 so far (empty before any update).
    pub fn per_label(&self) -> Vec<f64> {
        let Some(v) = self.sums.read() else { return Vec::new() };
        (0..v[0].len())
            .map(|i| {
                let (tp, fp, fneg) = (v[0][i], v[1][i], v[2][i]);
                let den = 2.0 * tp + fp + fneg;
                if den > 0.0 {
                    2.0 * tp / den
                } else {
                    0.0
                }
            })
            .collect()
    }
}

impl Metric for MultiLabelF1 {
    fn update(&mut self, logits: &Tensor, targets: &Tensor) -> Result<()> {
        let labels = check("multi-label F1", logits, targets)?;
        // sigmoid(x) >= t  <=>  x >= logit(t), without computing the sigmoid.
        let cut = (self.threshold / (1.0 - self.threshold)).ln();
        let pred = logits.to_kind(Kind::Float).ge(cut).to_kind(Kind::Int64);
        let truth = targets.gt(0.5).to_kind(Kind::Int64);
        let (not_pred, not_truth) = (pred.ones_like() - &pred, truth.ones_like() - &truth);
        let tp = (&pred * &truth).sum_dim_intlist(0, false, Kind::Int64);
        let fp = (&pred * &not_truth).sum_dim_intlist(0, false, Kind::Int64);
        let fneg = (&not_pred * &truth).sum_dim_intlist(0, false, Kind::Int64);
        let sums = self.sums.get(&[labels], Kind::Int64, logits.device());
        sums[0] += tp;
        sums[1] += fp;
        sums[2] += fneg;
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        let per = self.per_label();
        let f1 = if per.is_empty() { f64::NAN } else { per.iter().sum::<f64>() / per.len() as f64 };
        vec![("f1".into(), f1)]
    }
    fn reset(&mut self) {
        self.sums.reset()
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        self.sums.state()
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.sums.load_state("multi-label F1", state)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Mean average precision over labels (`map`): each label's AP is the step-wise area under its
/// precision-recall curve, `sum_n (R_n - R_{n-1}) P_n` over the distinct scores in descending
/// order, as `sklearn.metrics.average_precision_score(average="macro")` (a label with no
/// positive sample scores 0, as there). Scores and targets are kept on the device and read
/// back once in `compute`, so memory grows with the epoch: use it on validation sets.
#[derive(Debug, Default)]
pub struct MeanAveragePrecision {
    scores: Vec<Tensor>,
    targets: Vec<Tensor>,
}

impl MeanAveragePrecision {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Each label's average precision so far (empty before any update).
    pub fn per_label(&self) -> Vec<f64> {
        if self.scores.is_empty() {
            return Vec::new();
        }
        let scores = Tensor::cat(&self.scores, 0).to_kind(Kind::Double).to_device(Device::Cpu);
        let targets = Tensor::cat(&self.targets, 0).to_kind(Kind::Double).to_device(Device::Cpu);
        let (n, labels) = (scores.size()[0] as usize, scores.size()[1] as usize);
        let s = Vec::<f64>::try_from(scores.reshape([-1])).expect("CPU f64 converts");
        let t = Vec::<f64>::try_from(targets.reshape([-1])).expect("CPU f64 converts");
        (0..labels)
            .map(|l| {
                let column: Vec<(f64, bool)> =
                    (0..n).map(|i| (s[i * labels + l], t[i * labels + l] > 0.5)).collect();
                average_precision(column)
            })
            .collect()
    }
}

/// Step-wise average precision of `(score, positive)` pairs, ties grouped as scikit-learn does.
fn average_precision(mut pairs: Vec<(f64, bool)>) -> f64 {
    let positives = pairs.iter().filter(|p| p.1).count();
    if positives == 0 {
        return 0.0;
    }
    // Stable sort by descending score: tied scores form one threshold.
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut tp, mut seen, mut ap, mut last_recall) = (0usize, 0usize, 0.0, 0.0);
    let mut i = 0;
    while i < pairs.len() {
        let score = pairs[i].0;
        while i < pairs.len() && pairs[i].0 == score {
            tp += usize::from(pairs[i].1);
            seen += 1;
            i += 1;
        }
        let recall = tp as f64 / positives as f64;
        let precision = tp as f64 / seen as f64;
        ap += (recall - last_recall) * precision;
        last_recall = recall;
    }
    ap
}

impl Metric for MeanAveragePrecision {
    fn update(&mut self, logits: &Tensor, targets: &Tensor) -> Result<()> {
        check("mean average precision", logits, targets)?;
        self.scores.push(logits.detach().to_kind(Kind::Float));
        self.targets.push(targets.detach().to_kind(Kind::Float));
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        let per = self.per_label();
        let map = if per.is_empty() { f64::NAN } else { per.iter().sum::<f64>() / per.len() as f64 };
        vec![("map".into(), map)]
    }
    fn reset(&mut self) {
        self.scores.clear();
        self.targets.clear();
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        if self.scores.is_empty() {
            return Vec::new();
        }
        vec![
            ("scores".into(), Tensor::cat(&self.scores, 0)),
            ("targets".into(), Tensor::cat(&self.targets, 0)),
        ]
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.reset();
        let get = |name: &str| state.iter().find(|(k, _)| k == name).map(|(_, t)| t.copy());
        match (get("scores"), get("targets")) {
            (Some(s), Some(t)) => {
                self.scores.push(s);
                self.targets.push(t);
                Ok(())
            }
            (None, None) => Ok(()),
            _ => Err(TrainError::State {
                what: "mean average precision".into(),
                reason: "the saved state needs both `scores` and `targets`".into(),
            }),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn reduction(&self) -> Reduction {
        // Average precision ranks all scores together: it cannot be summed per rank.
        Reduction::Concat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn average_precision_by_hand() {
        // sklearn.metrics.average_precision_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.8333...
        let ap = average_precision(vec![(0.1, false), (0.4, false), (0.35, true), (0.8, true)]);
        assert!((ap - 0.8333333333333333).abs() < 1e-12, "{ap}");
        // Ties form one threshold: all tied -> precision 0.5 at recall 1.
        assert_eq!(average_precision(vec![(0.5, true), (0.5, false)]), 0.5);
        assert_eq!(average_precision(vec![(0.5, false)]), 0.0);
    }
}
