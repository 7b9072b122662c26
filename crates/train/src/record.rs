//! `EpochRecord`: what the loop records of each epoch (learning rate, the training and
//! validation metrics by name, throughput), the row of `metrics.csv` and of the history a
//! checkpoint keeps.

use crate::error::{Result, TrainError};
use serde_json::json;

/// The columns every record has before the metrics.
const LEADING: [&str; 2] = ["epoch", "lr"];
/// The columns every record has after the metrics.
const TRAILING: [&str; 3] = ["seconds", "samples_per_s", "data_stall_pct"];
/// The name `samples_per_s` had before the loop knew other samples than images; files and
/// checkpoints written then still read.
const LEGACY_SAMPLES_PER_S: &str = "images_per_s";

/// One epoch of a run: the learning rate, the training and validation metrics by name
/// (`loss`, `acc`, `top5`, `mae`, ...; logged with a `train_` / `val_` prefix, those of an EMA
/// of the weights with `ema_val_`) and throughput.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpochRecord {
    /// 1-based epoch number.
    pub epoch: usize,
    /// The last param group's learning rate at the end of the epoch (the head's, for the
    /// fine-tuning recipe).
    pub lr: f64,
    /// Training metrics, `loss` first.
    pub train: Vec<(String, f64)>,
    /// Validation metrics, `loss` first (empty without a validation loader).
    pub val: Vec<(String, f64)>,
    /// Validation metrics of the averaged weights a callback keeps ([`ModelEma`](crate::ModelEma)),
    /// logged with an `ema_val_` prefix (empty without one).
    pub ema_val: Vec<(String, f64)>,
    /// Wall time of the epoch (training and validation).
    pub seconds: f64,
    /// Training samples (images, documents, ...) per second, of all ranks together.
    pub samples_per_s: f64,
    /// Percent of the training time spent waiting for data.
    pub data_stall_pct: f64,
}

impl EpochRecord {
    /// A value by its logged name: `epoch`, `lr`, `train_loss`, `val_acc`, `seconds`, ...
    pub fn get(&self, name: &str) -> Option<f64> {
        match name {
            "epoch" => Some(self.epoch as f64),
            "lr" => Some(self.lr),
            "seconds" => Some(self.seconds),
            "samples_per_s" => Some(self.samples_per_s),
            "data_stall_pct" => Some(self.data_stall_pct),
            _ => {
                let find =
                    |list: &[(String, f64)], key: &str| list.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
                if let Some(key) = name.strip_prefix("train_") {
                    find(&self.train, key)
                } else if let Some(key) = name.strip_prefix("val_") {
                    find(&self.val, key)
                } else if let Some(key) = name.strip_prefix("ema_val_") {
                    find(&self.ema_val, key)
                } else {
                    None
                }
            }
        }
    }

    /// The value of `name` as a candidate for the best epoch: as [`get`](Self::get) reads it,
    /// but NaN, which never improves on anything, when any figure of the same stage (`train_`,
    /// `val_`, `ema_val_`) is not finite. Weights gone non-finite can still score a number (an
    /// accuracy of one class in three, every output NaN) beside a NaN loss; such an epoch is
    /// not "best".
    pub fn monitored(&self, name: &str) -> Option<f64> {
        let value = self.get(name)?;
        let stage = if name.starts_with("train_") {
            &self.train
        } else if name.starts_with("val_") {
            &self.val
        } else if name.starts_with("ema_val_") {
            &self.ema_val
        } else {
            return Some(value);
        };
        Some(if stage.iter().all(|(_, v)| v.is_finite()) { value } else { f64::NAN })
    }

    /// The names of the validation figures (`val_`, `ema_val_`) that are not finite.
    pub fn non_finite_validation(&self) -> Vec<String> {
        let val = self.val.iter().map(|(k, v)| (format!("val_{k}"), *v));
        let ema = self.ema_val.iter().map(|(k, v)| (format!("ema_val_{k}"), *v));
        val.chain(ema).filter(|(_, v)| !v.is_finite()).map(|(k, _)| k).collect()
    }

