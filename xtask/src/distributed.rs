//! `cargo xtask setup --distributed`: the C++ headers `torchlight-distributed` needs beyond
//! libtorch's: gloo's always, and for its `nccl` feature on GPU machines CUDA's crt and cccl.
//!
//! libtorch ships c10d's headers but not gloo's, which `ProcessGroupGloo.hpp` includes. Debian
//! packages them as `libgloo-dev`; this step fetches that package with `apt-get download` (no
//! root needed, nothing installed system-wide), unpacks it with `dpkg-deb -x` into the per-user
//! cache beside libtorch, and links it into the workspace as `.gloo`, where
//! `.cargo/config.toml` points `TORCHLIGHT_GLOO_INCLUDE`. Headers found in `/usr/include` (an
//! `apt-get install libgloo-dev`) or in a `TORCHLIGHT_GLOO_INCLUDE` of the user's own are used
//! as they are. Only headers are used: nothing of gloo is linked (libtorch has its own gloo).

use crate::cache::{install_into, unpack_deb, MARKER};
use crate::libtorch::{cache_root, point_link};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian package holding gloo's headers.
const PACKAGE: &str = "libgloo-dev";
/// The include folder inside the unpacked package, as `.cargo/config.toml` expects it.
const INCLUDE_IN_PACKAGE: &str = "usr/include";
/// What `.cargo/config.toml` sets `TORCHLIGHT_GLOO_INCLUDE` to, relative to the workspace.
const CONFIGURED: &str = ".gloo/usr/include";

/// Makes gloo's headers available to `torchlight-distributed`'s build script; returns the
/// include folder (the one holding `gloo/config.h`).
pub fn gloo_setup(root: &Path) -> Result<PathBuf> {
    if let Some(dir) = user_include(root) {
        if !dir.join("gloo/config.h").is_file() {
            bail!(
                "TORCHLIGHT_GLOO_INCLUDE={} holds no gloo/config.h; point it at the folder that holds \
                 gloo/, or unset it to let setup fetch {PACKAGE}",
                dir.display()
            );
        }
        eprintln!("setup: using your TORCHLIGHT_GLOO_INCLUDE={}", dir.display());
        return Ok(dir);
    }
    let system = Path::new("/usr/include");
    if system.join("gloo/config.h").is_file() {
        eprintln!("setup: gloo headers found in {} ({PACKAGE} installed)", system.display());
        return Ok(system.to_path_buf());
    }
    let dir = cache_root()?.join("gloo-headers");
    if !dir.join(MARKER).is_file() {
        fetch(&dir)?;
    }
    point_link(&root.join(".gloo"), &dir)?;
    let version = fs::read_to_string(dir.join(MARKER)).unwrap_or_default();
    eprintln!("setup: gloo headers ({}) ready at {}", version.trim(), dir.display());
    Ok(dir.join(INCLUDE_IN_PACKAGE))
}

/// A `TORCHLIGHT_GLOO_INCLUDE` from the user's environment, as opposed to the one
/// `.cargo/config.toml` sets.
fn user_include(root: &Path) -> Option<PathBuf> {
    let value = PathBuf::from(std::env::var_os("TORCHLIGHT_GLOO_INCLUDE")?);
    (value != root.join(CONFIGURED)).then_some(value)
}

fn fetch(dir: &Path) -> Result<()> {
    install_into(dir, |partial, download| {
        eprintln!("setup: fetching gloo's headers (Debian's {PACKAGE}, about 50 kB) with `apt-get download`");
        let fetched = Command::new("apt-get").arg("download").arg(PACKAGE).current_dir(download).status();
        match fetched {
            Ok(status) if status.success() => {}
            Ok(status) => bail!(
                "`apt-get download {PACKAGE}` failed ({status}); see its output above. If apt's package \
                 lists are stale, run `apt-get update` (as root) first. Alternatives: `apt-get install \
                 {PACKAGE}`, or set TORCHLIGHT_GLOO_INCLUDE to a folder holding gloo/config.h (from any \
                 recent pytorch/gloo checkout). Without them the rest of the workspace still builds: \
                 only torchlight-distributed needs them"
            ),
            Err(e) => bail!(
                "cannot run apt-get ({e}): torchlight-distributed needs gloo's C++ headers, which this \
                 step fetches from Debian's {PACKAGE}. On a system without apt, set \
                 TORCHLIGHT_GLOO_INCLUDE to a folder holding gloo/config.h (from any recent \
                 pytorch/gloo checkout). Without them the rest of the workspace still builds: only \
                 torchlight-distributed needs them"
            ),
        }
        let deb = fs::read_dir(download)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .with_context(|| format!("apt-get download left no .deb in {}", download.display()))?;
        unpack_deb(&deb, partial)?;
        if !partial.join(INCLUDE_IN_PACKAGE).join("gloo/config.h").is_file() {
            bail!("{} holds no {INCLUDE_IN_PACKAGE}/gloo/config.h", deb.display());
        }
        Ok(format!("{}\n", deb.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()))
    })
}

/// The CUDA header wheels `ProcessGroupNCCL.hpp` needs beyond those the full libtorch install
/// brings (NCCL's, cudart's, cuBLAS's...): CUDA 13.0's `crt/` and `cccl`, as torch 2.11's CUDA
/// 13.0 build. Headers only.
const CUDA_HEADER_WHEELS: &[&str] = &["nvidia-cuda-crt==13.0.88", "nvidia-cuda-cccl==13.0.85"];

/// Fetches [`CUDA_HEADER_WHEELS`] into the per-user cache (once) and links them into the
/// workspace as `.cuda-headers`, where `.cargo/config.toml` points `TORCHLIGHT_CUDA_INCLUDE`
/// for the `nccl` feature's build.
pub fn cuda_headers(root: &Path) -> Result<()> {
    let dir = cache_root()?.join("cuda-headers-13.0");
    let wanted = CUDA_HEADER_WHEELS.join("\n") + "\n";
    if fs::read_to_string(dir.join(MARKER)).ok().as_deref() != Some(wanted.as_str()) {
        fetch_cuda_headers(&dir, &wanted)?;
    }
    point_link(&root.join(".cuda-headers"), &dir)?;
    eprintln!("setup: CUDA crt and cccl headers (for the NCCL backend) ready at {}", dir.display());
    Ok(())
}

fn fetch_cuda_headers(dir: &Path, wanted: &str) -> Result<()> {
    install_into(dir, |partial, download| {
        eprintln!(
            "setup: fetching CUDA 13.0's crt and cccl headers for the NCCL backend ({})",
            CUDA_HEADER_WHEELS.join(", ")
        );
        let status = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--dest"])
            .arg(download)
            .args(CUDA_HEADER_WHEELS)
            .status()
            .context("cannot run python3 -m pip")?;
        if !status.success() {
            bail!("pip could not download {} ({status}); see its output above", CUDA_HEADER_WHEELS.join(" "));
        }
        for wheel in fs::read_dir(download)?.flatten().map(|e| e.path()) {
            // A wheel is a zip; Python's zipfile unpacks it without any other tool.
            let status = Command::new("python3")
                .args(["-m", "zipfile", "-e"])
                .arg(&wheel)
                .arg(partial)
                .status()
                .context("cannot run python3 -m zipfile")?;
            if !status.success() {
                bail!("cannot unpack {} ({status})", wheel.display());
            }
        }
        if !partial.join("nvidia/cu13/include/crt/host_config.h").is_file() {
            bail!(
                "the wheels {} hold no nvidia/cu13/include/crt/host_config.h",
                CUDA_HEADER_WHEELS.join(", ")
            );
        }
        Ok(wanted.to_string())
    })
}
