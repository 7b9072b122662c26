//! Runs the facade's examples after the tests, so an example that no longer compiles, fails
//! or stops learning turns the run red. Each is small (seconds on a loaded 2-core machine).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// The examples and the arguments they run with; `{pth}` is a torchvision ResNet-18
/// `state_dict` written by the reference PyTorch.
const EXAMPLES: &[(&str, &[&str])] = &[
    ("device_info", &[]),
    ("custom_model", &[]),
    ("custom_loop", &[]),
    ("multilabel", &[]),
    ("regression", &[]),
    ("user_callback", &[]),
    ("finetune_pth", &["{pth}"]),
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
    let pth = resnet18_pth(root, target)?;
    for (name, args) in EXAMPLES {
        let exe = target.join("debug/examples").join(name);
        eprintln!("xtask: example {name}");
        let out = Command::new(&exe)
            .args(args.iter().map(|a| if *a == "{pth}" { pth.as_os_str() } else { a.as_ref() }))
            .output()
            .with_context(|| format!("could not run {}", exe.display()))?;
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

/// A randomly initialised torchvision ResNet-18 saved by real `torch.save` (no downloads),
/// made once per target folder.
fn resnet18_pth(root: &Path, target: &Path) -> Result<std::path::PathBuf> {
    let path = target.join("xtask-examples/resnet18.pth");
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(path.parent().expect("has a parent"))?;
    let tmp = path.with_extension("pth.tmp");
    let python = root.join(".pyref/bin/python");
    let status = Command::new(&python)
        .arg("-c")
        .arg(
            "import sys, torch, torchvision; torch.manual_seed(0); \
             torch.save(torchvision.models.resnet18(weights=None).state_dict(), sys.argv[1])",
        )
        .arg(&tmp)
        .status()
        .with_context(|| format!("could not run {}", python.display()))?;
    if !status.success() {
        bail!("the reference PyTorch could not write {} ({status})", tmp.display());
    }
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
