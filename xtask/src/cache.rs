//! Filling the per-user cache beside libtorch: a folder installed all or nothing (through a
//! `.partial` folder and one rename, with a marker file saying what it holds), and Debian
//! packages unpacked into one without root. Used by the gloo, CUDA-header and libjpeg-turbo
//! set-up steps.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;
use std::process::Command;

/// The file that marks a cache folder complete (it holds what was installed).
pub(crate) const MARKER: &str = ".torchlight-complete";

/// Fills `dir` through a `<dir>.partial` folder (with a `download` folder inside for
/// `unpack`, removed after) and one rename, so an interrupted fetch never looks complete.
/// `unpack(partial, download)` returns the marker text.
pub(crate) fn install_into(dir: &Path, unpack: impl FnOnce(&Path, &Path) -> Result<String>) -> Result<()> {
    let parent = dir.parent().context("cache directory has a parent")?;
    fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let name = dir.file_name().context("cache directory has a name")?.to_string_lossy();
    let partial = dir.with_file_name(format!("{name}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove the stale {}", partial.display()))?;
    }
    let download = partial.join("download");
    fs::create_dir_all(&download)?;
    let marker = unpack(&partial, &download)?;
    fs::remove_dir_all(&download)?;
    fs::write(partial.join(MARKER), marker)?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))
}

/// Unpacks the Debian package `deb` into `into` (`dpkg-deb -x`; no root, nothing installed).
pub(crate) fn unpack_deb(deb: &Path, into: &Path) -> Result<()> {
    let status =
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(into).status().context("cannot run dpkg-deb")?;
    if !status.success() {
        bail!("`dpkg-deb -x {}` failed ({status})", deb.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_is_complete_or_absent() {
        let root = std::env::temp_dir().join(format!("xtask-install-{}", std::process::id()));
        let dir = root.join("headers-1.0");
        install_into(&dir, |partial, download| {
            assert!(download.starts_with(partial) && download.is_dir());
            fs::write(partial.join("a.h"), "// a")?;
            Ok("v1\n".into())
        })
        .unwrap();
        assert_eq!(fs::read_to_string(dir.join(MARKER)).unwrap(), "v1\n");
        assert!(dir.join("a.h").is_file() && !dir.join("download").exists());
        assert!(!root.join("headers-1.0.partial").exists());
        // A failed fetch leaves the previous install in place and no marker for the new one.
        let err = install_into(&dir, |_, _| bail!("no network")).unwrap_err().to_string();
        assert!(err.contains("no network"));
        assert_eq!(fs::read_to_string(dir.join(MARKER)).unwrap(), "v1\n");
        fs::remove_dir_all(&root).unwrap();
    }
}
