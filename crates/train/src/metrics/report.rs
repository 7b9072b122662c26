//! The per-class report of a classifier's evaluation: precision, recall, F1 and support per
//! class with their macro and weighted averages, as scikit-learn's `classification_report`
//! computes them, and the most-confused class pairs.

use super::ConfusionMatrix;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Precision, recall, F1 and support of one class (or one average of them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassScores {
    /// Correct predictions of the class over all predictions of it.
    pub precision: f64,
    /// Correct predictions of the class over its samples.
    pub recall: f64,
    /// The harmonic mean of precision and recall.
    pub f1: f64,
    /// Samples whose true class this is (for an average: all samples).
    pub support: u64,
}

impl ClassScores {
    fn to_json(self) -> Value {
        json!({ "precision": self.precision, "recall": self.recall, "f1-score": self.f1, "support": self.support })
    }
}

/// Samples of one class predicted as another: a cell off the confusion matrix's diagonal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confusion {
    /// The samples' class (its index).
    pub true_class: usize,
    /// The class they were predicted as.
    pub predicted: usize,
    /// How many samples.
    pub count: u64,
}

/// scikit-learn's `classification_report(y_true, y_pred, labels=range(C), output_dict=True,
/// zero_division=0)` over every class of a [`ConfusionMatrix`], plus its off-diagonal cells
/// from the most frequent down.
///
/// A ratio whose denominator is zero (the precision of a class never predicted, the recall of a
/// class with no sample, their F1) is 0, as scikit-learn's default `zero_division` gives (it
/// also warns); the macro average takes every class, those included, as scikit-learn does when
/// given all labels.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassificationReport {
    /// One entry per class, in class order.
    pub per_class: Vec<ClassScores>,
    /// Correct predictions over all samples (NaN when there are none).
    pub accuracy: f64,
    /// The unweighted mean of the classes' scores.
    pub macro_avg: ClassScores,
    /// The classes' scores weighted by their support.
    pub weighted_avg: ClassScores,
    /// Every non-zero off-diagonal cell, most samples first (ties: by true, then predicted class).
    pub confusions: Vec<Confusion>,
}

