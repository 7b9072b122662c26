//! `EarlyStopping`: stop when the monitored metric has not improved for some epochs.

use crate::callback::{Callback, Context};
use crate::error::{Result, TrainError};
use crate::record::EpochRecord;
use crate::task::Monitor;
use serde_json::json;

/// Stops training when the monitored metric (the task's unless set) has not improved for
/// `patience` epochs, like Lightning's `EarlyStopping(patience=...)`. Its counter is saved in
/// checkpoints, so a resumed run keeps counting.
#[derive(Debug)]
pub struct EarlyStopping {
    monitor: Option<Monitor>,
    patience: usize,
    best: Option<f64>,
    stale: usize,
}

impl EarlyStopping {
    /// Stops after `patience` epochs without improvement.
    pub fn new(patience: usize) -> Self {
        EarlyStopping { monitor: None, patience: patience.max(1), best: None, stale: 0 }
    }

    /// Watches `monitor` instead of the task's.
    pub fn monitor(mut self, monitor: Monitor) -> Self {
        self.monitor = Some(monitor);
        self
    }
}

impl Callback for EarlyStopping {
    fn name(&self) -> String {
        "EarlyStopping".into()
    }

    fn on_train_epoch_end(&mut self, ctx: &mut Context<'_>, record: &EpochRecord) -> Result<()> {
        let monitor = self.monitor.as_ref().unwrap_or(ctx.monitor);
        let value = record.monitored(&monitor.name).unwrap_or(f64::NAN);
        if monitor.mode.improves(value, self.best) {
            self.best = Some(value);
            self.stale = 0;
        } else {
            self.stale += 1;
        }
        if self.stale >= self.patience {
            let reason = format!("early stopping: no better {} for {} epochs", monitor.name, self.stale);
            ctx.request_stop(reason);
        }
        Ok(())
    }

    fn state_dict(&self) -> serde_json::Value {
        json!({ "best": self.best, "stale": self.stale })
    }

    fn load_state_dict(&mut self, state: &serde_json::Value) -> Result<()> {
        let bad = || TrainError::State {
            what: "EarlyStopping".into(),
            reason: format!("unexpected state {state}"),
        };
        self.best = match state.get("best") {
            Some(serde_json::Value::Null) | None => None,
            Some(v) => Some(v.as_f64().ok_or_else(bad)?),
        };
        self.stale = state.get("stale").and_then(|s| s.as_u64()).ok_or_else(bad)? as usize;
        Ok(())
    }
}
