//! Runs the facade's examples after the tests, so an example that no longer compiles, fails
//! or stops learning turns the run red. Each is small (seconds on a loaded 2-core machine).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// The examples, each run as a user first runs it: with no arguments (`finetune_pth` then
/// writes its own ResNet-18 `.pth`).
const EXAMPLES: &[&str] = &[
    "device_info",
    "custom_model",
    "custom_loop",
    "multilabel",
    "regression",
    "user_callback",
    "finetune_pth",
    "text_classification",
];

/// Runs every example; `built` says the test run just built them (a plain `cargo test
/// --workspace` builds every example and links it as `target/debug/examples/NAME`), otherwise
/// they are built first (a separate feature resolution: slower).
pub fn run(root: &Path, target: &Path, cargo: fn() -> Command, built: bool) -> Result<()> {
    if !built {
        let status = cargo()
            .current_dir(root)
            .args(["build", "-p", "torchlight", "--examples"])
            .status()
            .context("could not start cargo")?;
        if !status.success() {
            bail!("building the examples failed ({status})");
        }
    }
    for name in EXAMPLES {
        let exe = target.join("debug/examples").join(name);
        eprintln!("xtask: example {name}");
        let out = Command::new(&exe).output().with_context(|| format!("could not run {}", exe.display()))?;
        if !out.status.success() {
            bail!(
                "example {name} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        if let Some(last) = stdout.lines().last() {
            eprintln!("    {last}");
        }
    }
    Ok(())
}
