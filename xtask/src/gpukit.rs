//! `cargo xtask gpu-kit [--check | --record REPORT.json]`: the GPU proof kit (issue 21).
//!
//! A GPU machine is lent now and then, for minutes, with python3 and torch but no Rust, and at
//! most 64 MiB carried to it. The kit is everything such a machine needs, built here: the
//! stripped test binaries of the crates with CUDA tests (`cuda-tests` feature), the `torchlight`
//! and `torchlight-bench` binaries, a tiny ImageFolder, `pytorch_gpu_bench.py` and `run.sh`
//! (`xtask/gpukit/run.sh`, which documents the parts of a run), in `target/gpu-kit/`. On the GPU
//! machine `bash target/gpu-kit/run.sh` runs it against that machine's own torch libraries and
//! writes `$OUT/gpu-report.json` and `$OUT/gpu-kit.log`.
//!
//! - `--check` builds the same kit from the debug profile into `target/gpu-kit-check/` and runs
//!   its `run.sh` here: without a GPU each CUDA part reports `skipped: no CUDA` and the rest
//!   runs; the report is then validated (`torchlight-bench gpu validate`). CI runs it.
//! - `--record REPORT.json` writes the GPU section of `docs/benchmarks.md` from a GPU run's
//!   report (`torchlight-bench gpu record`).

use crate::artifacts::Artifacts;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The crates whose integration-test binary has a `cuda` module behind a `cuda-tests` feature.
pub const KIT_CRATES: &[&str] =
    &["torchlight-tensor", "torchlight-data", "torchlight-optim", "torchlight-train"];
/// A kit crate too when gloo's headers can be had (its C++ shim needs them): its `cuda` tests
/// without the `nccl` feature (synchronised BatchNorm on CUDA tensors over 2 Gloo ranks), as
/// NCCL's headers are not at hand where the kit is built.
pub const KIT_DISTRIBUTED: &str = "torchlight-distributed";
/// The binaries the kit carries, with their packages.
const KIT_BINS: &[(&str, &str)] =
    &[("torchlight", "torchlight-cli"), ("torchlight-bench", "torchlight-bench")];
/// The most a GPU machine is sent.
pub const SIZE_LIMIT: u64 = 64 << 20;
/// Images per class of the kit's demo set (`target/` gets 16 train, 8 val, 16 test per class).
const PER_CLASS: &str = "48";

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Build the release kit and print the command that runs it.
    Build,
    /// Build the debug kit and run it here (CI).
    Check,
    /// Record a GPU run's report into `docs/benchmarks.md`.
    Record(PathBuf),
}

impl Mode {
    /// Parses `gpu-kit`'s options (`--cuda` is handled by the caller's setup).
    pub fn parse(args: &[String]) -> Result<Mode> {
        let mut mode = Mode::Build;
        let mut it = args.iter().filter(|a| *a != "--cuda");
        while let Some(arg) = it.next() {
            mode = match (arg.as_str(), &mode) {
                ("--check", Mode::Build) => Mode::Check,
                ("--record", Mode::Build) => {
                    Mode::Record(PathBuf::from(it.next().context("--record needs the report's path")?))
                }
                ("--check" | "--record", _) => bail!("give one of --check and --record"),
                (other, _) => bail!("unknown option `{other}` for `gpu-kit`"),
            };
        }
        Ok(mode)
    }
}

