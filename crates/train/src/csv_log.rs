//! `metrics.csv`: one row per epoch, appended and flushed as each epoch ends, resumable.

use crate::error::{Result, TrainError};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The header of `metrics.csv`, column for column.
pub const CSV_HEADER: &str =
    "epoch,lr,train_loss,train_acc,val_loss,val_acc,seconds,images_per_s,data_stall_pct";

/// One epoch's row of `metrics.csv`. Accuracies are fractions in `[0, 1]`; `lr` is the head
/// group's learning rate at the end of the epoch; `data_stall_pct` is the share of the
/// epoch's wall time the loop spent waiting for batches, in percent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochRecord {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Learning rate.
    pub lr: f64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Training top-1 accuracy.
    pub train_acc: f64,
    /// Mean validation loss.
    pub val_loss: f64,
    /// Validation top-1 accuracy.
    pub val_acc: f64,
    /// Wall time of the epoch (training and validation).
    pub seconds: f64,
    /// Training images per second.
    pub images_per_s: f64,
    /// Percent of the epoch spent waiting for data.
    pub data_stall_pct: f64,
}

impl EpochRecord {
    /// The CSV line (no newline). Floats are written in Rust's shortest form that reads back
    /// to the same value (`0.001`, `NaN`), which pandas and Python's `float()` both read.
    pub fn to_csv_line(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{}",
            self.epoch,
            self.lr,
            self.train_loss,
            self.train_acc,
            self.val_loss,
            self.val_acc,
            self.seconds,
            self.images_per_s,
            self.data_stall_pct
        )
    }

    fn parse(line: &str) -> std::result::Result<Self, String> {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 9 {
            return Err(format!("expected 9 comma-separated fields, found {}", fields.len()));
        }
        let epoch =
            fields[0].trim().parse().map_err(|_| format!("epoch `{}` is not a whole number", fields[0]))?;
        let names = CSV_HEADER.split(',').collect::<Vec<_>>();
        let mut v = [0.0; 8];
        for (i, slot) in v.iter_mut().enumerate() {
            let text = fields[i + 1].trim();
            *slot = text.parse().map_err(|_| format!("{} `{text}` is not a number", names[i + 1]))?;
        }
        Ok(EpochRecord {
            epoch,
            lr: v[0],
            train_loss: v[1],
            train_acc: v[2],
            val_loss: v[3],
            val_acc: v[4],
            seconds: v[5],
            images_per_s: v[6],
            data_stall_pct: v[7],
        })
    }
}

/// Appends [`EpochRecord`]s to `metrics.csv`, flushing each row so a crash loses nothing that
/// was logged and `tail -f` shows epochs as they end.
#[derive(Debug)]
pub struct CsvLogger {
    path: PathBuf,
    file: File,
}

impl CsvLogger {
    /// Starts `path` afresh with the header (an existing file is replaced).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut file = File::create(&path).map_err(|e| TrainError::io(&path, e))?;
        writeln!(file, "{CSV_HEADER}").and_then(|()| file.flush()).map_err(|e| TrainError::io(&path, e))?;
        Ok(CsvLogger { path, file })
    }

    /// Reopens `path` to continue a run whose last completed (checkpointed) epoch is
    /// `last_epoch`: rows up to `last_epoch` are kept, later ones (written after that
    /// checkpoint, before a crash) are dropped, so resumed epochs are not logged twice. The
    /// file is rewritten through a temporary file and a rename, so a crash here leaves either
    /// the old or the new file. A missing file is created with the header; a header other than
    /// [`CSV_HEADER`] or a malformed row is an error naming the line.
    pub fn resume(path: impl AsRef<Path>, last_epoch: usize) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Self::create(&path);
        }
        let kept: Vec<EpochRecord> =
            read_metrics_csv(&path)?.into_iter().filter(|r| r.epoch <= last_epoch).collect();
        let mut text = format!("{CSV_HEADER}\n");
        for r in &kept {
            text.push_str(&r.to_csv_line());
            text.push('\n');
        }
        let tmp = path.with_extension("csv.tmp");
        std::fs::write(&tmp, text).map_err(|e| TrainError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| TrainError::io(&path, e))?;
        let file = OpenOptions::new().append(true).open(&path).map_err(|e| TrainError::io(&path, e))?;
        Ok(CsvLogger { path, file })
    }

    /// Appends one row and flushes it to the OS.
    pub fn append(&mut self, record: &EpochRecord) -> Result<()> {
        let line = format!("{}\n", record.to_csv_line());
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| TrainError::io(&self.path, e))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads every row of a `metrics.csv` (for plotting and resume), checking the header.
pub fn read_metrics_csv(path: impl AsRef<Path>) -> Result<Vec<EpochRecord>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
    let bad = |line: usize, reason: String| TrainError::Csv { path: path.to_path_buf(), line, reason };
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim_end() == CSV_HEADER => {}
        Some(h) => return Err(bad(1, format!("header is `{h}`, expected `{CSV_HEADER}`"))),
        None => return Err(bad(1, "the file is empty; expected the header".into())),
    }
    let mut records = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        records.push(EpochRecord::parse(line).map_err(|reason| bad(i + 2, reason))?);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_exactly() {
        let r = EpochRecord {
            epoch: 3,
            lr: 1e-5,
            train_loss: 0.1 + 0.2,
            train_acc: 2.0 / 3.0,
            val_loss: f64::NAN,
            val_acc: 1.0,
            seconds: 12.5,
            images_per_s: 1234.5678,
            data_stall_pct: 0.0,
        };
        let line = r.to_csv_line();
        assert!(line.starts_with("3,0.00001,0.30000000000000004,"), "{line}");
        let back = EpochRecord::parse(&line).unwrap();
        assert!(back.val_loss.is_nan());
        assert_eq!(EpochRecord { val_loss: 0.0, ..back }, EpochRecord { val_loss: 0.0, ..r });
    }

    #[test]
    fn bad_rows_name_the_column() {
        let err = EpochRecord::parse("1,0.1,x,0,0,0,0,0,0").unwrap_err();
        assert!(err.contains("train_loss `x`"), "{err}");
        assert!(EpochRecord::parse("1,2").unwrap_err().contains("found 2"));
    }

    #[test]
    fn header_has_the_documented_columns() {
        assert_eq!(CSV_HEADER.split(',').count(), 9);
    }
}
