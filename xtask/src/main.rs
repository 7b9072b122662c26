//! `cargo xtask`: project automation (set-up of libtorch, the test run CI uses).

mod artifacts;
mod bench;
mod cache;
#[cfg(test)]
mod claims;
mod demo;
mod dispatch;
mod distributed;
mod evidence;
mod examples;
mod gpukit;
mod libjpeg;
mod libtorch;
mod packaging;
mod pyref;
mod standalone;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup [--cuda] [--distributed]
                          install libtorch 2.11.0 and the reference PyTorch (for parity tests)
                          into the per-user cache, once, and link them into this workspace
                          (and libjpeg-turbo, Debian's libjpeg62-turbo-dev, when the system
                          has no jpeglib.h);
                          --cuda forces the full CUDA libtorch; --distributed also fetches
                          gloo's headers for torchlight-distributed (Debian's libgloo-dev)
                          and, with the CUDA libtorch, CUDA's crt/cccl headers for NCCL
  test [--cuda] [--no-distributed] [ARGS..]
                          check every publishable crate's `cargo package` metadata
                          (description, license, repository, readme, keywords, categories),
                          setup (with --distributed), then run every test of the workspace
                          (unit, integration, doc), the CLI with its `distributed` feature
                          (`train --nproc`); --no-distributed leaves torchlight-distributed
                          and that feature out (so does a machine where gloo's headers cannot be
                          had, loudly);
                          ARGS after `--` go to `cargo test`; then (with no ARGS) the nn and
                          optim parity tests once more under ATEN_CPU_CAPABILITY=default, so a
                          tolerance only this CPU's best kernels meet fails here; then run the
                          examples and check the crates as dependencies: vision and data
                          without libtorch, the facade's features, and a project outside the
                          workspace
  crates                  the metadata check, setup, then only those crates-as-dependencies
                          checks
  train-demo              install libtorch (not the reference PyTorch, which only tests use),
                          then the seed workflow end to end on a synthetic image set:
                          pre-train, fine-tune, evaluate, export, predict (a few minutes)
  bench [--quick] [--only=W1,W2]
                          setup (with --distributed), then Torchlight against PyTorch on each
                          workload, interleaved; writes target/bench/report.json and
                          docs/benchmarks.{md,png} (with --only, just the named workloads and
                          target/bench: docs untouched)
  evidence [--epochs=N] [--seeds=A,B,..] [--image-size=N] [--per-class=N]
                          setup, then the recipes' evidence table (docs/recipes/README.md):
                          docs/recipes/{plain,modern}.toml run by `torchlight train` and by the
                          plain PyTorch script docs/recipes/evidence.py on the demo's generated
                          five-shape set (defaults: 10 epochs, seed 0, 32 px, 240 per class);
                          test accuracy, best epoch, wall time and images/s of each, printed
                          and written to target/evidence/table.md (about 15 minutes on 2 cores)
  fuzz [--cases N] [..]   install libtorch, then mutate the seed corpus through the .pth reader,
                          safetensors loading and image decoding (release build; N cases per
                          target, default 10000; `-- --help` lists the other options); inputs
                          that panicked are kept in target/fuzz
  gpu-kit [--check | --record REPORT.json]
                          setup, then the GPU proof kit in target/gpu-kit (under 64 MiB) and the
                          one command that runs it on a GPU machine; --check builds it from the
                          debug profile and runs it here (CUDA parts skipped without a GPU);
                          --record writes docs/benchmarks.md's GPU section from a run's report
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
    if command == "fuzz" {
        install(needs(&command), false)?;
        return fuzz(&rest);
    }
    if command == "gpu-kit" {
        let mode = gpukit::Mode::parse(&rest).map_err(|e| anyhow::anyhow!("{e}\n\n{USAGE}"))?;
        setup(rest.iter().any(|a| a == "--cuda"))?;
        let root = workspace_root();
        return gpukit::gpu_kit(&root, &target_dir(&root), cargo, mode);
    }
    if command == "evidence" {
        let options = evidence::Options::parse(&rest).map_err(|e| anyhow::anyhow!("{e}\n\n{USAGE}"))?;
        install(needs(&command), false)?;
        let root = workspace_root();
        return evidence::evidence(&root, &target_dir(&root), cargo, options);
    }
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
        "crates" => {
            packaging::check(&workspace_root(), cargo)?;
            setup(cuda)?;
            let root = workspace_root();
            standalone::check(&root, &target_dir(&root), cargo)
        }
        "train-demo" => {
            install(needs(&command), cuda)?;
            let root = workspace_root();
            let target = target_dir(&root);
            demo::train_demo(&root, &target, cargo)
        }
        "bench" => {
            install(needs(&command), cuda)?;
            let root = workspace_root();
            // Without gloo's headers the bench still runs; the all-reduce rows report an error.
            let distributed = match distributed::gloo_setup(&root) {
                Ok(_) => true,
                Err(e) => {
                    eprintln!("xtask: no all-reduce rows: {e:#}");
                    false
                }
            };
            let target = target_dir(&root);
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

/// What a command installs before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Nothing (help, an unknown command).
    Nothing,
    /// libtorch, to build and run Torchlight.
    Libtorch,
    /// libtorch and the reference PyTorch (4.7 GB) that parity tests and the benchmark compare
    /// against.
    LibtorchAndReference,
}

