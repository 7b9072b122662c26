//! The reference PyTorch: a Python virtual environment with torch 2.11.0, torchvision 0.26.0
//! and timm 1.0.31, which parity tests use to generate fixtures too large to commit.
//!
//! Like libtorch, it is installed once per user into the cache (about 4.7 GB: `import torch`
//! needs torch's full dependency set, CUDA libraries included) and linked into the workspace
//! as `.pyref`, where `torchlight-testing` finds it.

use crate::libtorch::{cache_root, check_free_space, check_python, point_link};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;
use std::process::Command;

/// What the reference environment holds. Changing this list makes setup top the env up.
const PACKAGES: &[&str] = &[
    "torch==2.11.0",
    "torchvision==0.26.0",
    "safetensors==0.8.0",
    "numpy==2.4.6",
    "pillow==13.0.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
    "tensorboard==2.21.0",
    // The bench's Hugging Face text pipeline row and the tokenizer parity check (the version
    // of the Rust `tokenizers` crate torchlight-text builds).
    "tokenizers==0.23.2",
    // The timm fixture scripts (Hub folders, key layouts, layer decay, eval transform sizes);
    // its other dependencies (pyyaml, huggingface_hub) come with tokenizers and torchvision.
    "timm==1.0.31",
    // Only for regenerating the vision fixtures (real photographs bundled with scikit-image).
    "scikit-image==0.26.0",
];
const BYTES_NEEDED: u64 = 8 << 30;
const MARKER: &str = ".torchlight-complete";

/// Makes sure the reference environment exists with [`PACKAGES`] and links it as `.pyref`.
pub fn setup(root: &Path) -> Result<()> {
    let dir = cache_root()?.join("pyref-2.11.0");
    let wanted = PACKAGES.join("\n") + "\n";
    let python = dir.join("bin/python");
    if fs::read_to_string(dir.join(MARKER)).ok().as_deref() != Some(wanted.as_str()) {
        check_python()?;
        fs::create_dir_all(dir.parent().context("cache has a parent")?)?;
        if !python.exists() {
            check_free_space(dir.parent().expect("checked above"), BYTES_NEEDED)?;
            eprintln!(
                "setup: creating the reference PyTorch environment (torch + torchvision with their \
                 dependencies, about 4.7 GB, once per machine) at {}",
                dir.display()
            );
            let status = Command::new("python3").arg("-m").arg("venv").arg(&dir).status()?;
            if !status.success() {
                bail!(
                    "`python3 -m venv {}` failed ({status}); install the venv module \
                     (Debian/Ubuntu: `apt-get install python3-venv`) and run `cargo xtask setup` again",
                    dir.display()
                );
            }
        } else {
            eprintln!("setup: updating the reference PyTorch environment at {}", dir.display());
        }
        let status = Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "on"])
            .args(PACKAGES)
            .status()
            .with_context(|| format!("could not run {}", python.display()))?;
        if !status.success() {
            bail!(
                "pip could not install {} into {} ({status}); see its output above, then run \
                 `cargo xtask setup` again",
                PACKAGES.join(" "),
                dir.display()
            );
        }
        fs::write(dir.join(MARKER), &wanted)?;
    }
    point_link(&root.join(".pyref"), &dir)?;
    eprintln!("setup: reference PyTorch ready at {}", dir.display());
    Ok(())
}