/// Runs `gpu-kit` in `mode`; `target_dir` is cargo's target folder.
pub fn gpu_kit(root: &Path, target_dir: &Path, cargo: impl Fn() -> Command, mode: Mode) -> Result<()> {
    match mode {
        Mode::Record(report) => record(root, target_dir, cargo, &report),
        Mode::Build => {
            let kit = target_dir.join("gpu-kit");
            build(root, &kit, cargo, true)?;
            let rel = kit.strip_prefix(root).unwrap_or(&kit).display().to_string();
            println!("\nThe GPU proof kit is ready: {} ({}).", kit.display(), size_text(&kit)?);
            println!("On a GPU machine, in the repository root, carrying `{rel}`, run:\n");
            println!("    bash {rel}/run.sh\n");
            println!(
                "It writes $OUT/gpu-report.json and $OUT/gpu-kit.log ($OUT defaults to {rel}/out) in \
                 under 6 minutes;\nthen record the figures with `cargo xtask gpu-kit --record gpu-report.json`."
            );
            Ok(())
        }
        Mode::Check => {
            let started = Instant::now();
            let kit = target_dir.join("gpu-kit-check");
            build(root, &kit, cargo, false)?;
            let built = started.elapsed().as_secs_f64();
            let out = kit.join("out");
            let status = Command::new("bash")
                .arg(kit.join("run.sh"))
                .env("OUT", &out)
                .env("TORCHLIGHT_KIT_PYTHON", root.join(".pyref/bin/python"))
                // Only run.sh decides where libtorch comes from, as on the GPU machine.
                .env_remove("LD_LIBRARY_PATH")
                .status()
                .context("could not start bash")?;
            let report = out.join("gpu-report.json");
            let validated = Command::new(kit.join("bin/torchlight-bench"))
                .args(["gpu", "validate", "--report"])
                .arg(&report)
                .status()
                .context("could not run torchlight-bench gpu validate")?;
            if !validated.success() {
                bail!(
                    "the kit's report {} is not valid (see above and {})",
                    report.display(),
                    out.join("gpu-kit.log").display()
                );
            }
            if !status.success() {
                bail!("run.sh reported a failed part ({status}); see {}", out.join("gpu-kit.log").display());
            }
            println!(
                "xtask: GPU kit check passed: built in {built:.0} s, ran and validated in {:.0} s (debug kit: \
                 {:.1} MiB; the {} MiB limit applies to the release kit)",
                started.elapsed().as_secs_f64() - built,
                kit_size(&kit)? as f64 / 1048576.0,
                SIZE_LIMIT >> 20
            );
            Ok(())
        }
    }
}

/// The crates whose CUDA tests the kit carries: [`KIT_CRATES`], and [`KIT_DISTRIBUTED`] when
/// gloo's headers can be had (a kit without it says so).
fn kit_crates(root: &Path) -> Vec<&'static str> {
    let mut crates = KIT_CRATES.to_vec();
    match crate::distributed::gloo_setup(root) {
        Ok(_) => crates.push(KIT_DISTRIBUTED),
        Err(e) => eprintln!(
            "xtask: WARNING: the GPU kit leaves out {KIT_DISTRIBUTED}'s CUDA tests: its C++ shim needs \
             gloo's headers, which could not be had: {e:#}"
        ),
    }
    crates
}

/// The `--features` value turning on every kit crate's CUDA tests.
fn features(crates: &[&str]) -> String {
    crates.iter().map(|c| format!("{c}/cuda-tests")).collect::<Vec<_>>().join(",")
}

