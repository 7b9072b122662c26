//! Writing an export file: the folder is checked first, and the file goes through a temporary
//! sibling and a rename, with errors naming the file asked for.

use crate::error::{ExportError, Result};
use std::path::Path;

/// An error naming `path` when its folder does not exist (before any work is done).
pub(crate) fn check_parent(path: &Path) -> Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if parent.is_dir() {
        return Ok(());
    }
    let error = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("the folder {} does not exist", parent.display()),
    );
    Err(ExportError::Io { path: path.to_path_buf(), error })
}

/// Writes `path` by `write`-ing `<path>.<tmp_extension>` and renaming it into place; on error
/// the temporary file is removed and the error names `path`.
pub(crate) fn write_through_tmp(
    path: &Path,
    tmp_extension: &str,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = path.with_extension(tmp_extension);
    let result = write(&tmp).and_then(|()| std::fs::rename(&tmp, path));
    result.map_err(|error| {
        let _ = std::fs::remove_file(&tmp);
        ExportError::Io { path: path.to_path_buf(), error }
    })
}
