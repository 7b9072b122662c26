//! Writing a folder atomically: build it beside its final place, fsync, then swap it in.
//!
//! A checkpoint is a folder of three files, and POSIX has no atomic replace of a non-empty
//! folder. So a save writes `.<name>.tmp-<pid>`, fsyncs every file and the folder, renames the
//! current `<name>` (if any) to `.<name>.old-<pid>`, renames the new folder to `<name>`, fsyncs
//! the parent and only then deletes the old one. A crash at any point leaves either `<name>`
//! complete, or no `<name>` and a complete `.<name>.old-*` that [`resolve`] finds.
//!
//! Deleting a checkpoint (retention) is the same in reverse: [`remove`] renames `<name>` to
//! `.<name>.del-<pid>` first, so a crash leaves either the complete folder or none under its
//! name, and [`clean_leftovers`] deletes what a killed process left aside.

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

/// Deletes the checkpoint folder `target` so that a crash at any point leaves either the
/// complete folder under its name or nothing there: one atomic rename to `.<name>.del-<pid>`,
/// an fsync of the parent so the rename is durable, then the deletion of the renamed folder.
pub(crate) fn remove(target: &Path) -> Result<()> {
    let aside = sibling(target, "del");
    if aside.exists() {
        fs::remove_dir_all(&aside).map_err(io(&aside))?;
    }
    fs::rename(target, &aside).map_err(io(target))?;
    sync_dir(target.parent().unwrap_or(Path::new(".")))?;
    fs::remove_dir_all(&aside).map_err(io(&aside))
}

/// Deletes what killed writers left in the checkpoint folder `root`: folders renamed aside
/// for deletion (`.<name>.del-*`), unfinished staging folders (`.<name>.tmp-*`), and
/// previous versions (`.<name>.old-*`) whose `<name>` is complete again. A previous version
/// whose `<name>` is missing is kept: it is the checkpoint [`resolve`] reads. One process owns
/// a run folder, so nothing here belongs to a live writer. Returns what was deleted; a folder
/// that cannot be deleted is skipped (hidden, it is never read).
pub(crate) fn clean_leftovers(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let Some(rest) = name.strip_prefix('.') else { continue };
        let Some((target, tag)) = leftover_parts(rest) else { continue };
        let stale = match tag {
            "del" | "tmp" => true,
            _ => root.join(target).join("meta.json").is_file(),
        };
        if stale && path.is_dir() && fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// Splits `<name>.<tag>-<pid>` (the part after the leading dot) into `(name, tag)`.
fn leftover_parts(rest: &str) -> Option<(&str, &str)> {
    let (head, pid) = rest.rsplit_once('-')?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (name, tag) = head.rsplit_once('.')?;
    (!name.is_empty() && matches!(tag, "del" | "tmp" | "old")).then_some((name, tag))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_names_are_recognised_and_nothing_else() {
        assert_eq!(leftover_parts("epoch_0003.del-412"), Some(("epoch_0003", "del")));
        assert_eq!(leftover_parts("last.tmp-9"), Some(("last", "tmp")));
        assert_eq!(leftover_parts("best.old-77"), Some(("best", "old")));
        assert_eq!(leftover_parts("last.old-"), None);
        assert_eq!(leftover_parts("notes.txt"), None);
        assert_eq!(leftover_parts("a.b.copy-12"), None);
        assert_eq!(leftover_parts(".del-12"), None);
    }
}
