//! The second pass of `cargo xtask test`: the parity tests whose tolerances depend on the CPU
//! run again with libtorch's kernels at their `default` dispatch level (no AVX2, no AVX-512),
//! so that a tolerance that only this machine's best level meets fails here, not on a
//! machine with other kernels (issue 27: a ViT's loss tolerance that held on AVX-512 failed on
//! an AVX2 CPU).
//!
//! Which tests: every test of optim's binary (its fixtures are committed, made on one CPU,
//! and its optimizer parity bounds were the first to break at `default`), and nn's parity tests
//! that compare two different computations or a committed fixture: the ViTs (attention in
//! another order than PyTorch's), the backbones' layers, the single layers and losses, and
//! the weight files. The convolutional backbones are left out: against a fixture of their own
//! level (`torchlight_testing::KERNEL_ENV` is part of the fixture cache key) they are
//! bit-identical at every level, and they are the slowest tests of the crate. The pass reuses
//! the main run's binaries (the same cargo arguments, `--no-run`), so it builds nothing.

use crate::artifacts::Artifacts;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The variable and value the pass runs under.
pub const LEVEL: (&str, &str) = ("ATEN_CPU_CAPABILITY", "default");

/// (package, its folder, arguments to its `it` binary: test filters, or `--skip` for all but
/// the CUDA tests, which the CPU dispatch level does not touch).
pub const PASSES: &[(&str, &str, &[&str])] = &[
    (
        "torchlight-nn",
        "crates/nn",
        &[
            "backbones::vision_transformers_match_torchvision",
            "backbone_layers::",
            "layers::",
            "losses::",
            "weight_files::",
            // `layers::` also takes `text_layers::` (Embedding, EmbeddingBag, LSTM, GRU).
            "transformer::",
        ],
    ),
    ("torchlight-optim", "crates/optim", &["--skip", "cuda::"]),
    (
        "torchlight-train",
        "crates/train",
        &["ema::fifty_steps_equal_torchvision_and_timm", "mixup::", "skipped_steps::"],
    ),
];

/// Runs [`PASSES`] under [`LEVEL`]. `test_args` are the main run's `cargo test` arguments,
/// which name the binaries it has just built.
pub fn run(root: &Path, cargo: fn() -> Command, test_args: &[String]) -> Result<()> {
    let started = Instant::now();
    let mut cmd = cargo();
    cmd.current_dir(root).args(test_args).args(["--no-run", "--message-format=json-render-diagnostics"]);
    let output =
        cmd.stderr(Stdio::inherit()).output().context("could not start cargo for the dispatch-level pass")?;
    if !output.status.success() {
        bail!("listing the test binaries failed ({})", output.status);
    }
    let artifacts = Artifacts::parse(&String::from_utf8_lossy(&output.stdout));
    let (name, value) = LEVEL;
    for (package, dir, test_args) in PASSES {
        let exe = artifacts
            .test(package)
            .with_context(|| format!("the main run built no `it` test binary of {package}"))?;
        eprintln!("xtask: {package} parity tests again under {name}={value}: {}", test_args.join(" "));
        let status = Command::new(exe)
            .current_dir(root.join(dir))
            .env(name, value)
            .args(test_args.iter())
            .status()
            .with_context(|| format!("could not run {}", exe.display()))?;
        if !status.success() {
            bail!(
                "{package}'s parity tests failed under {name}={value} ({status}): a tolerance holds only \
                 at this CPU's best dispatch level"
            );
        }
    }
    eprintln!("xtask: the {name}={value} pass took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_covers_the_vits_every_optim_test_and_the_loops_parity_tests() {
        let root = crate::workspace_root();
        for (package, dir, _) in PASSES {
            let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
            assert!(manifest.contains(&format!("name = \"{package}\"")), "{dir} holds {package}");
        }
        let nn = PASSES.iter().find(|(p, _, _)| *p == "torchlight-nn").unwrap();
        assert!(nn.2.contains(&"backbones::vision_transformers_match_torchvision"));
        let source = std::fs::read_to_string(root.join("crates/nn/tests/it/backbones.rs")).unwrap();
        assert!(source.contains("fn vision_transformers_match_torchvision()"), "the filter names a test");
        let optim = PASSES.iter().find(|(p, _, _)| *p == "torchlight-optim").unwrap();
        assert_eq!(optim.2, ["--skip", "cuda::"], "every optim test but the CUDA ones");
        // The loop's parity tests (the EMA trajectory, Mixup/CutMix's draws and soft-target
        // loss, the skipped step's optimizer state): each filter names a module or a test.
        let train = PASSES.iter().find(|(p, _, _)| *p == "torchlight-train").unwrap();
        for filter in train.2 {
            let (module, test) = filter.split_once("::").unwrap();
            let source =
                std::fs::read_to_string(root.join(format!("crates/train/tests/it/{module}.rs"))).unwrap();
            assert!(test.is_empty() || source.contains(&format!("fn {test}()")), "{filter} names a test");
        }
    }
}
