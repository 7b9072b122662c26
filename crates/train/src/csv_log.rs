//! `metrics.csv`: one row per epoch, appended and flushed as each epoch ends, resumable. The
//! columns follow the run's metrics: `epoch,lr,train_<m>...,val_<m>...,seconds,images_per_s,
//! data_stall_pct`, e.g. `epoch,lr,train_loss,train_acc,val_loss,val_acc,val_top5,...` for
//! classification and `...,val_mae,val_rmse,...` for regression.

use crate::error::{Result, TrainError};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The columns every `metrics.csv` has before the metrics.
const LEADING: [&str; 2] = ["epoch", "lr"];
/// The columns every `metrics.csv` has after the metrics.
const TRAILING: [&str; 3] = ["seconds", "images_per_s", "data_stall_pct"];

/// One epoch of a run: the learning rate, the training and validation metrics by name
/// (`loss`, `acc`, `top5`, `mae`, ...; logged with a `train_` / `val_` prefix) and throughput.
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
    /// Wall time of the epoch (training and validation).
    pub seconds: f64,
    /// Training samples per second.
    pub images_per_s: f64,
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
            "images_per_s" => Some(self.images_per_s),
            "data_stall_pct" => Some(self.data_stall_pct),
            _ => {
                let find =
                    |list: &[(String, f64)], key: &str| list.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
                if let Some(key) = name.strip_prefix("train_") {
                    find(&self.train, key)
                } else if let Some(key) = name.strip_prefix("val_") {
                    find(&self.val, key)
                } else {
                    None
                }
            }
        }
    }

    /// Every value with its logged name, in column order.
    pub fn named_values(&self) -> Vec<(String, f64)> {
        let mut out = vec![("epoch".to_string(), self.epoch as f64), ("lr".to_string(), self.lr)];
        out.extend(self.train.iter().map(|(k, v)| (format!("train_{k}"), *v)));
        out.extend(self.val.iter().map(|(k, v)| (format!("val_{k}"), *v)));
        out.extend([
            ("seconds".to_string(), self.seconds),
            ("images_per_s".to_string(), self.images_per_s),
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

    /// Parses a line of a file whose header is `columns`.
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
                "images_per_s" => record.images_per_s = value,
                "data_stall_pct" => record.data_stall_pct = value,
                other => {
                    if let Some(k) = other.strip_prefix("train_") {
                        record.train.push((k.to_string(), value));
                    } else if let Some(k) = other.strip_prefix("val_") {
                        record.val.push((k.to_string(), value));
                    } else {
                        return Err(format!("unknown column `{other}`"));
                    }
                }
            }
        }
        Ok(record)
    }
}

/// Checks a header: `epoch,lr`, metric columns, then the three throughput columns.
fn check_header(header: &str) -> std::result::Result<Vec<&str>, String> {
    let columns: Vec<&str> = header.trim_end().split(',').collect();
    let n = columns.len();
    let ok = n >= LEADING.len() + TRAILING.len()
        && columns[..2] == LEADING
        && columns[n - 3..] == TRAILING
        && columns[2..n - 3].iter().all(|c| c.starts_with("train_") || c.starts_with("val_"));
    if ok {
        Ok(columns)
    } else {
        Err(format!(
            "header is `{}`, expected `epoch,lr,` then train_*/val_* columns, then `seconds,images_per_s,data_stall_pct`",
            header.trim_end()
        ))
    }
}

/// Appends [`EpochRecord`]s to `metrics.csv`, flushing each row so a crash loses nothing that
/// was logged and `tail -f` shows epochs as they end. The header is written with the first
/// row (its columns are the run's metrics); every later row must have the same columns.
#[derive(Debug)]
pub struct CsvLogger {
    path: PathBuf,
    file: File,
    header: Option<String>,
}

