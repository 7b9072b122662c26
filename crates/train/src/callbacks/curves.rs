//! `CurvesPlot`: `curves.png`, redrawn after every epoch.

use crate::callback::{Callback, Context};
use crate::error::Result;
use crate::plot::plot_curves;
use crate::record::EpochRecord;
use std::path::PathBuf;

/// Redraws the loss curves and the curves of the task's monitored metric (train and val per
/// epoch) into a PNG after every epoch (see [`plot_curves`]).
#[derive(Debug)]
pub struct CurvesPlot {
    path: PathBuf,
}

impl CurvesPlot {
    /// Draws into `path` (usually `<run>/curves.png`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CurvesPlot { path: path.into() }
    }
}

impl Callback for CurvesPlot {
    fn name(&self) -> String {
        "CurvesPlot".into()
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, _record: &EpochRecord) -> Result<()> {
        let metric = ctx.monitor.name.strip_prefix("val_").unwrap_or(&ctx.monitor.name);
        let metric = metric.strip_prefix("train_").unwrap_or(metric);
        super::csv::create_parent(&self.path)?;
        plot_curves(ctx.history, metric, &self.path)
    }
}