/// Builds the kit into `kit` from the release (`release`) or debug profile.
fn build(root: &Path, kit: &Path, cargo: impl Fn() -> Command, release: bool) -> Result<()> {
    let mut cmd = cargo();
    cmd.current_dir(root).args([
        "build",
        "--bins",
        "--test",
        "it",
        "--message-format=json-render-diagnostics",
    ]);
    if release {
        cmd.arg("--release");
    }
    let kit_crates = kit_crates(root);
    for package in kit_crates.iter().chain(KIT_BINS.iter().map(|(_, p)| p)) {
        cmd.args(["-p", package]);
    }
    cmd.args(["--features", &features(&kit_crates)]);
    eprintln!("xtask: building the GPU kit ({}): {cmd:?}", if release { "release" } else { "debug" });
    let output = cmd.stderr(Stdio::inherit()).output().context("could not start cargo")?;
    if !output.status.success() {
        bail!("building the GPU kit failed ({})", output.status);
    }
    let artifacts = Artifacts::parse(&String::from_utf8_lossy(&output.stdout));

    if kit.exists() {
        std::fs::remove_dir_all(kit).with_context(|| format!("{}", kit.display()))?;
    }
    for dir in ["bin", "tests", "data"] {
        std::fs::create_dir_all(kit.join(dir)).with_context(|| format!("{}", kit.join(dir).display()))?;
    }
    let mut binaries = Vec::new();
    for (bin, package) in KIT_BINS {
        let from =
            artifacts.bin(bin).with_context(|| format!("cargo built no `{bin}` binary ({package})"))?;
        binaries.push(strip(from, &kit.join("bin").join(bin))?);
    }
    for package in &kit_crates {
        let from = artifacts
            .test(package)
            .with_context(|| format!("cargo built no `it` test binary of {package}"))?;
        binaries.push(strip(from, &kit.join("tests").join(package))?);
    }
    copy(&root.join("xtask/gpukit/run.sh"), &kit.join("run.sh"))?;
    copy(&root.join("crates/bench/pytorch_gpu_bench.py"), &kit.join("pytorch_gpu_bench.py"))?;
    demo_data(&kit.join("bin/torchlight"), &kit.join("data"))?;
    let manifest = format!(
        "KIT_PROFILE={}\nKIT_COMMIT={}\nKIT_BUILT=\"{}\"\nKIT_GLIBC_REQUIRED={}\nKIT_TESTS=\"{}\"\n",
        if release { "release" } else { "debug" },
        commit(root),
        utc_now()?,
        glibc_required(&binaries)?,
        kit_crates.join(" ")
    );
    std::fs::write(kit.join("kit.env"), manifest)?;
    if release {
        check_size(kit, SIZE_LIMIT)?;
    }
    Ok(())
}

/// An error naming the biggest files when `kit` (without its `out/`) is over `limit` bytes.
fn check_size(kit: &Path, limit: u64) -> Result<u64> {
    let size = kit_size(kit)?;
    if size > limit {
        let out = kit.join("out");
        let biggest: Vec<String> = files_by_size(kit)?
            .iter()
            .filter(|(p, _)| !p.starts_with(&out))
            .take(5)
            .map(|(p, s)| format!("{} ({:.1} MiB)", p.display(), *s as f64 / 1048576.0))
            .collect();
        bail!(
            "the GPU kit is {:.1} MiB, over the {:.0} MiB a GPU machine is sent; biggest files: {}",
            size as f64 / 1048576.0,
            limit as f64 / 1048576.0,
            biggest.join(", ")
        );
    }
    Ok(size)
}

/// `strip --strip-all -o to from`; returns `to`.
fn strip(from: &Path, to: &Path) -> Result<PathBuf> {
    let status = Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(to)
        .arg(from)
        .status()
        .context("could not run `strip` (binutils), which the GPU kit needs to fit its size limit")?;
    if !status.success() {
        bail!("strip {} failed ({status})", from.display());
    }
    Ok(to.to_path_buf())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// `torchlight demo-data`, keeping only its three-class `target/` set.
fn demo_data(torchlight: &Path, data: &Path) -> Result<()> {
    let scratch = data.join("all");
    let status = Command::new(torchlight)
        .args(["demo-data", "--per-class", PER_CLASS, "--out"])
        .arg(&scratch)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("could not run {}", torchlight.display()))?;
    if !status.success() {
        bail!("`torchlight demo-data` failed ({status})");
    }
    std::fs::rename(scratch.join("target"), data.join("target"))?;
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// The short commit of `root`'s checkout, `-dirty` when it has uncommitted changes.
fn commit(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(hash) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    format!("{hash}{}", if dirty { "-dirty" } else { "" })
}

fn utc_now() -> Result<String> {
    let out =
        Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().context("could not run date")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The newest `GLIBC_x.y` symbol version any of `binaries` needs (`objdump -T`).
fn glibc_required(binaries: &[PathBuf]) -> Result<String> {
    let mut newest: Option<Vec<u32>> = None;
    for bin in binaries {
        let out = Command::new("objdump").arg("-T").arg(bin).output().context(
            "could not run `objdump` (binutils), which the GPU kit needs to record the glibc it requires",
        )?;
        if !out.status.success() {
            bail!("objdump -T {} failed", bin.display());
        }
        for version in glibc_versions(&String::from_utf8_lossy(&out.stdout)) {
            if newest.as_ref().is_none_or(|n| &version > n) {
                newest = Some(version);
            }
        }
    }
    let newest = newest.context("the kit's binaries name no GLIBC_ symbol version")?;
    Ok(newest.iter().map(u32::to_string).collect::<Vec<_>>().join("."))
}

/// Every `GLIBC_x.y[.z]` in `objdump -T` output, as numbers.
fn glibc_versions(text: &str) -> Vec<Vec<u32>> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| v.split('.').map(|n| n.parse().ok()).collect::<Option<Vec<u32>>>())
        .collect()
}