impl CsvLogger {
    /// Starts `path` afresh (an existing file is emptied).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|e| TrainError::io(&path, e))?;
        Ok(CsvLogger { path, file, header: None })
    }

    /// Reopens `path` to continue a run whose last completed (checkpointed) epoch is
    /// `last_epoch`: rows up to `last_epoch` are kept, later ones (written after that
    /// checkpoint, before a crash) are dropped, so resumed epochs are not logged twice. The
    /// file is rewritten through a temporary file and a rename, so a crash here leaves either
    /// the old or the new file. A missing or empty file starts afresh; a foreign header or a
    /// malformed row is an error naming the line.
    pub fn resume(path: impl AsRef<Path>, last_epoch: usize) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => text,
            Ok(_) => return Self::create(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Self::create(&path),
            Err(e) => return Err(TrainError::io(&path, e)),
        };
        let kept: Vec<EpochRecord> =
            parse_csv(&path, &existing)?.into_iter().filter(|r| r.epoch <= last_epoch).collect();
        let header = existing.lines().next().unwrap_or_default().trim_end().to_string();
        let mut text = format!("{header}\n");
        for r in &kept {
            text.push_str(&r.to_csv_line());
            text.push('\n');
        }
        let tmp = path.with_extension("csv.tmp");
        std::fs::write(&tmp, text).map_err(|e| TrainError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| TrainError::io(&path, e))?;
        let file = OpenOptions::new().append(true).open(&path).map_err(|e| TrainError::io(&path, e))?;
        Ok(CsvLogger { path, file, header: Some(header) })
    }

    /// Appends one row (after the header, for the first row) and flushes it to the OS. A row
    /// whose columns differ from the file's is an error naming both headers.
    pub fn append(&mut self, record: &EpochRecord) -> Result<()> {
        let columns = record.csv_header();
        let mut text = String::new();
        match &self.header {
            None => {
                text.push_str(&columns);
                text.push('\n');
                self.header = Some(columns);
            }
            Some(h) if *h != columns => {
                return Err(TrainError::Csv {
                    path: self.path.clone(),
                    line: 1,
                    reason: format!("the file's columns are `{h}` but this run logs `{columns}`"),
                })
            }
            Some(_) => {}
        }
        text.push_str(&record.to_csv_line());
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| TrainError::io(&self.path, e))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn parse_csv(path: &Path, text: &str) -> Result<Vec<EpochRecord>> {
    let bad = |line: usize, reason: String| TrainError::Csv { path: path.to_path_buf(), line, reason };
    let mut lines = text.lines();
    let header = lines.next().ok_or_else(|| bad(1, "the file is empty; expected the header".into()))?;
    let columns = check_header(header).map_err(|reason| bad(1, reason))?;
    let mut records = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        records.push(EpochRecord::parse(&columns, line).map_err(|reason| bad(i + 2, reason))?);
    }
    Ok(records)
}

/// Reads every row of a `metrics.csv` (for plotting and resume), checking the header.
pub fn read_metrics_csv(path: impl AsRef<Path>) -> Result<Vec<EpochRecord>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
    parse_csv(path, &text)
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
            seconds: 12.5,
            images_per_s: 1234.5678,
            data_stall_pct: 0.0,
        }
    }

    #[test]
    fn lines_round_trip_exactly() {
        let r = record();
        assert_eq!(
            r.csv_header(),
            "epoch,lr,train_loss,train_acc,val_loss,val_acc,seconds,images_per_s,data_stall_pct"
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
    }

    #[test]
    fn bad_rows_and_headers_name_the_column() {
        let err = EpochRecord::parse(&["epoch", "lr", "train_loss"], "1,0.1,x").unwrap_err();
        assert!(err.contains("train_loss `x`"), "{err}");
        assert!(EpochRecord::parse(&["epoch", "lr"], "1,2,3").unwrap_err().contains("found 3"));
        assert!(check_header("epoch,lr,train_loss,seconds,images_per_s,data_stall_pct").is_ok());
        assert!(check_header("epoch,lr,foo,seconds,images_per_s,data_stall_pct").is_err());
        assert!(check_header("a,b").is_err());
    }
}
