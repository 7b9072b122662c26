//! `cargo xtask setup`: libtorch 2.11.0 in the per-user cache, linked into the workspace.
//!
//! Installing lives in `torchlight-setup` (shared with `torchlight setup` and the
//! `torchlight-setup` command, so all of them fill the same cache); this module links the
//! install into the workspace as `.libtorch`, which `.cargo/config.toml` names in `LIBTORCH`,
//! so torch-sys finds headers and libraries with no environment set by hand. A `LIBTORCH` set
//! by the user is honoured instead, after a version check.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use torchlight_setup::{ensure_libtorch, gpu_present, Origin, SetupOptions, Variant};

/// What `setup` left in place.
pub struct Installed {
    /// Whether the GPU test suite can run here (an NVIDIA GPU and a CUDA-capable install).
    pub gpu_tests: bool,
}

/// Makes libtorch available to the workspace at `root`; a no-op when it already is.
pub fn setup(root: &Path, force_cuda: bool) -> Result<Installed> {
    let mut options = SetupOptions::new("cargo xtask setup");
    options.cuda = force_cuda;
    options.libtorch = user_libtorch(root);
    let libtorch = ensure_libtorch(&options)?;
    let gpu_tests = gpu_present() && libtorch.cuda;
    let variant = match libtorch.origin {
        Origin::User => {
            eprintln!(
                "setup: using your LIBTORCH={} (libtorch {})",
                libtorch.path.display(),
                libtorch.version
            );
            return Ok(Installed { gpu_tests });
        }
        Origin::Cached(v) | Origin::Installed(v) => v,
    };
    let dir = libtorch.path.parent().context("the cached libtorch has a parent folder")?;
    let link = root.join(".libtorch");
    point_link(&link, dir)?;
    eprintln!(
        "setup: libtorch {} ({} install) ready at {}\nsetup: linked from {}",
        libtorch.version,
        variant.name(),
        dir.display(),
        link.display()
    );
    Ok(Installed { gpu_tests: gpu_tests && variant == Variant::Full })
}

/// A `LIBTORCH` from the user's environment, as opposed to the one `.cargo/config.toml` sets
/// (cargo passes that one to `cargo xtask` too).
fn user_libtorch(root: &Path) -> Option<PathBuf> {
    let value = PathBuf::from(std::env::var_os("LIBTORCH")?);
    (value != root.join(".libtorch").join("torch")).then_some(value)
}

/// The per-user cache (see `torchlight_setup::cache_root`).
pub(crate) fn cache_root() -> Result<PathBuf> {
    Ok(torchlight_setup::cache_root()?)
}

/// Fails unless `python3 -m pip` runs.
pub(crate) fn check_python() -> Result<()> {
    Ok(torchlight_setup::check_python("cargo xtask setup")?)
}

/// Fails when `dir`'s file system has less than `needed` bytes free.
pub(crate) fn check_free_space(dir: &Path, needed: u64) -> Result<()> {
    Ok(torchlight_setup::check_free_space(dir, needed)?)
}

/// Points the workspace's `.libtorch` symlink at `target`, replacing a stale link.
pub(crate) fn point_link(link: &Path, target: &Path) -> Result<()> {
    if let Ok(current) = fs::read_link(link) {
        if current == target {
            return Ok(());
        }
        fs::remove_file(link).with_context(|| format!("cannot replace {}", link.display()))?;
    } else if link.exists() {
        bail!("{} exists and is not a symlink; remove it so setup can link libtorch there", link.display());
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("cannot link {} -> {}", link.display(), target.display()))
}
