//! `cargo xtask`: project automation (set-up of libtorch, the test run CI uses).

mod bench;
mod demo;
mod distributed;
mod libtorch;
mod pyref;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup [--cuda] [--distributed]
                          install libtorch 2.11.0 and the reference PyTorch (for parity tests)
                          into the per-user cache, once, and link them into this workspace;
                          --cuda forces the full CUDA libtorch; --distributed also fetches
                          gloo's headers for torchlight-distributed (Debian's libgloo-dev)
                          and, with the CUDA libtorch, CUDA's crt/cccl headers for NCCL
  test [--cuda] [--no-distributed] [ARGS..]
                          setup (with --distributed), then run every test of the workspace
                          (unit, integration, doc); --no-distributed leaves torchlight-distributed
                          out where gloo's headers cannot be had; ARGS after `--` go to `cargo test`
  train-demo              setup, then the seed workflow end to end on a synthetic image set:
                          pre-train, fine-tune, evaluate, export, predict (a few minutes)
  bench [--quick] [--only=NAME,..]
                          setup (with --distributed), then Torchlight against PyTorch on each
                          workload (or only those named, leaving docs/ alone), interleaved;
                          writes target/bench/report.json and docs/benchmarks.{md,png}
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
    let allowed: &[&str] = match command.as_str() {
        "setup" => &["--cuda", "--distributed"],
        "test" => &["--cuda", "--no-distributed"],
        "bench" => &["--cuda", "--quick"],
        _ => &["--cuda"],
    };
    let only: Option<Vec<String>> = flags
        .iter()
        .find_map(|f| f.strip_prefix("--only="))
        .filter(|_| command == "bench")
        .map(|list| list.split(',').map(str::to_string).collect());
    if let Some(unknown) =
        flags.iter().find(|f| !(allowed.contains(&f.as_str()) || only.is_some() && f.starts_with("--only=")))
    {
        bail!("unknown option `{unknown}` for `{command}`\n\n{USAGE}");
    }
    let quick = flags.iter().any(|f| f == "--quick");
    match command.as_str() {
        "setup" => {
            let installed = setup(cuda)?;
            if flags.iter().any(|f| f == "--distributed") {
                distributed::gloo_setup(&workspace_root())?;
                if installed.gpu_tests {
                    distributed::cuda_headers(&workspace_root())?;
                }
            }
            Ok(())
        }
        "test" => test(cuda, !flags.iter().any(|f| f == "--no-distributed"), passthrough),
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
            // Without gloo's headers the bench still runs; the all-reduce rows report an error.
            let distributed = match distributed::gloo_setup(&root) {
                Ok(_) => true,
                Err(e) => {
                    eprintln!("xtask: no all-reduce rows: {e:#}");
                    false
                }
            };
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            bench::bench(&root, &target, cargo, bench::Options { quick, distributed, only })
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

fn test(cuda: bool, distributed: bool, passthrough: &[String]) -> Result<()> {
    let root = workspace_root();
    let installed = setup(cuda)?;
    let mut cmd = cargo();
    cmd.current_dir(&root).args(["test", "--workspace"]);
    if distributed {
        distributed::gloo_setup(&root).context(
            "torchlight-distributed cannot be built here; `cargo xtask test --no-distributed` tests \
             the rest of the workspace",
        )?;
    } else {
        eprintln!(
            "xtask: --no-distributed: leaving torchlight-distributed (and the facade's `distributed` \
             feature) out of this run"
        );
        cmd.args(["--exclude", "torchlight-distributed"]);
    }
    if installed.gpu_tests {
        eprintln!("xtask: NVIDIA GPU and CUDA libtorch present: enabling the `cuda-tests` feature");
        let mut features = CUDA_TEST_FEATURES.to_string();
        if distributed {
            // NCCL with one rank; its build needs CUDA's crt and cccl headers besides the
            // install's own.
            distributed::cuda_headers(&root)?;
            features.push_str(",torchlight-distributed/cuda-tests");
        }
        cmd.args(["--features", &features]);
    }
    cmd.args(passthrough);
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().context("could not start cargo")?;
    if !status.success() {
        bail!("tests failed ({status})");
    }
    Ok(())
}
