//! Calibration of a classifier's probabilities: the expected and maximum calibration errors
//! over equal-width confidence bins, the negative log-likelihood and the Brier score of
//! `softmax(logits)`, temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
//! Networks"), and [`Calibration`], the metric that keeps an evaluation's logits for them.
//!
//! Every function takes logits `[N, C]` and class indices `[N]` and computes in `f64` on the
//! host, so results do not depend on the device or on libtorch's float kernels.

use super::{same_batch, Metric, Reduction};
use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};

/// The number of equal-width confidence bins of [`expected_calibration_error`] and
/// [`maximum_calibration_error`], as Guo et al. (and their `ECELoss`) use: 15.
pub const CALIBRATION_BINS: usize = 15;

/// The bounds of the temperature [`fit_temperature`] searches: `[1e-2, 1e2]`.
pub const TEMPERATURE_RANGE: (f64, f64) = (1e-2, 1e2);

/// One confidence bin of a reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReliabilityBin {
    /// The bin's lower edge (excluded).
    pub lower: f64,
    /// The bin's upper edge (included).
    pub upper: f64,
    /// Samples whose confidence (largest softmax probability) falls in `(lower, upper]`.
    pub count: usize,
    /// Their mean confidence (NaN when the bin is empty).
    pub confidence: f64,
    /// The share of them whose arg-max class is the label (NaN when the bin is empty).
    pub accuracy: f64,
}

/// ECE, MCE, NLL and Brier score of one set of logits (see [`calibration_scores`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrationScores {
    /// Expected calibration error over [`CALIBRATION_BINS`] bins.
    pub ece: f64,
    /// Maximum calibration error over the non-empty bins.
    pub mce: f64,
    /// Mean cross-entropy (negative log-likelihood).
    pub nll: f64,
    /// Brier score, summed over classes and averaged over samples.
    pub brier: f64,
}

impl CalibrationScores {
    /// The scores as `(name, value)` pairs: `ece`, `mce`, `nll`, `brier`.
    pub fn named(&self) -> Vec<(String, f64)> {
        vec![
            ("ece".into(), self.ece),
            ("mce".into(), self.mce),
            ("nll".into(), self.nll),
            ("brier".into(), self.brier),
        ]
    }
}

/// Logits and labels on the host as `f64` rows.
struct HostLogits {
    n: usize,
    c: usize,
    z: Vec<f64>,
    y: Vec<usize>,
}

impl HostLogits {
    /// # Panics
    /// When `logits` is not `[N, C]` with `C >= 1`, `labels` not `[N]`, or a label is not in `0..C`.
    fn new(logits: &Tensor, labels: &Tensor) -> Self {
        let size = logits.size();
        assert!(
            size.len() == 2 && size[1] >= 1 && labels.size() == [size[0]],
            "calibration expects logits [N, C] and labels [N]; got {size:?} and {:?}",
            labels.size()
        );
        let (n, c) = (size[0] as usize, size[1] as usize);
        let z = logits.detach().to_device(Device::Cpu).to_kind(Kind::Double).contiguous().reshape([-1]);
        let z = Vec::<f64>::try_from(&z).expect("a CPU f64 tensor converts to Vec<f64>");
        let y = labels.detach().to_device(Device::Cpu).to_kind(Kind::Int64).contiguous();
        let y: Vec<usize> = Vec::<i64>::try_from(&y)
            .expect("a CPU i64 tensor converts to Vec<i64>")
            .into_iter()
            .map(|l| {
                assert!((0..c as i64).contains(&l), "calibration: label {l} is not a class of 0..{c}");
                l as usize
            })
            .collect();
        HostLogits { n, c, z, y }
    }

    fn row(&self, i: usize) -> &[f64] {
        &self.z[i * self.c..(i + 1) * self.c]
    }

    /// `softmax(row / t)` into `p`; returns `log(sum(exp(row / t)))`.
    fn softmax_into(&self, i: usize, t: f64, p: &mut [f64]) -> f64 {
        let row = self.row(i);
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v / t));
        let mut sum = 0.0;
        for (q, &v) in p.iter_mut().zip(row) {
            *q = (v / t - max).exp();
            sum += *q;
        }
        p.iter_mut().for_each(|q| *q /= sum);
        max + sum.ln()
    }

    /// The first arg-max of a probability row, as `torch.argmax` picks ties.
    fn argmax(p: &[f64]) -> usize {
        let mut best = 0;
        for (j, &v) in p.iter().enumerate() {
            if v > p[best] {
                best = j;
            }
        }
        best
    }
}

