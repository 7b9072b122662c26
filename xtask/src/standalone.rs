//! The crates as dependencies, checked by `cargo xtask test` after the workspace's own tests:
//!
//! 1. no libtorch: `torchlight-vision`, `torchlight-text`, `torchlight-data` without `tch` and
//!    `torchlight-base` have no tch/torch-sys in their dependency tree, and build and pass their tests with
//!    `LIBTORCH` pointing nowhere;
//! 2. the facade's features: `torchlight` builds with no features, with each libtorch-free
//!    feature alone, and with `nn` alone (the smallest set that links libtorch). Every other
//!    single feature was built here once, but each libtorch set resolves its build
//!    dependencies' features differently and so rebuilds torch-sys's C++ (minutes each), which
//!    the whole matrix multiplied past the CI budget; the full set is built by the test run.
//! 3. another project: a throwaway crate under the system temp dir, outside this workspace and
//!    its `.cargo/config.toml`, set up with nothing but the documented steps (`torchlight-setup`
//!    in the project, `torchlight-build` in its build script), depending on the crates by
//!    path and version as a published crate would, builds, runs and passes its tests: a
//!    dataset of its own in-memory tensors (`HostTensor`, drawing from the sample's `Rng`)
//!    through a DataLoader into a hand-written training loop (SGD) that must learn;
//! 4. the same project before set-up: with `LIBTORCH` naming no libtorch, the build stops in
//!    one line saying what to run, before torch-sys's C++ build starts;
//! 5. the loop without the recipes: `torchlight-train`, and the facade with its `train` feature
//!    alone, have neither `torchlight-recipes` nor `torchlight-vision` nor `toml` in their
//!    dependency trees (`cargo tree`, nothing built).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The facade's features checked alone (see the module docs for why not all of them).
const FACADE_FEATURES: &[&str] = &["data", "vision", "nn"];

/// Runs the four checks in order, printing what each cost.
pub fn check(root: &Path, target: &Path, cargo: fn() -> Command) -> Result<()> {
    timed("no-libtorch crates", || no_libtorch(root, cargo))?;
    timed("loop without the recipes", || loop_without_recipes(root, cargo))?;
    timed("facade feature matrix", || facade_features(root, cargo))?;
    let project = timed("external project", || external_project(root, target, cargo))?;
    timed("missing-libtorch message", || missing_libtorch(root, &project, cargo))?;
    std::fs::remove_dir_all(&project).with_context(|| format!("cannot remove {}", project.display()))
}

fn timed<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    eprintln!("xtask: checking the {what}");
    let value = f()?;
    eprintln!("xtask: {what}: ok ({:.0} s)", start.elapsed().as_secs_f64());
    Ok(value)
}

