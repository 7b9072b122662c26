//! `read_json_lines`: a JSON-lines file (one JSON object per line), its text and label keys
//! by name.

use crate::error::{Result, TextError};
use crate::records::{Columns, RawRecord, TextRecords};
use serde_json::Value;
use std::path::Path;

/// Reads the records of the JSON-lines file at `path`: every line that is not blank is one
/// JSON object with a string under `columns.text` and a label under `columns.label` (a string,
/// or an integer, taken as its decimal text). A leading byte-order mark and `\r\n` line
/// endings are accepted.
///
/// # Errors
/// [`TextError::Io`] for an unreadable file; [`TextError::Row`] naming the file and line of a
/// line that is not UTF-8, not JSON, not an object, lacks a key, has a value of another type,
/// or a label outside fixed classes.
pub fn read_json_lines(path: impl AsRef<Path>, columns: &Columns) -> Result<TextRecords> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| TextError::Io { path: path.to_path_buf(), error })?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    let mut records = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i as u64 + 1;
        let row_error = |reason: String| TextError::Row { path: path.to_path_buf(), line, reason };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).map_err(|e| {
            row_error(format!("not UTF-8 text (invalid byte at offset {} of the line)", e.valid_up_to()))
        })?;
        if text.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(text).map_err(|e| row_error(format!("not JSON: {e}")))?;
        let Value::Object(object) = value else {
            return Err(row_error(format!("a JSON {}, not an object", kind(&value))));
        };
        let get = |key: &str| object.get(key).ok_or_else(|| row_error(format!("no `{key}` key")));
        let text = match get(&columns.text)? {
            Value::String(s) => s.clone(),
            other => return Err(row_error(format!("`{}` is a {}, not a string", columns.text, kind(other)))),
        };
        let label = match get(&columns.label)? {
            Value::String(s) => s.clone(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            other => {
                return Err(row_error(format!(
                    "`{}` is a {}, not a string or an integer",
                    columns.label,
                    kind(other)
                )))
            }
        };
        records.push(RawRecord { line, text, label });
    }
    TextRecords::from_raw(path, records, columns)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "fractional number",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_types_and_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        std::fs::write(&path, "{\"body\": \"a\", \"y\": 10}\r\n\n{\"body\": \"b\", \"y\": 2}\n").unwrap();
        let records = read_json_lines(&path, &Columns::new("body", "y")).unwrap();
        // Integer labels are names: "10" sorts before "2".
        assert_eq!(records.classes(), ["10", "2"]);
        assert_eq!((records.line(0), records.line(1)), (1, 3));
        std::fs::write(&path, "{\"body\": \"a\", \"y\": 1.5}\n").unwrap();
        let err = read_json_lines(&path, &Columns::new("body", "y")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} line 1: `y` is a fractional number, not a string or an integer", path.display())
        );
    }
}