    /// Every value with its logged name, in column order.
    pub fn named_values(&self) -> Vec<(String, f64)> {
        let mut out = vec![("epoch".to_string(), self.epoch as f64), ("lr".to_string(), self.lr)];
        out.extend(self.train.iter().map(|(k, v)| (format!("train_{k}"), *v)));
        out.extend(self.val.iter().map(|(k, v)| (format!("val_{k}"), *v)));
        out.extend(self.ema_val.iter().map(|(k, v)| (format!("ema_val_{k}"), *v)));
        out.extend([
            ("seconds".to_string(), self.seconds),
            ("samples_per_s".to_string(), self.samples_per_s),
            ("data_stall_pct".to_string(), self.data_stall_pct),
        ]);
        out
    }

    /// The CSV header of this record's columns (no newline).
    pub fn csv_header(&self) -> String {
        self.named_values().into_iter().map(|(k, _)| k).collect::<Vec<_>>().join(",")
    }

    /// The CSV line (no newline). Floats are written in Rust's shortest form that reads back
    /// to the same value (`0.001`, `NaN`), which pandas and Python's `float()` both read.
    pub fn to_csv_line(&self) -> String {
        let mut fields = vec![self.epoch.to_string()];
        fields.extend(self.named_values().into_iter().skip(1).map(|(_, v)| v.to_string()));
        fields.join(",")
    }

    /// Parses a line of a file whose header is `columns` (`images_per_s`, the name of
    /// `samples_per_s` in older files, reads too).
    pub fn parse(columns: &[&str], line: &str) -> std::result::Result<Self, String> {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != columns.len() {
            return Err(format!("expected {} comma-separated fields, found {}", columns.len(), fields.len()));
        }
        let mut record = EpochRecord::default();
        for (name, text) in columns.iter().zip(&fields) {
            let text = text.trim();
            if *name == "epoch" {
                record.epoch = text.parse().map_err(|_| format!("epoch `{text}` is not a whole number"))?;
                continue;
            }
            let value: f64 = text.parse().map_err(|_| format!("{name} `{text}` is not a number"))?;
            match *name {
                "lr" => record.lr = value,
                "seconds" => record.seconds = value,
                "samples_per_s" | LEGACY_SAMPLES_PER_S => record.samples_per_s = value,
                "data_stall_pct" => record.data_stall_pct = value,
                other => {
                    if let Some(k) = other.strip_prefix("train_") {
                        record.train.push((k.to_string(), value));
                    } else if let Some(k) = other.strip_prefix("val_") {
                        record.val.push((k.to_string(), value));
                    } else if let Some(k) = other.strip_prefix("ema_val_") {
                        record.ema_val.push((k.to_string(), value));
                    } else {
                        return Err(format!("unknown column `{other}`"));
                    }
                }
            }
        }
        Ok(record)
    }
}

/// Records as CSV text inside JSON (a checkpoint's history): exact (shortest round-trip
/// floats) and NaN-safe.
pub(crate) fn history_to_json(history: &[EpochRecord]) -> serde_json::Value {
    match history.first() {
        None => json!({ "header": "", "rows": [] }),
        Some(first) => json!({
            "header": first.csv_header(),
            "rows": history.iter().map(EpochRecord::to_csv_line).collect::<Vec<_>>(),
        }),
    }
}

/// Reads [`history_to_json`]'s form back.
pub(crate) fn history_from_json(value: &serde_json::Value) -> Result<Vec<EpochRecord>> {
    let bad = |reason: String| TrainError::State { what: "the epoch history".into(), reason };
    let header = value.get("header").and_then(|h| h.as_str()).ok_or_else(|| bad("no header".into()))?;
    let rows = value.get("rows").and_then(|r| r.as_array()).ok_or_else(|| bad("no rows".into()))?;
    let columns: Vec<&str> = header.split(',').collect();
    rows.iter()
        .map(|r| {
            let line = r.as_str().ok_or_else(|| bad("a row is not text".into()))?;
            EpochRecord::parse(&columns, line).map_err(bad)
        })
        .collect()
}