/// The demo only builds and runs Torchlight; tests and the benchmark also run real PyTorch.
fn needs(command: &str) -> Needs {
    match command {
        "train-demo" | "fuzz" => Needs::Libtorch,
        "setup" | "test" | "bench" | "evidence" => Needs::LibtorchAndReference,
        _ => Needs::Nothing,
    }
}

/// Installs what `needs` names; returns the libtorch installed, if any.
fn install(needs: Needs, cuda: bool) -> Result<Option<libtorch::Installed>> {
    let root = workspace_root();
    if needs == Needs::Nothing {
        return Ok(None);
    }
    let installed = libtorch::setup(&root, cuda)?;
    // torchlight-vision's default `libjpeg-turbo` feature builds against it.
    libjpeg::setup(&root);
    if needs == Needs::LibtorchAndReference {
        pyref::setup(&root)?;
    }
    Ok(Some(installed))
}

/// libtorch for building and the reference PyTorch for the parity tests.
fn setup(cuda: bool) -> Result<libtorch::Installed> {
    Ok(install(needs("setup"), cuda)?.expect("setup installs libtorch"))
}

/// `cargo xtask fuzz`: the fuzz runner in release, its options passed through.
fn fuzz(options: &[String]) -> Result<()> {
    let options: Vec<&String> = options.iter().filter(|a| *a != "--").collect();
    let mut cmd = cargo();
    cmd.current_dir(workspace_root())
        .args(["run", "--release", "--quiet", "-p", "torchlight-fuzz", "--"])
        .args(options);
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().context("could not start cargo")?;
    if !status.success() {
        bail!("the fuzz run found panics or failed ({status})");
    }
    Ok(())
}

fn test(cuda: bool, distributed: bool, passthrough: &[String]) -> Result<()> {
    let root = workspace_root();
    packaging::check(&root, cargo)?;
    let installed = setup(cuda)?;
    let mut args: Vec<String> = vec!["test".into(), "--workspace".into()];
    // Without gloo's headers (no apt-get, no libgloo-dev) the rest of the workspace is still
    // tested, and the run says loudly what it left out.
    let distributed = distributed
        && match distributed::gloo_setup(&root) {
            Ok(_) => true,
            Err(e) => {
                eprintln!(
                    "xtask: WARNING: torchlight-distributed is NOT tested in this run: its C++ shim \
                     needs gloo's headers, which could not be had: {e:#}"
                );
                false
            }
        };
    if distributed {
        // `torchlight train --nproc 2` is tested too.
        args.extend(["--features".into(), "torchlight-cli/distributed".into()]);
    } else {
        eprintln!(
            "xtask: leaving torchlight-distributed (and the `distributed` features of the facade and \
             the CLI) out of this run"
        );
        args.extend(["--exclude".into(), "torchlight-distributed".into()]);
    }
    if installed.gpu_tests {
        eprintln!("xtask: NVIDIA GPU and CUDA libtorch present: enabling the `cuda-tests` feature");
        let mut features = CUDA_TEST_FEATURES.to_string();
        if distributed {
            // Synchronised BatchNorm on CUDA tensors, and NCCL; NCCL's build needs CUDA's crt and
            // cccl headers besides the install's own.
            distributed::cuda_headers(&root)?;
            features.push_str(",torchlight-distributed/cuda-tests,torchlight-distributed/nccl");
        }
        args.extend(["--features".into(), features]);
    }
    let mut cmd = cargo();
    cmd.current_dir(&root).args(&args).args(passthrough);
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().context("could not start cargo")?;
    if !status.success() {
        bail!("tests failed ({status})");
    }
    // The CPU-dependent parity tests once more at libtorch's lowest dispatch level.
    if passthrough.is_empty() {
        dispatch::run(&root, cargo, &args)?;
    } else {
        eprintln!(
            "xtask: arguments were passed to cargo test: skipping the {}={} pass of the parity tests",
            dispatch::LEVEL.0,
            dispatch::LEVEL.1
        );
    }
    // `cargo test --workspace` with nothing passed through has just built every example.
    examples::run(&root, &target_dir(&root), cargo, passthrough.is_empty())?;
    standalone::check(&root, &target_dir(&root), cargo)
}

/// Where cargo builds: `$CARGO_TARGET_DIR`, else `<root>/target`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_installs_libtorch_alone_and_tests_the_reference_too() {
        assert_eq!(needs("train-demo"), Needs::Libtorch, "the demo never runs Python");
        assert_eq!(needs("fuzz"), Needs::Libtorch);
        assert_eq!(needs("test"), Needs::LibtorchAndReference);
        assert_eq!(needs("bench"), Needs::LibtorchAndReference);
        assert_eq!(needs("setup"), Needs::LibtorchAndReference);
        assert_eq!(needs("help"), Needs::Nothing);
    }
}