/// Every file under `dir` with its size, biggest first.
fn files_by_size(dir: &Path) -> Result<Vec<(PathBuf, u64)>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("{}", d.display()))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files.push((entry.path(), meta.len()));
            }
        }
    }
    files.sort_by_key(|(_, size)| std::cmp::Reverse(*size));
    Ok(files)
}

/// The kit's size without its `out/` folder (what a run writes).
fn kit_size(kit: &Path) -> Result<u64> {
    let out = kit.join("out");
    Ok(files_by_size(kit)?.iter().filter(|(p, _)| !p.starts_with(&out)).map(|(_, s)| s).sum())
}

fn size_text(kit: &Path) -> Result<String> {
    Ok(format!("{:.1} MiB of the {} MiB limit", kit_size(kit)? as f64 / 1048576.0, SIZE_LIMIT >> 20))
}

/// `--record`: the GPU section of `docs/benchmarks.md` from `report`.
fn record(root: &Path, target_dir: &Path, cargo: impl Fn() -> Command, report: &Path) -> Result<()> {
    let status = cargo().current_dir(root).args(["build", "--release", "-p", "torchlight-bench"]).status()?;
    if !status.success() {
        bail!("cargo build -p torchlight-bench failed ({status})");
    }
    let status = Command::new(target_dir.join("release/torchlight-bench"))
        .args(["gpu", "record", "--report"])
        .arg(report)
        .arg("--docs")
        .arg(root.join("docs/benchmarks.md"))
        .status()?;
    if !status.success() {
        bail!("recording {} failed ({status})", report.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_into_one_mode() {
        let args = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(Mode::parse(&args(&[])).unwrap(), Mode::Build);
        assert_eq!(Mode::parse(&args(&["--check", "--cuda"])).unwrap(), Mode::Check);
        assert_eq!(Mode::parse(&args(&["--record", "r.json"])).unwrap(), Mode::Record("r.json".into()));
        assert!(Mode::parse(&args(&["--record"]))
            .unwrap_err()
            .to_string()
            .contains("needs the report's path"));
        assert!(Mode::parse(&args(&["--check", "--record", "r"])).is_err());
        assert!(Mode::parse(&args(&["--quick"]))
            .unwrap_err()
            .to_string()
            .contains("unknown option `--quick`"));
    }

    #[test]
    fn a_kit_over_the_limit_is_an_error_naming_its_biggest_files() {
        let dir = std::env::temp_dir().join(format!("xtask-gpukit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::write(dir.join("bin/big"), vec![0u8; 3000]).unwrap();
        std::fs::write(dir.join("run.sh"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.join("out/gpu-kit.log"), vec![0u8; 9000]).unwrap();
        assert_eq!(check_size(&dir, 4000).unwrap(), 4000, "what a run writes under out/ does not count");
        let err = check_size(&dir, 3999).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("over the 0 MiB a GPU machine is sent"), "{err}");
        assert!(err.contains("bin/big (0.0 MiB)") && !err.contains("gpu-kit.log"), "{err}");
    }

    #[test]
    fn glibc_versions_are_compared_as_numbers() {
        let text = "0000 DF *UND* 0 (GLIBC_2.34) pthread_create\n0000 DF *UND* 0 GLIBC_2.2.5 memcpy\n\
                    0000 DF *UND* 0 (GLIBC_2.9) pipe2\n0000 DF *UND* 0 (GLIBC_PRIVATE) x\n";
        let mut v = glibc_versions(text);
        v.sort();
        assert_eq!(v, vec![vec![2, 2, 5], vec![2, 9], vec![2, 34]]);
    }
}
