//! Graceful stop on SIGINT/SIGTERM: the first signal raises a flag the loop checks after each
//! optimizer step; a second SIGINT ends the process at once (exit code 130), as a user
//! pressing Ctrl-C twice expects.

use crate::error::{Result, TrainError};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::SigId;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Handlers installed for the duration of a `fit`; dropping it restores the previous ones.
pub(crate) struct SignalGuard {
    received: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

impl SignalGuard {
    pub(crate) fn install() -> Result<Self> {
        let received = Arc::new(AtomicUsize::new(0));
        let armed = Arc::new(AtomicBool::new(false));
        let mut ids = Vec::new();
        let fail = |e: std::io::Error| TrainError::Io { path: "signal handlers".into(), source: e };
        // Registration order is run order: the shutdown check sees `armed` before it is set,
        // so only a second SIGINT exits.
        ids.push(
            signal_hook::flag::register_conditional_shutdown(SIGINT, 130, Arc::clone(&armed))
                .map_err(fail)?,
        );
        for signal in [SIGINT, SIGTERM] {
            ids.push(signal_hook::flag::register(signal, Arc::clone(&armed)).map_err(fail)?);
            ids.push(
                signal_hook::flag::register_usize(signal, Arc::clone(&received), signal as usize)
                    .map_err(fail)?,
            );
        }
        Ok(SignalGuard { received, ids })
    }

    /// The signal received so far, by name.
    pub(crate) fn received(&self) -> Option<&'static str> {
        match self.received.load(Ordering::Relaxed) {
            0 => None,
            s if s == SIGTERM as usize => Some("SIGTERM"),
            _ => Some("SIGINT"),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
