//! `read_delimited`: a CSV or TSV file with a header, its text and label columns by name,
//! quoting handled by the `csv` crate (RFC 4180, as Python's `csv` module reads it).

use crate::error::{Result, TextError};
use crate::records::{Columns, RawRecord, TextRecords};
use std::path::Path;

/// How a delimited file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelimitedOptions {
    /// The field separator (`b','` for CSV, `b'\t'` for TSV).
    pub delimiter: u8,
    /// Whether `"` quotes fields (default true: a quoted field may hold the delimiter,
    /// newlines and `""` for a quote). Turn it off for TSV files whose texts hold bare quotes
    /// (`quoting=csv.QUOTE_NONE` in Python).
    pub quoting: bool,
    /// The text and label columns, and the classes.
    pub columns: Columns,
}

impl DelimitedOptions {
    /// Comma-separated, quoted, columns `text` and `label`.
    pub fn csv() -> Self {
        DelimitedOptions { delimiter: b',', quoting: true, columns: Columns::default() }
    }

    /// Tab-separated, quoted, columns `text` and `label`.
    pub fn tsv() -> Self {
        DelimitedOptions { delimiter: b'\t', ..Self::csv() }
    }

    /// Reads these columns (and classes).
    pub fn with_columns(mut self, columns: Columns) -> Self {
        self.columns = columns;
        self
    }

    /// Whether `"` quotes fields.
    pub fn with_quoting(mut self, quoting: bool) -> Self {
        self.quoting = quoting;
        self
    }
}

/// Reads the records of the delimited file at `path`: a header row naming the columns, then
/// one record per row (a quoted field may span lines; records are numbered by the line they
/// start on). A leading UTF-8 byte-order mark is ignored.
///
/// # Errors
/// [`TextError::Io`] for an unreadable file, [`TextError::MissingColumn`] naming a column the
/// header lacks, and [`TextError::Row`] naming the file and line of a row with another number
/// of fields than the header, a field that is not UTF-8, or a label outside fixed classes.
pub fn read_delimited(path: impl AsRef<Path>, options: &DelimitedOptions) -> Result<TextRecords> {
    let path = path.as_ref();
    let io = |error| TextError::Io { path: path.to_path_buf(), error };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(options.delimiter)
        .quoting(options.quoting)
        .has_headers(true)
        .flexible(false)
        .from_reader(std::io::BufReader::new(file));
    let row_error = |line: u64, reason: String| TextError::Row { path: path.to_path_buf(), line, reason };
    let to_error = |e: csv::Error| -> TextError {
        let line = e.position().map(|p| p.line()).unwrap_or(1);
        match e.into_kind() {
            csv::ErrorKind::Io(error) => io(error),
            csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                row_error(line, format!("{len} fields where the header has {expected_len}"))
            }
            csv::ErrorKind::Utf8 { err, .. } => {
                row_error(line, format!("field {} is not UTF-8", err.field() + 1))
            }
            other => row_error(line, format!("{:?}", other).replace('\n', " ")),
        }
    };
    let header: Vec<String> = reader
        .byte_headers()
        .map_err(to_error)?
        .iter()
        .enumerate()
        .map(|(i, h)| {
            String::from_utf8(h.to_vec())
                .map_err(|_| row_error(1, format!("header field {} is not UTF-8", i + 1)))
        })
        .collect::<Result<_>>()?;
    let column = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| TextError::MissingColumn {
            path: path.to_path_buf(),
            column: name.to_string(),
            found: header.clone(),
        })
    };
    let (text_at, label_at) = (column(&options.columns.text)?, column(&options.columns.label)?);
    let mut records = Vec::new();
    for record in reader.byte_records() {
        let record = record.map_err(to_error)?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let field = |at: usize, name: &str| -> Result<String> {
            let bytes = record.get(at).unwrap_or_default();
            String::from_utf8(bytes.to_vec()).map_err(|e| {
                row_error(
                    line,
                    format!(
                        "`{name}` is not UTF-8 (invalid byte at offset {})",
                        e.utf8_error().valid_up_to()
                    ),
                )
            })
        };
        let text = field(text_at, &options.columns.text)?;
        let label = field(label_at, &options.columns.label)?;
        records.push(RawRecord { line, text, label });
    }
    TextRecords::from_raw(path, records, &options.columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_columns_tabs_and_bare_quotes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.tsv");
        std::fs::write(&path, "id\tsentence\tsentiment\n1\tsaid \"hi\nthere\tpos\n2\tok\tneg\n").unwrap();
        let columns = Columns::new("sentence", "sentiment");
        // With quoting the bare quote opens a field that swallows the rest: a wrong field count.
        let quoted = read_delimited(&path, &DelimitedOptions::tsv().with_columns(columns.clone()));
        assert!(quoted.is_err());
        let plain = DelimitedOptions::tsv().with_columns(columns).with_quoting(false);
        let err = read_delimited(&path, &plain).unwrap_err();
        // Unquoted, the newline ends the row: line 2 has two fields.
        assert!(matches!(err, TextError::Row { line: 2, .. }), "{err}");
        std::fs::write(&path, "id\tsentence\tsentiment\n1\tsaid \"hi\"\tpos\n2\tok\tneg\n").unwrap();
        let records = read_delimited(&path, &plain).unwrap();
        assert_eq!(records.texts(), ["said \"hi\"", "ok"]);
        assert_eq!(records.targets(), [1, 0]);
    }
}