/// The reliability diagram of `softmax(logits)`: `bins` equal-width bins of `(k / bins,
/// (k + 1) / bins]` over the confidence (the largest probability), each with its count, mean
/// confidence and accuracy (the arg-max, first index on ties, against `labels`).
///
/// # Panics
/// When `logits` is not `[N, C]`, `labels` not `[N]` class indices in `0..C`, or `bins` is 0.
pub fn reliability_bins(logits: &Tensor, labels: &Tensor, bins: usize) -> Vec<ReliabilityBin> {
    assert!(bins > 0, "reliability_bins needs at least one bin");
    let h = HostLogits::new(logits, labels);
    let mut count = vec![0usize; bins];
    let mut conf = vec![0.0; bins];
    let mut hits = vec![0.0; bins];
    let mut p = vec![0.0; h.c];
    for i in 0..h.n {
        h.softmax_into(i, 1.0, &mut p);
        let pred = HostLogits::argmax(&p);
        let confidence = p[pred];
        // Bin k holds (k / bins, (k + 1) / bins], as Guo et al.'s `conf > lower & conf <= upper`
        // (compared with the edges, not rounded from `conf * bins`, so edges fall as there).
        let k = (0..bins).find(|&k| confidence <= (k + 1) as f64 / bins as f64).unwrap_or(bins - 1);
        count[k] += 1;
        conf[k] += confidence;
        hits[k] += f64::from(u8::from(pred == h.y[i]));
    }
    (0..bins)
        .map(|k| {
            let n = count[k] as f64;
            ReliabilityBin {
                lower: k as f64 / bins as f64,
                upper: (k + 1) as f64 / bins as f64,
                count: count[k],
                confidence: conf[k] / n,
                accuracy: hits[k] / n,
            }
        })
        .collect()
}

/// Expected calibration error (Guo et al. 2017, eq. 3) over [`CALIBRATION_BINS`] equal-width
/// bins: `sum_b (|B_b| / N) * |acc(B_b) - conf(B_b)|`. NaN for no samples.
///
/// # Panics
/// As [`reliability_bins`].
pub fn expected_calibration_error(logits: &Tensor, labels: &Tensor) -> f64 {
    ece_of(&reliability_bins(logits, labels, CALIBRATION_BINS))
}

/// Maximum calibration error: `max_b |acc(B_b) - conf(B_b)|` over the non-empty bins of
/// [`CALIBRATION_BINS`]. NaN for no samples.
///
/// # Panics
/// As [`reliability_bins`].
pub fn maximum_calibration_error(logits: &Tensor, labels: &Tensor) -> f64 {
    mce_of(&reliability_bins(logits, labels, CALIBRATION_BINS))
}

fn ece_of(bins: &[ReliabilityBin]) -> f64 {
    let total: usize = bins.iter().map(|b| b.count).sum();
    if total == 0 {
        return f64::NAN;
    }
    bins.iter()
        .filter(|b| b.count > 0)
        .map(|b| b.count as f64 / total as f64 * (b.accuracy - b.confidence).abs())
        .sum()
}

fn mce_of(bins: &[ReliabilityBin]) -> f64 {
    bins.iter().filter(|b| b.count > 0).map(|b| (b.accuracy - b.confidence).abs()).fold(f64::NAN, f64::max)
}

/// Negative log-likelihood: the mean cross-entropy of `logits` against `labels`
/// (`F.cross_entropy(logits, labels)`). NaN for no samples.
///
/// # Panics
/// As [`reliability_bins`].
pub fn negative_log_likelihood(logits: &Tensor, labels: &Tensor) -> f64 {
    let h = HostLogits::new(logits, labels);
    nll_at(&h, 1.0)
}

fn nll_at(h: &HostLogits, t: f64) -> f64 {
    let mut p = vec![0.0; h.c];
    let sum: f64 = (0..h.n).map(|i| h.softmax_into(i, t, &mut p) - h.row(i)[h.y[i]] / t).sum();
    sum / h.n as f64
}

/// Brier score in its original multi-class form (Brier 1950; Guo et al. do not use it, and
/// scikit-learn's `brier_score_loss` is the binary one): the mean over samples of
/// `sum_c (p_c - onehot_c)^2`, between 0 and 2. NaN for no samples.
///
/// # Panics
/// As [`reliability_bins`].
pub fn brier_score(logits: &Tensor, labels: &Tensor) -> f64 {
    let h = HostLogits::new(logits, labels);
    let mut p = vec![0.0; h.c];
    let mut sum = 0.0;
    for i in 0..h.n {
        h.softmax_into(i, 1.0, &mut p);
        sum +=
            p.iter().enumerate().map(|(j, &q)| (q - f64::from(u8::from(j == h.y[i]))).powi(2)).sum::<f64>();
    }
    sum / h.n as f64
}