/// `num / den`, 0 when `den` is 0 (scikit-learn's `zero_division=0`).
fn ratio(num: f64, den: f64) -> f64 {
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

impl ClassificationReport {
    /// The report of the predictions counted in `confusion`.
    pub fn from_confusion(confusion: &ConfusionMatrix) -> Self {
        let c = confusion.num_classes();
        let support = confusion.support();
        let predicted: Vec<u64> = (0..c).map(|p| (0..c).map(|t| confusion.get(t, p)).sum()).collect();
        let per_class: Vec<ClassScores> = (0..c)
            .map(|k| {
                let tp = confusion.get(k, k) as f64;
                let (fp, fn_) = (predicted[k] as f64 - tp, support[k] as f64 - tp);
                ClassScores {
                    precision: ratio(tp, tp + fp),
                    recall: ratio(tp, tp + fn_),
                    // scikit-learn's F-beta at beta 1, from the counts rather than from the two ratios.
                    f1: ratio(2.0 * tp, 2.0 * tp + fp + fn_),
                    support: support[k],
                }
            })
            .collect();
        let total = confusion.total();
        let average = |weight: &dyn Fn(usize) -> f64| {
            let norm: f64 = (0..c).map(weight).sum();
            let mean = |f: &dyn Fn(&ClassScores) -> f64| {
                ratio(per_class.iter().enumerate().map(|(k, s)| weight(k) * f(s)).sum(), norm)
            };
            ClassScores {
                precision: mean(&|s| s.precision),
                recall: mean(&|s| s.recall),
                f1: mean(&|s| s.f1),
                support: total,
            }
        };
        let macro_avg = average(&|_| 1.0);
        let weighted_avg = average(&|k| support[k] as f64);
        let mut confusions: Vec<Confusion> = (0..c)
            .flat_map(|t| (0..c).map(move |p| (t, p)))
            .filter(|&(t, p)| t != p && confusion.get(t, p) > 0)
            .map(|(t, p)| Confusion { true_class: t, predicted: p, count: confusion.get(t, p) })
            .collect();
        confusions.sort_by(|a, b| {
            b.count.cmp(&a.count).then((a.true_class, a.predicted).cmp(&(b.true_class, b.predicted)))
        });
        ClassificationReport {
            per_class,
            accuracy: confusion.accuracy(),
            macro_avg,
            weighted_avg,
            confusions,
        }
    }

    /// The report as JSON: `per_class` (in class order, each `{class, precision, recall,
    /// f1-score, support}`: scikit-learn's keys), `accuracy`, `macro avg`, `weighted avg` and
    /// `most_confused` (`{true, predicted, count}`, at most `top` pairs).
    ///
    /// # Panics
    /// When `classes` does not name every class.
    pub fn to_json(&self, classes: &[String], top: usize) -> Value {
        assert_eq!(classes.len(), self.per_class.len(), "one name per class");
        let per_class: Vec<Value> = classes
            .iter()
            .zip(&self.per_class)
            .map(|(name, s)| {
                let mut v = s.to_json();
                v["class"] = json!(name);
                v
            })
            .collect();
        json!({
            "per_class": per_class,
            "accuracy": self.accuracy,
            "macro avg": self.macro_avg.to_json(),
            "weighted avg": self.weighted_avg.to_json(),
            "most_confused": self.confusions.iter().take(top).map(|c| json!({
                "true": classes[c.true_class],
                "predicted": classes[c.predicted],
                "count": c.count,
            })).collect::<Vec<_>>(),
        })
    }

    /// The report as CSV: a header `class,precision,recall,f1-score,support`, a row per class,
    /// then `accuracy` (its value in the F1 column, as scikit-learn prints it, and all samples
    /// as support), `macro avg` and `weighted avg`. Scores at full precision; a class name
    /// holding a comma, a quote or a line break is quoted.
    ///
    /// # Panics
    /// When `classes` does not name every class.
    pub fn to_csv(&self, classes: &[String]) -> String {
        assert_eq!(classes.len(), self.per_class.len(), "one name per class");
        let mut out = String::from("class,precision,recall,f1-score,support\n");
        let row = |out: &mut String, name: &str, s: &ClassScores| {
            let _ = writeln!(out, "{},{},{},{},{}", csv_field(name), s.precision, s.recall, s.f1, s.support);
        };
        for (name, s) in classes.iter().zip(&self.per_class) {
            row(&mut out, name, s);
        }
        // The accuracy row goes between the classes and the averages, as in scikit-learn's text.
        let _ = writeln!(out, "accuracy,,,{},{}", self.accuracy, self.macro_avg.support);
        row(&mut out, "macro avg", &self.macro_avg);
        row(&mut out, "weighted avg", &self.weighted_avg);
        out
    }

    /// The report as text, as scikit-learn's `classification_report` prints it (4 decimals),
    /// then up to `top` most-confused pairs.
    ///
    /// # Panics
    /// When `classes` does not name every class.
    pub fn to_text(&self, classes: &[String], top: usize) -> String {
        assert_eq!(classes.len(), self.per_class.len(), "one name per class");
        let width = classes.iter().map(String::len).max().unwrap_or(0).max("weighted avg".len());
        let mut out = format!(
            "{:>width$}  {:>9}  {:>9}  {:>9}  {:>9}\n\n",
            "", "precision", "recall", "f1-score", "support"
        );
        let line = |out: &mut String, name: &str, s: &ClassScores| {
            let _ = writeln!(
                out,
                "{name:>width$}  {:>9.4}  {:>9.4}  {:>9.4}  {:>9}",
                s.precision, s.recall, s.f1, s.support
            );
        };
        for (name, s) in classes.iter().zip(&self.per_class) {
            line(&mut out, name, s);
        }
        let _ = writeln!(
            out,
            "\n{:>width$}  {:>9}  {:>9}  {:>9.4}  {:>9}",
            "accuracy", "", "", self.accuracy, self.macro_avg.support
        );
        line(&mut out, "macro avg", &self.macro_avg);
        line(&mut out, "weighted avg", &self.weighted_avg);
        if !self.confusions.is_empty() && top > 0 {
            let _ = writeln!(out, "\nmost confused (true -> predicted: samples)");
            for c in self.confusions.iter().take(top) {
                let _ = writeln!(out, "  {} -> {}: {}", classes[c.true_class], classes[c.predicted], c.count);
            }
        }
        out
    }
}

/// A CSV field, quoted (inner quotes doubled) when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|k| format!("c{k}")).collect()
    }

    /// Worked by hand: y_true [0,0,0,1,1,2], y_pred [0,0,1,1,0,0]; class 2 is never predicted
    /// (precision 0 by zero_division) and nothing is predicted right for it.
    #[test]
    fn hand_worked_report() {
        let cm = ConfusionMatrix::from_labels(3, &[0, 0, 0, 1, 1, 2], &[0, 0, 1, 1, 0, 0]);
        let r = ClassificationReport::from_confusion(&cm);
        let s0 = r.per_class[0];
        assert_eq!((s0.precision, s0.recall, s0.support), (0.5, 2.0 / 3.0, 3));
        assert!((s0.f1 - 4.0 / 7.0).abs() < 1e-15);
        assert_eq!(r.per_class[1], ClassScores { precision: 0.5, recall: 0.5, f1: 0.5, support: 2 });
        assert_eq!(r.per_class[2], ClassScores { precision: 0.0, recall: 0.0, f1: 0.0, support: 1 });
        assert_eq!(r.accuracy, 0.5);
        assert!((r.macro_avg.precision - 1.0 / 3.0).abs() < 1e-15);
        assert!((r.weighted_avg.recall - 0.5).abs() < 1e-15);
        assert_eq!(r.macro_avg.support, 6);
        assert_eq!(
            r.confusions,
            vec![
                Confusion { true_class: 0, predicted: 1, count: 1 },
                Confusion { true_class: 1, predicted: 0, count: 1 },
                Confusion { true_class: 2, predicted: 0, count: 1 },
            ]
        );
        let text = r.to_text(&names(3), 2);
        assert!(text.contains("c0 -> c1: 1"), "{text}");
        assert!(!text.contains("c2 -> c0"), "at most 2 pairs: {text}");
    }

    #[test]
    fn csv_quotes_names_and_puts_accuracy_before_the_averages() {
        let cm = ConfusionMatrix::from_labels(2, &[0, 1, 1], &[0, 1, 0]);
        let r = ClassificationReport::from_confusion(&cm);
        let csv = r.to_csv(&["a,b".to_string(), "say \"c\"".to_string()]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "class,precision,recall,f1-score,support");
        assert_eq!(lines[1], "\"a,b\",0.5,1,0.6666666666666666,1");
        assert!(lines[2].starts_with("\"say \"\"c\"\"\",1,0.5,"), "{csv}");
        assert_eq!(lines[3], format!("accuracy,,,{},3", 2.0 / 3.0));
        assert!(lines[4].starts_with("macro avg,") && lines[5].starts_with("weighted avg,"), "{csv}");
        let json = r.to_json(&["a,b".to_string(), "x".to_string()], 5);
        assert_eq!(json["per_class"][0]["class"], "a,b");
        assert_eq!(json["most_confused"][0], json!({ "true": "x", "predicted": "a,b", "count": 1 }));
    }

    #[test]
    fn an_empty_matrix_reports_zeros_and_nan_accuracy() {
        let r = ClassificationReport::from_confusion(&ConfusionMatrix::from_labels(2, &[], &[]));
        assert_eq!(r.weighted_avg, ClassScores { precision: 0.0, recall: 0.0, f1: 0.0, support: 0 });
        assert!(r.accuracy.is_nan());
        assert!(r.confusions.is_empty());
    }
}