fn run(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("could not start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// vision, text, data without `tch` and base: no tch or torch-sys in the tree, and their tests pass
/// with `LIBTORCH` pointing at a folder that does not exist (were torch-sys in the build, its
/// build script would fail there).
fn no_libtorch(root: &Path, cargo: fn() -> Command) -> Result<()> {
    let packages = ["torchlight-base", "torchlight-data", "torchlight-vision", "torchlight-text"];
    for package in packages {
        let mut tree = cargo();
        tree.current_dir(root).args([
            "tree",
            "--quiet",
            "-e",
            "normal,build,dev",
            "--no-default-features",
            "-p",
            package,
        ]);
        let text = run(tree, &format!("cargo tree -p {package}"))?;
        if let Some(line) = text.lines().find(|l| l.contains(" tch v") || l.contains("torch-sys v")) {
            bail!(
                "{package} without default features must not depend on libtorch, but its tree has `{}`",
                line.trim()
            );
        }
    }
    let mut test = cargo();
    test.current_dir(root).args(["test", "--quiet", "--no-default-features"]);
    for package in packages {
        test.args(["-p", package]);
    }
    test.env("LIBTORCH", root.join("target/no-libtorch-here"));
    run(test, "the no-libtorch tests (vision, text, data without tch, base)").map(drop)
}

/// The crates a library loop must not pull in: the recipes, image folders and config files.
const RECIPE_ONLY: &[&str] = &["torchlight-recipes", "torchlight-vision", "toml"];

/// `torchlight-train` and the facade with `train` alone: none of [`RECIPE_ONLY`] in their trees.
fn loop_without_recipes(root: &Path, cargo: fn() -> Command) -> Result<()> {
    let trees: [(&str, &[&str]); 2] = [
        ("torchlight-train", &["-p", "torchlight-train"]),
        (
            "the facade with `train` alone",
            &["-p", "torchlight", "--no-default-features", "--features", "train"],
        ),
    ];
    for (what, args) in trees {
        let mut tree = cargo();
        tree.current_dir(root).args(["tree", "--quiet", "-e", "normal,build", "--prefix", "none"]).args(args);
        let text = run(tree, &format!("cargo tree of {what}"))?;
        for line in text.lines() {
            if let Some(name) = RECIPE_ONLY.iter().find(|n| line.starts_with(&format!("{n} v"))) {
                bail!("{what} must not depend on {name} (a recipe's dependency), but its tree has `{line}`");
            }
        }
    }
    Ok(())
}

/// `cargo build -p torchlight --no-default-features --features F` for each feature, and none.
/// A build rather than a check: `cargo check` would compile metadata for tch and every other
/// dependency anew, while a build reuses the libraries the test run has just built.
fn facade_features(root: &Path, cargo: fn() -> Command) -> Result<()> {
    for features in std::iter::once("").chain(FACADE_FEATURES.iter().copied()) {
        let mut build = cargo();
        build.current_dir(root).args(["build", "--quiet", "-p", "torchlight", "--no-default-features"]);
        if !features.is_empty() {
            build.args(["--features", features]);
        }
        let shown = if features.is_empty() { "no features" } else { features };
        run(build, &format!("the facade with {shown}"))?;
    }
    Ok(())
}

const EXTERNAL_MAIN: &str = r#"//! A user's program: Torchlight as a dependency, a dataset of its own tensors, its own loop.
use torchlight::prelude::*;

/// Points `[N, 4]` and labels `[N]` kept in memory, each point jittered by the sample's own
/// generator. A dataset cannot hold `Tensor`s (they are not `Sync`): it holds `HostTensor`s.
struct Jittered {
    x: HostTensor,
    y: HostTensor,
}

impl Dataset for Jittered {
    type Item = (Tensor, Tensor);

    fn len(&self) -> usize {
        self.x.rows()
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<(Tensor, Tensor), DataError> {
        let jitter = rng.random_range(-0.05..0.05);
        Ok((self.x.row(index)? + jitter, self.y.row(index)?))
    }
}

fn model() -> Sequential {
    Sequential::new().add(Linear::new(4, 8, true)).add(ReLU).add(Linear::new(8, 3, true))
}

/// Three classes, class `c` near the unit vector `e_c` times 2.
fn blobs(n: i64) -> (Tensor, Tensor) {
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(3);
    let x = Tensor::randn([n, 4], (Kind::Float, Device::Cpu)) * 0.1 + y.one_hot(4).to_kind(Kind::Float) * 2.0;
    (x, y)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seed_everything(7);
    let (x, y) = blobs(60);
    let data = Jittered { x: HostTensor::new(&x)?, y: HostTensor::new(&y)? };
    let mut loader = DataLoader::builder(data).batch_size(10).shuffle(true).num_workers(2).seed(7).build()?;
    let model = model();
    let mut optimizer = Sgd::new(vec![ParamGroup::new(named_parameters(&model), SgdConfig::new(0.2))])?;
    let loss_fn = CrossEntropyLoss::new();
    let mut losses = Vec::new();
    for epoch in 0..8 {
        let (mut sum, mut batches) = (0.0, 0);
        for batch in loader.epoch(epoch) {
            let (xb, yb) = batch?; // [10, 4] float32, [10] int64
            optimizer.zero_grad()?;
            let loss = loss_fn.forward(&model.forward_t(&xb, true), &yb)?;
            loss.backward();
            optimizer.step()?;
            sum += loss.double_value(&[]);
            batches += 1;
        }
        losses.push(sum / f64::from(batches));
    }
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    if !(last < first * 0.5) {
        return Err(format!("the loop did not learn: mean loss {first:.4} in epoch 0, {last:.4} in the last").into());
    }
    let logits = {
        let _no_grad = no_grad();
        model.forward_t(&x, false)
    };
    println!("trained ok: logits {:?}, loss {first:.3} -> {last:.3}", logits.size());
    Ok(())
}

#[cfg(test)]
mod tests {
    use torchlight::prelude::*;

    #[test]
    fn the_model_maps_4_features_to_3_logits() {
        let logits = super::model().forward_t(&Tensor::zeros([2, 4], (Kind::Float, Device::Cpu)), false);
        assert_eq!(logits.size(), [2, 3]);
    }

    #[test]
    fn a_sample_is_its_row_jittered_by_its_own_generator() {
        let (x, y) = super::blobs(6);
        let data = super::Jittered { x: HostTensor::new(&x).unwrap(), y: HostTensor::new(&y).unwrap() };
        assert_eq!(data.len(), 6);
        let (a, label) = data.get(4, &mut rng_from_seed(1)).unwrap();
        let (b, _) = data.get(4, &mut rng_from_seed(1)).unwrap();
        assert!(a.equal(&b), "the same seed gives the same sample");
        assert_eq!(label.int64_value(&[]), 1);
        let offset = (&a - x.get(4)).abs().max().double_value(&[]);
        assert!(offset <= 0.05, "jitter {offset}");
    }
}
"#;

/// A throwaway project under the system temp dir (outside this workspace, so none of its
/// `.cargo/config.toml` applies), configured by `torchlight-setup` alone.
///
/// It shares this workspace's target dir, so only the facade and the project itself compile:
/// `torchlight-setup` is given the workspace's `LIBTORCH` (as a user's own `LIBTORCH` would
/// be) and writes that path into the project's config, so torch-sys sees the same value as in
/// the workspace build and is not rebuilt. The project gets the workspace's Cargo.lock, so it
/// resolves the same versions, offline.
fn external_project(root: &Path, target: &Path, cargo: fn() -> Command) -> Result<PathBuf> {
    let project = std::env::temp_dir().join(format!("torchlight-external-{:08x}", path_hash(root)));
    if project.exists() {
        std::fs::remove_dir_all(&project).with_context(|| format!("cannot clear {}", project.display()))?;
    }
    std::fs::create_dir_all(project.join("src"))?;
    let version = "0.1.0";
    let dep = |name: &str, dir: &str| {
        format!("{name} = {{ version = \"{version}\", path = \"{}\"", root.join("crates").join(dir).display())
    };
    let manifest = format!(
        "[package]\nname = \"torchlight-external-check\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\n{}, default-features = false, features = [\"nn\", \"optim\", \"data\"] }}\n\n\
         [build-dependencies]\n{} }}\n\n[workspace]\n",
        dep("torchlight", "torchlight"),
        dep("torchlight-build", "build"),
    );
    std::fs::write(project.join("Cargo.toml"), manifest)?;
    std::fs::write(project.join("build.rs"), "fn main() {\n    torchlight_build::link_libtorch();\n}\n")?;
    std::fs::write(project.join("src/main.rs"), EXTERNAL_MAIN)?;
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock"))?;

    // The documented step: `torchlight-setup` in the project.
    let mut setup = cargo();
    setup
        .current_dir(root)
        .args(["run", "--quiet", "-p", "torchlight-setup", "--", "--project"])
        .arg(&project)
        .env("LIBTORCH", root.join(".libtorch/torch"));
    run(setup, "torchlight-setup in the external project")?;

    for (verb, what) in
        [("run", "cargo run in the external project"), ("test", "cargo test in the external project")]
    {
        let mut cmd = cargo();
        cmd.current_dir(&project)
            .args([verb, "--quiet", "--offline"])
            .env("CARGO_TARGET_DIR", target)
            // Nothing from this workspace's environment: the project's own config must do.
            .env_remove("LIBTORCH")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("CARGO_MANIFEST_DIR");
        let out = run(cmd, what)?;
        if verb == "run" && !out.contains("trained ok: logits [60, 3]") {
            bail!("the external project printed {out:?}, not its trained model's forward pass");
        }
    }
    Ok(project)
}

/// The external project without its config (as before `torchlight-setup`) and with `LIBTORCH`
/// naming no libtorch: the build must fail with torchlight-build's one-line message, and
/// torch-sys's C++ build must not have started. Built in its own, emptied target dir: from
/// scratch, as a new user builds (with torch-sys's build script already compiled from an
/// earlier run the two scripts would start together), and the shared target dir's torch-sys
/// stays intact.
fn missing_libtorch(root: &Path, project: &Path, cargo: fn() -> Command) -> Result<()> {
    std::fs::remove_dir_all(project.join(".cargo"))?;
    let nowhere = root.join("target/no-libtorch-here");
    let scratch = root.join("target/missing-libtorch-check");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch).with_context(|| format!("cannot clear {}", scratch.display()))?;
    }
    let mut build = cargo();
    build
        .current_dir(project)
        .args(["build", "--offline"])
        .env("CARGO_TARGET_DIR", &scratch)
        .env("LIBTORCH", &nowhere);
    let out = build.output().context("could not start cargo build")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!("LIBTORCH={} is not a libtorch folder", nowhere.display());
    let Some(line) = stderr.lines().find(|l| l.contains(&expected)) else {
        bail!("without libtorch the build should stop with torchlight-build's message; it said:\n{stderr}");
    };
    if out.status.success() || !line.contains("torchlight-setup") || stderr.contains("torch.h") {
        bail!("without libtorch the build should stop at the preflight, before torch-sys's C++ build:\n{stderr}");
    }
    std::fs::remove_dir_all(&scratch).with_context(|| format!("cannot remove {}", scratch.display()))
}

/// A stable hash of a path (FNV-1a), so two checkouts get two project folders.
fn path_hash(path: &Path) -> u32 {
    path.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}
