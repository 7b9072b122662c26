//! `cargo xtask setup`: libjpeg-turbo's headers and library for torchlight-vision's default
//! `libjpeg-turbo` feature, when the system has none.
//!
//! Headers found where vision's build script looks (`/usr/include`, `/usr/local/include`,
//! Homebrew's jpeg-turbo) or a `TORCHLIGHT_LIBJPEG_DIR` of the user's own are used as they are.
//! Otherwise this step fetches Debian's `libjpeg62-turbo-dev` and `libjpeg62-turbo` (Ubuntu's
//! `libjpeg-turbo8-dev` and `libjpeg-turbo8` where those names are unknown) with `apt-get
//! download` (no root needed, nothing installed system-wide), unpacks them with `dpkg-deb -x`
//! into the per-user cache beside libtorch, and links the tree into the workspace as
//! `.libjpeg`, where `.cargo/config.toml` points `TORCHLIGHT_LIBJPEG_DIR`. Vision links the
//! package's static `libjpeg.a`, so nothing is needed at run time.

use crate::cache::{install_into, unpack_deb, MARKER};
use crate::libtorch::{cache_root, point_link};
use anyhow::{bail, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's package pair, then Ubuntu's.
const PACKAGES: &[[&str; 2]] =
    &[["libjpeg62-turbo-dev", "libjpeg62-turbo"], ["libjpeg-turbo8-dev", "libjpeg-turbo8"]];
/// What `.cargo/config.toml` sets `TORCHLIGHT_LIBJPEG_DIR` to, relative to the workspace.
const CONFIGURED: &str = ".libjpeg";
/// Where vision's build script looks for `jpeglib.h` after `TORCHLIGHT_LIBJPEG_DIR`.
const SYSTEM_INCLUDES: &[&str] = &[
    "/usr/include",
    "/usr/local/include",
    "/opt/homebrew/opt/jpeg-turbo/include",
    "/usr/local/opt/jpeg-turbo/include",
];

/// Makes libjpeg-turbo available to torchlight-vision's build script. Never fails: when it
/// cannot be had, it says so, and vision's build stops with the ways to get it.
pub fn setup(root: &Path) {
    if let Err(e) = try_setup(root) {
        eprintln!(
            "xtask: WARNING: no libjpeg-turbo for torchlight-vision's default `libjpeg-turbo` feature: {e:#}"
        );
    }
}

fn try_setup(root: &Path) -> Result<()> {
    if let Some(dir) = user_dir(root) {
        eprintln!("setup: using your TORCHLIGHT_LIBJPEG_DIR={}", dir.display());
        return Ok(());
    }
    if let Some(system) = SYSTEM_INCLUDES.iter().map(Path::new).find(|d| d.join("jpeglib.h").is_file()) {
        eprintln!("setup: libjpeg-turbo headers found in {}", system.display());
        return Ok(());
    }
    let dir = cache_root()?.join("libjpeg-turbo");
    if !dir.join(MARKER).is_file() {
        fetch(&dir)?;
    }
    point_link(&root.join(CONFIGURED), &dir)?;
    let version = fs::read_to_string(dir.join(MARKER)).unwrap_or_default();
    eprintln!("setup: libjpeg-turbo ({}) ready at {}", version.trim().replace('\n', ", "), dir.display());
    Ok(())
}

/// A `TORCHLIGHT_LIBJPEG_DIR` from the user's environment, as opposed to the one
/// `.cargo/config.toml` sets.
fn user_dir(root: &Path) -> Option<PathBuf> {
    let value = PathBuf::from(std::env::var_os("TORCHLIGHT_LIBJPEG_DIR")?);
    (value != root.join(CONFIGURED)).then_some(value)
}

fn fetch(dir: &Path) -> Result<()> {
    install_into(dir, |partial, download| {
        let mut tried = Vec::new();
        let mut fetched = false;
        for pair in PACKAGES {
            eprintln!(
                "setup: fetching libjpeg-turbo ({}, about 500 kB) with `apt-get download`",
                pair.join(" + ")
            );
            let status = Command::new("apt-get").arg("download").args(pair).current_dir(download).status();
            match status {
                Ok(status) if status.success() => {
                    fetched = true;
                    break;
                }
                Ok(status) => tried.push(format!("`apt-get download {}` failed ({status})", pair.join(" "))),
                Err(e) => bail!(
                    "cannot run apt-get ({e}); install libjpeg-turbo's headers (macOS: `brew install \
                     jpeg-turbo`), or set TORCHLIGHT_LIBJPEG_DIR to a prefix holding include/jpeglib.h and \
                     lib/libjpeg.a, or build torchlight-vision with default-features = false"
                ),
            }
        }
        if !fetched {
            bail!(
                "{}; if apt's package lists are stale, run `apt-get update` (as root) first, or install \
                 libjpeg62-turbo-dev (Debian) / libjpeg-turbo8-dev (Ubuntu)",
                tried.join("; ")
            );
        }
        let mut debs: Vec<PathBuf> = fs::read_dir(download)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "deb"))
            .collect();
        debs.sort();
        for deb in &debs {
            unpack_deb(deb, partial)?;
        }
        if !partial.join("usr/include/jpeglib.h").is_file() {
            bail!("the packages fetched hold no usr/include/jpeglib.h");
        }
        Ok(debs.iter().filter_map(|d| d.file_name()).map(|n| n.to_string_lossy() + "\n").collect())
    })
}