/// ECE, MCE, NLL and Brier score of `softmax(logits)` against `labels`.
///
/// # Panics
/// As [`reliability_bins`].
pub fn calibration_scores(logits: &Tensor, labels: &Tensor) -> CalibrationScores {
    let bins = reliability_bins(logits, labels, CALIBRATION_BINS);
    CalibrationScores {
        ece: ece_of(&bins),
        mce: mce_of(&bins),
        nll: negative_log_likelihood(logits, labels),
        brier: brier_score(logits, labels),
    }
}

/// The temperature `T` that minimises the NLL of `logits / T` on `labels` (temperature
/// scaling, Guo et al. 2017), searched in [`TEMPERATURE_RANGE`].
///
/// Method: with `s = 1 / T`, the NLL `mean(logsumexp(s z) - s z_y)` is convex in `s` (its
/// second derivative is the mean variance of `z` under `softmax(s z)`), so it is unimodal in
/// `log T` and its derivative changes sign once. The search keeps a bracket on `log T` where
/// that derivative changes sign and takes a Newton step on `s` when it stays inside the
/// bracket, else bisects the bracket in `log T`; in `f64`, until the bracket is narrower than
/// `1e-12` in `log T` or the gradient vanishes. When the minimum lies outside the range
/// (perfectly separable logits drive `T` to 0, uninformative ones to infinity) the nearest
/// bound is returned.
///
/// # Errors
/// [`TrainError::Metric`] when there are no samples or the logits are not finite.
///
/// # Panics
/// As [`reliability_bins`].
pub fn fit_temperature(logits: &Tensor, labels: &Tensor) -> Result<f64> {
    let h = HostLogits::new(logits, labels);
    let fail = |reason: String| TrainError::Metric { metric: "temperature scaling".into(), reason };
    if h.n == 0 {
        return Err(fail("no samples to fit a temperature on".into()));
    }
    if h.z.iter().any(|v| !v.is_finite()) {
        return Err(fail("the logits hold non-finite values".into()));
    }
    // d NLL / ds and d2 NLL / ds2 at s = 1 / T.
    let derivatives = |s: f64| {
        let mut p = vec![0.0; h.c];
        let (mut g, mut hess) = (0.0, 0.0);
        for i in 0..h.n {
            h.softmax_into(i, 1.0 / s, &mut p);
            let row = h.row(i);
            let mean: f64 = p.iter().zip(row).map(|(q, z)| q * z).sum();
            let second: f64 = p.iter().zip(row).map(|(q, z)| q * z * z).sum();
            g += mean - row[h.y[i]];
            hess += (second - mean * mean).max(0.0);
        }
        (g / h.n as f64, hess / h.n as f64)
    };
    let (t_lo, t_hi) = TEMPERATURE_RANGE;
    // In log T; the NLL's s-derivative rises with s, so it falls with log T.
    let (mut lo, mut hi) = (t_lo.ln(), t_hi.ln());
    if derivatives((-lo).exp()).0 <= 0.0 {
        return Ok(t_lo);
    }
    if derivatives((-hi).exp()).0 >= 0.0 {
        return Ok(t_hi);
    }
    let mut u = 0.0f64.clamp(lo, hi);
    for _ in 0..200 {
        let s = (-u).exp();
        let (g, hess) = derivatives(s);
        if g == 0.0 {
            return Ok(u.exp());
        }
        // g > 0: s is above the minimiser, so T is below it.
        if g > 0.0 {
            lo = u;
        } else {
            hi = u;
        }
        if hi - lo < 1e-12 {
            break;
        }
        let newton = s - g / hess;
        u = if hess > 0.0 && newton > 0.0 && (-newton.ln()) > lo && (-newton.ln()) < hi {
            -newton.ln()
        } else {
            0.5 * (lo + hi)
        };
        if (u - lo).min(hi - u) < 1e-13 {
            break;
        }
    }
    Ok(u.exp())
}

/// Keeps an evaluation's logits `[N, C]` and labels `[N]` (on their device, read back once) and
/// computes `ece`, `mce`, `nll` and `brier` from them; [`Calibration::logits`] and
/// [`Calibration::labels`] hand them to [`fit_temperature`]. Memory grows with the data: use
/// it on validation and test sets.
#[derive(Debug, Default)]
pub struct Calibration {
    logits: Vec<Tensor>,
    labels: Vec<Tensor>,
}

impl Calibration {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every logit row so far, `[N, C]` in `f32` on the CPU (`None` before any update).
    pub fn logits(&self) -> Option<Tensor> {
        (!self.logits.is_empty()).then(|| Tensor::cat(&self.logits, 0).to_device(Device::Cpu))
    }

    /// Every label so far, `[N]` `i64` on the CPU (`None` before any update).
    pub fn labels(&self) -> Option<Tensor> {
        (!self.labels.is_empty()).then(|| Tensor::cat(&self.labels, 0).to_device(Device::Cpu))
    }

