//! `cargo xtask`: project automation (set-up of libtorch, the test run CI uses).

mod bench;
mod demo;
mod libtorch;
mod pyref;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup [--cuda]          install libtorch 2.11.0 and the reference PyTorch (for parity tests)
                          into the per-user cache, once, and link them into this workspace;
                          --cuda forces the full CUDA libtorch
  test [--cuda] [ARGS..]  setup, then run every test of the workspace (unit, integration, doc);
                          ARGS after `--` go to `cargo test`
  train-demo              setup, then the seed workflow end to end on a synthetic image set:
                          pre-train, fine-tune, evaluate, export, predict (a few minutes)
  bench [--quick] [--only=W1,W2]
                          setup, then Torchlight against PyTorch on each workload, interleaved;
                          writes target/bench/report.json and docs/benchmarks.{md,png} (with
                          --only, just the named workloads and target/bench: docs untouched)
";

fn main() {
    if let Err(err) = run() {
        eprintln!("xtask: error: {err:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(command) = args.next() else {
        print!("{USAGE}");
        bail!("no command given");
    };
    let rest: Vec<String> = args.collect();
    let (flags, passthrough) = split_passthrough(&rest);
    let cuda = flags.iter().any(|f| f == "--cuda");
    let quick = flags.iter().any(|f| f == "--quick") && command == "bench";
    let only: Option<Vec<String>> = flags
        .iter()
        .find_map(|f| f.strip_prefix("--only="))
        .filter(|_| command == "bench")
        .map(|list| list.split(',').map(str::to_string).collect());
    let known = |f: &String| {
        *f == "--cuda" || (quick && *f == "--quick") || (only.is_some() && f.starts_with("--only="))
    };
    if let Some(unknown) = flags.iter().find(|f| !known(f)) {
        bail!("unknown option `{unknown}` for `{command}`\n\n{USAGE}");
    }
    match command.as_str() {
        "setup" => setup(cuda).map(|_| ()),
        "test" => test(cuda, passthrough),
        "train-demo" => {
            setup(cuda)?;
            let root = workspace_root();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            demo::train_demo(&root, &target, cargo)
        }
        "bench" => {
            setup(cuda)?;
            let root = workspace_root();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            bench::bench(&root, &target, cargo, quick, only.as_deref())
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}

/// Splits `a b -- c d` into (`[a, b]`, `[c, d]`).
fn split_passthrough(args: &[String]) -> (&[String], &[String]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

/// The workspace root: xtask lives in `<root>/xtask`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits one level below the workspace root")
        .to_path_buf()
}

/// Every crate's GPU test feature, for machines with an NVIDIA GPU and the full install.
const CUDA_TEST_FEATURES: &str =
    "torchlight-tensor/cuda-tests,torchlight-data/cuda-tests,torchlight-optim/cuda-tests";

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// libtorch for building and the reference PyTorch for the parity tests.
fn setup(cuda: bool) -> Result<libtorch::Installed> {
    let root = workspace_root();
    let installed = libtorch::setup(&root, cuda)?;
    pyref::setup(&root)?;
    Ok(installed)
}

fn test(cuda: bool, passthrough: &[String]) -> Result<()> {
    let root = workspace_root();
    let installed = setup(cuda)?;
    let mut cmd = cargo();
    cmd.current_dir(&root).args(["test", "--workspace"]);
    if installed.gpu_tests {
        eprintln!("xtask: NVIDIA GPU and CUDA libtorch present: enabling the `cuda-tests` feature");
        cmd.args(["--features", CUDA_TEST_FEATURES]);
    }
    cmd.args(passthrough);
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().context("could not start cargo")?;
    if !status.success() {
        bail!("tests failed ({status})");
    }
    Ok(())
}