/// Checks a header: `epoch,lr`, metric columns, then the three throughput columns (with
/// `images_per_s` accepted for `samples_per_s`).
pub(crate) fn check_header(header: &str) -> std::result::Result<Vec<&str>, String> {
    let columns: Vec<&str> = header.trim_end().split(',').collect();
    let n = columns.len();
    let trailing_ok = |c: &[&str]| {
        c[0] == TRAILING[0] && (c[1] == TRAILING[1] || c[1] == LEGACY_SAMPLES_PER_S) && c[2] == TRAILING[2]
    };
    let ok = n >= LEADING.len() + TRAILING.len()
        && columns[..2] == LEADING
        && trailing_ok(&columns[n - 3..])
        && columns[2..n - 3].iter().all(|c| ["train_", "val_", "ema_val_"].iter().any(|p| c.starts_with(p)));
    if ok {
        Ok(columns)
    } else {
        Err(format!(
            "header is `{}`, expected `epoch,lr,` then train_*/val_*/ema_val_* columns, then `seconds,samples_per_s,data_stall_pct`",
            header.trim_end()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> EpochRecord {
        EpochRecord {
            epoch: 3,
            lr: 1e-5,
            train: vec![("loss".into(), 0.1 + 0.2), ("acc".into(), 2.0 / 3.0)],
            val: vec![("loss".into(), f64::NAN), ("acc".into(), 1.0)],
            ema_val: vec![],
            seconds: 12.5,
            samples_per_s: 1234.5678,
            data_stall_pct: 0.0,
        }
    }

    /// A NaN validation loss beside an accuracy of 1.0: the accuracy is no candidate for best,
    /// the other stages' figures still are, and the NaN is named.
    #[test]
    fn a_non_finite_figure_makes_its_stage_no_candidate_for_best() {
        let r = record();
        assert_eq!(r.get("val_acc"), Some(1.0));
        assert!(r.monitored("val_acc").unwrap().is_nan());
        assert_eq!(r.monitored("train_acc"), Some(2.0 / 3.0));
        assert_eq!(r.monitored("lr"), Some(1e-5));
        assert_eq!(r.monitored("val_top5"), None);
        assert_eq!(r.non_finite_validation(), ["val_loss"]);
        let finite =
            EpochRecord { epoch: 2, val: vec![("loss".into(), 0.9), ("acc".into(), 0.5)], ..record() };
        let monitor = crate::Monitor::max("val_acc");
        assert_eq!(crate::best_of(&[finite.clone(), r.clone()], &monitor), Some((0.5, 2)));
        assert_eq!(crate::best_of(&[r], &monitor), None);
        assert!(finite.non_finite_validation().is_empty());
    }

    #[test]
    fn lines_round_trip_exactly() {
        let r = record();
        assert_eq!(
            r.csv_header(),
            "epoch,lr,train_loss,train_acc,val_loss,val_acc,seconds,samples_per_s,data_stall_pct"
        );
        let line = r.to_csv_line();
        assert!(line.starts_with("3,0.00001,0.30000000000000004,"), "{line}");
        let header = r.csv_header();
        let columns: Vec<&str> = header.split(',').collect();
        let back = EpochRecord::parse(&columns, &line).unwrap();
        assert!(back.get("val_loss").unwrap().is_nan());
        assert_eq!(back.to_csv_line(), line);
        assert_eq!(back.get("train_acc"), Some(2.0 / 3.0));
        assert_eq!(back.get("val_top5"), None);
        let with_ema = EpochRecord { ema_val: vec![("loss".into(), 0.25), ("acc".into(), 0.5)], ..r };
        let header = with_ema.csv_header();
        assert!(header.contains(",val_acc,ema_val_loss,ema_val_acc,seconds"), "{header}");
        let columns = check_header(&header).unwrap();
        let back = EpochRecord::parse(&columns, &with_ema.to_csv_line()).unwrap();
        assert_eq!(back.get("ema_val_acc"), Some(0.5));
        assert_eq!(back.ema_val, with_ema.ema_val);
    }

    #[test]
    fn files_of_the_image_only_era_still_read() {
        let old = "epoch,lr,train_loss,seconds,images_per_s,data_stall_pct";
        let columns = check_header(old).unwrap();
        let r = EpochRecord::parse(&columns, "1,0.1,0.5,2,300.5,1").unwrap();
        assert_eq!(r.samples_per_s, 300.5);
        assert!(r.csv_header().ends_with("seconds,samples_per_s,data_stall_pct"));
    }

    #[test]
    fn bad_rows_and_headers_name_the_column() {
        let err = EpochRecord::parse(&["epoch", "lr", "train_loss"], "1,0.1,x").unwrap_err();
        assert!(err.contains("train_loss `x`"), "{err}");
        assert!(EpochRecord::parse(&["epoch", "lr"], "1,2,3").unwrap_err().contains("found 3"));
        assert!(check_header("epoch,lr,train_loss,seconds,samples_per_s,data_stall_pct").is_ok());
        assert!(check_header("epoch,lr,foo,seconds,samples_per_s,data_stall_pct").is_err());
        assert!(check_header("a,b").is_err());
    }
}
