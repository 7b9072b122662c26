//! `CsvLogging`: one `metrics.csv` row per epoch.

use crate::callback::{Callback, Context};
use crate::csv_log::CsvLogger;
use crate::error::Result;
use crate::record::EpochRecord;
use std::path::{Path, PathBuf};

/// Creates the folder `path` goes in, so a run folder need not exist beforehand.
pub(crate) fn create_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| crate::TrainError::io(dir, e)),
        None => Ok(()),
    }
}

/// Appends every epoch's record to a CSV file (see [`CsvLogger`]); on resume, rows after the
/// checkpoint's epoch are dropped so that no epoch is logged twice.
#[derive(Debug)]
pub struct CsvLogging {
    path: PathBuf,
    logger: Option<CsvLogger>,
}

impl CsvLogging {
    /// Logs to `path` (usually `<run>/metrics.csv`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CsvLogging { path: path.into(), logger: None }
    }
}

impl Callback for CsvLogging {
    fn name(&self) -> String {
        "CsvLogging".into()
    }

    fn on_train_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        create_parent(&self.path)?;
        let done = ctx.history.len();
        self.logger = Some(if done > 0 || ctx.position.epoch > 0 {
            CsvLogger::resume(&self.path, done)?
        } else {
            CsvLogger::create(&self.path)?
        });
        Ok(())
    }

    fn on_train_epoch_end(&mut self, _ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        match &mut self.logger {
            Some(logger) => logger.append(record),
            None => Ok(()),
        }
    }
}
