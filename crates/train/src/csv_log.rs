//! `metrics.csv`: one row per epoch, appended and flushed as each epoch ends, resumable. The
//! columns are an [`EpochRecord`]'s: `epoch,lr,train_<m>...,val_<m>...,seconds,samples_per_s,
//! data_stall_pct`, e.g. `epoch,lr,train_loss,train_acc,val_loss,val_acc,val_top5,...` for
//! classification and `...,val_mae,val_rmse,...` for regression.

use crate::error::{Result, TrainError};
use crate::record::{check_header, EpochRecord};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

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
        // Rewritten with today's column names (`samples_per_s`, once `images_per_s`).
        let header = match kept.first() {
            Some(first) => first.csv_header(),
            None => existing
                .lines()
                .next()
                .unwrap_or_default()
                .trim_end()
                .replace(",images_per_s,", ",samples_per_s,"),
        };
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
