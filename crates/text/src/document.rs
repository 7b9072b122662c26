//! Reading one document: a whole file as UTF-8 text, and what counts as an empty document.

use crate::error::{Result, TextError};
use std::path::Path;

/// The text of the file at `path`, as Python's `open(path, encoding="utf-8-sig").read()`
/// gives it: the bytes must be UTF-8 and a leading byte-order mark is dropped. Line endings
/// are kept as they are (no universal-newline translation).
///
/// # Errors
/// [`TextError::Io`] for a file that cannot be read, [`TextError::NotUtf8`] naming the file
/// and the offset of the first invalid byte.
pub fn read_document(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|error| TextError::Io { path: path.to_path_buf(), error })?;
    let mut text = String::from_utf8(bytes)
        .map_err(|e| TextError::NotUtf8 { path: path.to_path_buf(), offset: e.utf8_error().valid_up_to() })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// Whether a document has nothing to learn from: no characters but white space.
pub fn is_empty_document(text: &str) -> bool {
    text.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bom_is_dropped_and_bad_bytes_are_located() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("a.txt");
        std::fs::write(&good, b"\xef\xbb\xbfhello\r\n").unwrap();
        assert_eq!(read_document(&good).unwrap(), "hello\r\n");
        let bad = dir.path().join("b.txt");
        std::fs::write(&bad, b"caf\xe9").unwrap();
        let err = read_document(&bad).unwrap_err();
        assert!(matches!(err, TextError::NotUtf8 { offset: 3, .. }), "{err}");
        assert!(err.to_string().contains("b.txt"), "{err}");
        assert!(is_empty_document(" \n\t") && !is_empty_document(" a "));
    }
}
