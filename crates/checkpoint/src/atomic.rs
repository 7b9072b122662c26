//! Writing a folder atomically: build it beside its final place, fsync, then swap it in.
//!
//! A checkpoint is a folder of three files, and POSIX has no atomic replace of a non-empty
//! folder. So a save writes `.<name>.tmp-<pid>`, fsyncs every file and the folder, renames the
//! current `<name>` (if any) to `.<name>.old-<pid>`, renames the new folder to `<name>`, fsyncs
//! the parent and only then deletes the old one. A crash at any point leaves either `<name>`
//! complete, or no `<name>` and a complete `.<name>.old-*` that [`resolve`] finds.

use crate::error::{io, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// A folder being written; [`Staging::commit`] swaps it into place.
pub(crate) struct Staging {
    pub(crate) dir: PathBuf,
    target: PathBuf,
}

fn sibling(target: &Path, tag: &str) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    target.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

impl Staging {
    pub(crate) fn new(target: &Path) -> Result<Self> {
        let parent = target.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(io(parent))?;
        // Staging folders left by a writer that was killed are garbage: one writer owns a run.
        remove_siblings(target, "tmp")?;
        let dir = sibling(target, "tmp");
        fs::create_dir(&dir).map_err(io(&dir))?;
        Ok(Staging { dir, target: target.to_path_buf() })
    }

    /// fsyncs the staged files and folder, swaps the folder in, and removes the old one.
    pub(crate) fn commit(self) -> Result<()> {
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let path = entry.map_err(io(&self.dir))?.path();
            fs::File::open(&path).and_then(|f| f.sync_all()).map_err(io(&path))?;
        }
        sync_dir(&self.dir)?;
        let old = sibling(&self.target, "old");
        let had_old = self.target.exists();
        if had_old {
            if old.exists() {
                fs::remove_dir_all(&old).map_err(io(&old))?;
            }
            fs::rename(&self.target, &old).map_err(io(&self.target))?;
        }
        fs::rename(&self.dir, &self.target).map_err(io(&self.target))?;
        sync_dir(self.target.parent().unwrap_or(Path::new(".")))?;
        // The previous version, and any left by an earlier interrupted save, are now stale.
        remove_siblings(&self.target, "old")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Only an uncommitted staging folder still exists here.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Removes every `.<name>.<tag>-*` folder beside `target`.
fn remove_siblings(target: &Path, tag: &str) -> Result<()> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let parent = target.parent().unwrap_or(Path::new("."));
    let prefix = format!(".{name}.{tag}-");
    let Ok(entries) = fs::read_dir(parent) else {
        return Ok(());
    };
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)) {
            fs::remove_dir_all(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))
}

/// The folder to read for checkpoint `target`: `target` itself, or, after a crash between the
/// two renames of a save, the complete previous version left as `.<name>.old-*`.
pub fn resolve(target: &Path) -> Option<PathBuf> {
    if target.join("meta.json").is_file() {
        return Some(target.to_path_buf());
    }
    let name = target.file_name()?.to_string_lossy().into_owned();
    let parent = target.parent().unwrap_or(Path::new("."));
    let prefix = format!(".{name}.old-");
    fs::read_dir(parent)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
        .find(|p| p.join("meta.json").is_file())
}
