//! Progress display: bars with throughput and ETA on a terminal, plain lines otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress goes: bars on stderr when it is a terminal (and not turned off), nothing
/// but the per-epoch lines elsewhere (CI logs, pipes).
#[derive(Debug, Clone)]
pub struct Progress {
    bars: bool,
    quiet: bool,
}

impl Progress {
    /// Bars when stderr is a terminal; epoch lines always.
    pub fn auto() -> Self {
        Progress { bars: std::io::IsTerminal::is_terminal(&std::io::stderr()), quiet: false }
    }

    /// No output at all (tests, library use).
    pub fn quiet() -> Self {
        Progress { bars: false, quiet: true }
    }

    /// A bar over `len` steps labelled `label`, showing images/s-style rate and ETA; hidden when
    /// bars are off.
    pub fn bar(&self, len: u64, label: &str) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {per_sec:>12} ETA {eta:>4} {msg}",
            )
            .expect("a valid progress template")
            .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        bar
    }

    /// A line of output (an epoch's summary), printed above any bar.
    pub fn line(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}
