//! Order statistics of repeated timings: median, quartiles and min-max spread.

/// Summary of one side's repeated timings, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Fastest repetition.
    pub min: f64,
    /// Slowest repetition.
    pub max: f64,
    /// First quartile (linear interpolation, numpy's default).
    pub q1: f64,
    /// Third quartile (linear interpolation, numpy's default).
    pub q3: f64,
    /// Number of repetitions.
    pub n: usize,
}

/// The `q`-quantile (0..=1) of sorted values with linear interpolation, as `numpy.quantile`.
///
/// # Panics
/// If `sorted` is empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of no values");
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Median, quartiles and range of `values` (any order); `None` when empty or non-finite.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(Summary {
        median: quantile(&sorted, 0.5),
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        q1: quantile(&sorted, 0.25),
        q3: quantile(&sorted, 0.75),
        n: sorted.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median(values: &[f64]) -> Option<f64> {
        summarize(values).map(|s| s.median)
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn quartiles_match_numpy_linear() {
        // numpy.quantile([1, 2, 3, 4, 10], [0.25, 0.75]) == [2.0, 4.0]
        let s = summarize(&[10.0, 2.0, 4.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.q1, s.median, s.q3), (2.0, 3.0, 4.0));
        assert_eq!((s.min, s.max, s.n), (1.0, 10.0, 5));
        // numpy.quantile([1, 2, 3, 4], 0.25) == 1.75
        let s = summarize(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((s.q1 - 1.75).abs() < 1e-12 && (s.q3 - 3.25).abs() < 1e-12);
    }

    #[test]
    fn non_finite_values_give_no_summary() {
        assert!(summarize(&[1.0, f64::NAN]).is_none());
    }
}
