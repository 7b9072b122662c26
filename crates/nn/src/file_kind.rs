//! What a weights or config file is before it is read: a regular file (not a FIFO or device
//! that would block), or a pickle, which is named for what it is instead of being read.

use crate::error::{NnError, Result};
use std::path::Path;

/// The magic number `torch.save` writes first in its legacy (pre-1.6, or
/// `_use_new_zipfile_serialization=False`) format, as the pickle integer it is stored as
/// (`LONG1` of 10 bytes), after the pickle's protocol header (and, from protocol 4, a frame).
const LEGACY_TORCH_MAGIC: [u8; 12] = [0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// What a file that begins with `head` is, when it is a pickle (protocol 2 to 5, as
/// `torch.save` and `pickle.dump` write them) rather than a zip archive or safetensors: the
/// reason it is not read and how to re-save it. `None` for anything else.
pub(crate) fn describe_pickle(head: &[u8]) -> Option<String> {
    if !(head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1])) {
        return None;
    }
    let legacy = head.windows(LEGACY_TORCH_MAGIC.len()).take(16).any(|w| w == LEGACY_TORCH_MAGIC);
    Some(if legacy {
        "written in torch.save's legacy format (PyTorch before 1.6, or \
         `_use_new_zipfile_serialization=False`), which is not supported; re-save it in \
         Python with `torch.save(torch.load(path), new_path)`"
            .to_string()
    } else {
        format!(
            "a plain Python pickle (protocol {}, as `pickle.dump` writes), not a torch.save archive or \
             safetensors; pickles are not read (loading one can run code): re-save the state_dict in \
             Python with `torch.save(state_dict, new_path)`",
            head[1]
        )
    })
}

/// Checks that `path` is a regular file (through symlinks) before it is opened, so that a
/// FIFO or a device given as weights or a config is an error instead of a read that blocks
/// or never ends.
///
/// # Errors
/// [`NnError::Io`] naming the path: the OS error, or what the path is instead of a file.
pub(crate) fn regular_file(path: &Path) -> Result<()> {
    let io = |error| NnError::Io { path: path.to_path_buf(), error };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_file() {
        return Ok(());
    }
    Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, not_a_file(&meta))))
}

/// Why a path of type `meta` (not a regular file) cannot be read as one.
pub(crate) fn not_a_file(meta: &std::fs::Metadata) -> String {
    let kind = if meta.is_dir() { "a folder" } else { special_file_kind(&meta.file_type()) };
    format!("is {kind}, not a regular file")
}

#[cfg(unix)]
fn special_file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}
