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
//!
//! Deleting the replaced version (hundreds of megabytes for a large model) runs on a
//! background thread after the swap: by then the new version is durable under `<name>` and
//! the old one is a stale `.<name>.old-<pid>`, which a kill at any point of its deletion
//! leaves for [`clean_leftovers`] and which [`resolve`] never reads while `<name>` is
//! complete. Every other operation on checkpoint folders of this process first waits for
//! those deletions ([`finish_removals`]), so two never work on the same names at once.

use crate::error::{io, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Deletions of replaced checkpoint versions still running.
static REMOVALS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Waits until the previous versions that saves of this process replaced are deleted from
/// disk. Saving, deleting and cleaning checkpoint folders wait for them anyway, and
/// [`CheckpointManager`](crate::CheckpointManager) waits before each save returns; call this
/// after a last [`save`](crate::save) of your own before the process exits, or a hidden
/// `.<name>.old-<pid>` folder may stay behind (deleted by the next manager started there).
pub fn finish_removals() {
    let pending = std::mem::take(&mut *REMOVALS.lock().unwrap_or_else(|e| e.into_inner()));
    for handle in pending {
        // The deletion is best effort (what it leaves, `clean_leftovers` deletes), so neither
        // its failure nor a panic in it is the caller's error.
        let _ = handle.join();
    }
}

/// Deletes the folder `path` on a background thread ([`finish_removals`] waits for it); on
/// the calling thread when no thread can be started.
fn remove_in_background(path: PathBuf) {
    let spawned = std::thread::Builder::new().name("checkpoint-cleanup".into()).spawn({
        let path = path.clone();
        move || {
            let _ = fs::remove_dir_all(&path);
        }
    });
    match spawned {
        Ok(handle) => {
            wait_at_exit();
            REMOVALS.lock().unwrap_or_else(|e| e.into_inner()).push(handle)
        }
        Err(_) => {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Makes a normal process exit (returning from `main`, `std::process::exit`) wait for the
/// deletions still running, so a program whose last act is a save leaves no hidden folder.
fn wait_at_exit() {
    #[cfg(unix)]
    {
        extern "C" fn at_exit() {
            finish_removals();
        }
        static REGISTER: std::sync::Once = std::sync::Once::new();
        REGISTER.call_once(|| {
            // SAFETY: registers a plain function with no arguments; it only joins threads,
            // which are still running when exit handlers run, and takes no lock that the
            // exiting thread could hold (`REMOVALS` is never held across a call out).
            unsafe {
                libc::atexit(at_exit);
            }
        });
    }
}

/// A folder being written; [`Staging::commit`] swaps it into place.
pub(crate) struct Staging {
    pub(crate) dir: PathBuf,
    target: PathBuf,
    /// Files in `dir` their writer already synced.
    synced: Vec<PathBuf>,
}

fn sibling(target: &Path, tag: &str) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    target.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

impl Staging {
    pub(crate) fn new(target: &Path) -> Result<Self> {
        finish_removals();
        let parent = target.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(io(parent))?;
        // Staging folders left by a writer that was killed are garbage: one writer owns a run.
        remove_siblings(target, "tmp", |_| true)?;
        let dir = sibling(target, "tmp");
        fs::create_dir(&dir).map_err(io(&dir))?;
        Ok(Staging { dir, target: target.to_path_buf(), synced: Vec::new() })
    }

    /// Records that the staged file `path` was synced (`fdatasync` after its last write) by
    /// its writer, so that [`Staging::commit`] does not sync it again.
    pub(crate) fn synced(&mut self, path: PathBuf) {
        self.synced.push(path);
    }

    /// fsyncs the staged files and folder, swaps the folder in, and deletes the old version
    /// in the background (see the module's documentation).
    pub(crate) fn commit(self) -> Result<()> {
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let path = entry.map_err(io(&self.dir))?.path();
            if !self.synced.contains(&path) {
                fs::File::open(&path).and_then(|f| f.sync_all()).map_err(io(&path))?;
            }
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
        // Any version left by an earlier interrupted save is stale now too.
        remove_siblings(&self.target, "old", |path| !(had_old && path == old))?;
        if had_old {
            remove_in_background(old);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Only an uncommitted staging folder still exists here.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Removes every `.<name>.<tag>-*` folder beside `target` that `select` accepts.
fn remove_siblings(target: &Path, tag: &str, select: impl Fn(&Path) -> bool) -> Result<()> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let parent = target.parent().unwrap_or(Path::new("."));
    let prefix = format!(".{name}.{tag}-");
    let Ok(entries) = fs::read_dir(parent) else {
        return Ok(());
    };
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)) && select(&path) {
            fs::remove_dir_all(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// Deletes the checkpoint folder `target` so that a crash at any point leaves either the
/// complete folder under its name or nothing there: one atomic rename to `.<name>.del-<pid>`,
/// an fsync of the parent so the rename is durable, then the deletion of the renamed folder.
pub(crate) fn remove(target: &Path) -> Result<()> {
    finish_removals();
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
    finish_removals();
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
