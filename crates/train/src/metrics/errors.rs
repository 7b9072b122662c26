//! The worst misclassified samples of an evaluation: those a classifier got wrong with the
//! highest confidence, where label errors show first (`errors.png` of `torchlight eval
//! --report`).

use tch::{Device, Kind, Tensor};

/// One misclassified sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Misclassified {
    /// Its row in the logits (the evaluation order).
    pub index: usize,
    /// Its true class.
    pub label: usize,
    /// The class predicted (the largest logit; the first of equal ones, as `argmax`).
    pub predicted: usize,
    /// The softmax probability of the predicted class.
    pub confidence: f64,
}

/// The `k` misclassified rows of `logits` `[N, C]` (against `labels` `[N]`) with the highest
/// confidence in their wrong class (softmax of the logits as given, so divide them by a
/// temperature first to rank by calibrated confidence), most confident first; equal
/// confidences in row order. Fewer than `k` when fewer are wrong.
///
/// # Panics
/// When `logits` is not `[N, C]` or `labels` not `[N]`.
pub fn worst_misclassified(logits: &Tensor, labels: &Tensor, k: usize) -> Vec<Misclassified> {
    let size = logits.size();
    assert!(size.len() == 2 && labels.size() == [size[0]], "logits [N, C] and labels [N]");
    let probs = logits.to_device(Device::Cpu).to_kind(Kind::Double).softmax(-1, Kind::Double);
    let (confidence, predicted) = probs.max_dim(1, false);
    let confidence = Vec::<f64>::try_from(&confidence).expect("a double CPU tensor converts");
    let predicted = Vec::<i64>::try_from(&predicted).expect("an int64 CPU tensor converts");
    let labels = Vec::<i64>::try_from(&labels.to_device(Device::Cpu).to_kind(Kind::Int64))
        .expect("an int64 CPU tensor converts");
    let mut wrong: Vec<Misclassified> = (0..labels.len())
        .filter(|&i| predicted[i] != labels[i])
        .map(|i| Misclassified {
            index: i,
            label: labels[i] as usize,
            predicted: predicted[i] as usize,
            confidence: confidence[i],
        })
        .collect();
    // Stable: equal confidences keep row order.
    wrong.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    wrong.truncate(k);
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_confident_wrong_predictions_come_first() {
        // Rows: 0 right; 1 wrong (class 2, confident); 2 wrong (class 0, less); 3 right;
        // 4 wrong (class 1, most confident); 5 wrong, tied with 6 (same logits); 7 right.
        let logits = Tensor::from_slice(&[
            5.0f32, 0.0, 0.0, //
            0.0, 0.0, 4.0, //
            1.0, 0.5, 0.0, //
            0.0, 9.0, 0.0, //
            0.0, 8.0, 0.0, //
            0.0, 2.0, 0.0, //
            0.0, 2.0, 0.0, //
            0.0, 0.0, 1.0,
        ])
        .view([8, 3]);
        let labels = Tensor::from_slice(&[0i64, 0, 1, 1, 2, 0, 2, 2]);
        let all = worst_misclassified(&logits, &labels, 10);
        let order: Vec<(usize, usize, usize)> = all.iter().map(|m| (m.index, m.label, m.predicted)).collect();
        assert_eq!(order, [(4, 2, 1), (1, 0, 2), (5, 0, 1), (6, 2, 1), (2, 1, 0)]);
        // Confidence: the softmax probability of the predicted class.
        let p = |z: &[f64], i: usize| z[i].exp() / z.iter().map(|v| v.exp()).sum::<f64>();
        assert!((all[0].confidence - p(&[0.0, 8.0, 0.0], 1)).abs() < 1e-12);
        assert!((all[4].confidence - p(&[1.0, 0.5, 0.0], 0)).abs() < 1e-12);
        assert!(all.windows(2).all(|w| w[0].confidence >= w[1].confidence));
        // The top k of the same ranking.
        assert_eq!(worst_misclassified(&logits, &labels, 2), all[..2]);
        assert!(worst_misclassified(&logits, &labels, 0).is_empty());
        // Nothing wrong: nothing chosen.
        let right = Tensor::from_slice(&[0i64, 2, 0, 1, 1, 1, 1, 2]);
        assert!(worst_misclassified(&logits, &right, 5).is_empty());
    }
}