    /// The scores so far (`None` before any update).
    pub fn scores(&self) -> Option<CalibrationScores> {
        Some(calibration_scores(&self.logits()?, &self.labels()?))
    }
}

impl Metric for Calibration {
    fn update(&mut self, logits: &Tensor, labels: &Tensor) -> Result<()> {
        same_batch("calibration", logits, labels)?;
        if logits.dim() != 2 || labels.dim() != 1 {
            return Err(TrainError::Metric {
                metric: "calibration".into(),
                reason: format!(
                    "expects logits [N, C] and class indices [N]; got {:?} and {:?}",
                    logits.size(),
                    labels.size()
                ),
            });
        }
        self.logits.push(logits.detach().to_kind(Kind::Float));
        self.labels.push(labels.detach().to_kind(Kind::Int64));
        Ok(())
    }
    fn compute(&self) -> Vec<(String, f64)> {
        match self.scores() {
            Some(s) => s.named(),
            None => ["ece", "mce", "nll", "brier"].iter().map(|n| (n.to_string(), f64::NAN)).collect(),
        }
    }
    fn reset(&mut self) {
        self.logits.clear();
        self.labels.clear();
    }
    fn state(&self) -> Vec<(String, Tensor)> {
        if self.logits.is_empty() {
            return Vec::new();
        }
        vec![("logits".into(), Tensor::cat(&self.logits, 0)), ("labels".into(), Tensor::cat(&self.labels, 0))]
    }
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.reset();
        let get = |name: &str| state.iter().find(|(k, _)| k == name).map(|(_, t)| t.copy());
        match (get("logits"), get("labels")) {
            (Some(z), Some(y)) => {
                self.logits.push(z);
                self.labels.push(y);
                Ok(())
            }
            (None, None) => Ok(()),
            _ => Err(TrainError::State {
                what: "calibration".into(),
                reason: "the saved state needs both `logits` and `labels`".into(),
            }),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn reduction(&self) -> Reduction {
        // Bins and the temperature need every sample together.
        Reduction::Concat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors(z: &[f32], c: i64, y: &[i64]) -> (Tensor, Tensor) {
        (Tensor::from_slice(z).reshape([-1, c]), Tensor::from_slice(y))
    }

    #[test]
    fn ece_by_hand() {
        // Two samples, both at confidence 0.5 (bin 7 of 15: (7/15, 8/15]), one right: ECE 0.
        let (z, y) = tensors(&[0.0, 0.0, 1.0, 1.0], 2, &[0, 1]);
        assert!(expected_calibration_error(&z, &y).abs() < 1e-12);
        // One sample at confidence sigmoid(2) ~ 0.881, wrong: ECE = MCE = 0.881.
        let (z, y) = tensors(&[2.0, 0.0], 2, &[1]);
        let conf = 1.0 / (1.0 + (-2.0f64).exp());
        assert!((expected_calibration_error(&z, &y) - conf).abs() < 1e-12);
        assert!((maximum_calibration_error(&z, &y) - conf).abs() < 1e-12);
        // Brier: (conf - 0)^2 + (1 - conf - 1)^2.
        assert!((brier_score(&z, &y) - 2.0 * conf * conf).abs() < 1e-12);
    }

    #[test]
    fn empty_bins_are_nan_and_left_out() {
        let (z, y) = tensors(&[3.0, 0.0, 0.0, 3.0], 2, &[0, 1]);
        let bins = reliability_bins(&z, &y, CALIBRATION_BINS);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), 2);
        assert!(bins[0].confidence.is_nan());
        assert!(maximum_calibration_error(&z, &y).is_finite());
    }

    #[test]
    fn temperature_undoes_a_scaling() {
        // Labels drawn from softmax(z): the NLL-optimal temperature of 3 z is close to 3.
        tch::manual_seed(0);
        let z = Tensor::randn([4000, 5], (Kind::Double, Device::Cpu)) * 2.0;
        let y = z.softmax(1, Kind::Double).multinomial(1, true).squeeze_dim(1);
        let t = fit_temperature(&(&z * 3.0), &y).unwrap();
        assert!((t - 3.0).abs() < 0.3, "{t}");
        // Dividing by the fitted T never raises the NLL.
        let before = negative_log_likelihood(&(&z * 3.0), &y);
        let after = negative_log_likelihood(&(&z * 3.0 / t), &y);
        assert!(after <= before, "{after} > {before}");
    }

    #[test]
    fn separable_logits_hit_the_lower_bound() {
        let (z, y) = tensors(&[1.0, 0.0, 0.0, 1.0], 2, &[0, 1]);
        assert_eq!(fit_temperature(&z, &y).unwrap(), TEMPERATURE_RANGE.0);
        let (z, y) = tensors(&[], 2, &[]);
        assert!(fit_temperature(&z, &y).unwrap_err().to_string().contains("no samples"));
    }
}
