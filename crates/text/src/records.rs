//! `TextRecords`: documents and labels read from one file of many documents (CSV, TSV, JSON
//! lines), held in memory, with the column names and class list they are read with.

use crate::error::{Result, TextError};
use crate::report::{DocumentReport, Location};
use crate::text_folder::EMPTY_DOCUMENT;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlight_base::seed::Rng;
use torchlight_data::{DataError, Dataset};

/// Which columns (CSV/TSV header names, JSON keys) hold a record's text and label, and the
/// classes its labels name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The text's column (default `"text"`).
    pub text: String,
    /// The label's column (default `"label"`).
    pub label: String,
    /// The class names, when fixed in advance: a validation or test file is read with the
    /// training file's classes, so all share one numbering, and a label outside them is an
    /// error naming its line. `None` (the default): the file's own distinct labels.
    pub classes: Option<Vec<String>>,
}

impl Default for Columns {
    fn default() -> Self {
        Columns { text: "text".to_string(), label: "label".to_string(), classes: None }
    }
}

impl Columns {
    /// The text and label columns by name.
    pub fn new(text: impl Into<String>, label: impl Into<String>) -> Self {
        Columns { text: text.into(), label: label.into(), classes: None }
    }

    /// Labels must be among `classes` (numbered in sorted order whatever the order given).
    pub fn with_classes<S: Into<String>>(mut self, classes: impl IntoIterator<Item = S>) -> Self {
        self.classes = Some(classes.into_iter().map(Into::into).collect());
        self
    }
}

/// One record as a reader found it: its line, text and label name.
pub(crate) struct RawRecord {
    pub line: u64,
    pub text: String,
    pub label: String,
}

/// Documents with labels, read from one file, in file order.
///
/// Labels are class names mapped to indices in sorted order (code-point order, as
/// `ImageFolder` sorts its folders): labels `"neg"`, `"pos"` become 0, 1. Numbers are names
/// too, so labels `"2"` and `"10"` sort as text (`"10"` first); give
/// [`Columns::with_classes`] to fix the order.
///
/// As a [`Dataset`], `get` yields `(text, class_index)`; an empty document (white space only)
/// fails its sample with `DataError::Sample` naming the file and line, so it is reported, or
/// skipped and counted under `ErrorPolicy::Skip` (see [`report`](TextRecords::report)).
#[derive(Debug, Clone)]
pub struct TextRecords {
    path: PathBuf,
    classes: Arc<Vec<String>>,
    texts: Vec<String>,
    labels: Vec<i64>,
    lines: Vec<u64>,
}

impl TextRecords {
    /// Numbers the labels of `records` read from `path` by `columns`' rule.
    pub(crate) fn from_raw(path: &Path, records: Vec<RawRecord>, columns: &Columns) -> Result<Self> {
        let classes: Vec<String> = match &columns.classes {
            Some(fixed) => fixed.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect(),
            None => records.iter().map(|r| r.label.clone()).collect::<BTreeSet<_>>().into_iter().collect(),
        };
        let index: BTreeMap<&str, i64> =
            classes.iter().enumerate().map(|(i, c)| (c.as_str(), i as i64)).collect();
        let mut texts = Vec::with_capacity(records.len());
        let mut labels = Vec::with_capacity(records.len());
        let mut lines = Vec::with_capacity(records.len());
        for record in &records {
            let Some(&label) = index.get(record.label.as_str()) else {
                return Err(TextError::Row {
                    path: path.to_path_buf(),
                    line: record.line,
                    reason: format!("label {:?} is not one of the classes {classes:?}", record.label),
                });
            };
            labels.push(label);
            lines.push(record.line);
        }
        texts.extend(records.into_iter().map(|r| r.text));
        Ok(TextRecords { path: path.to_path_buf(), classes: Arc::new(classes), texts, labels, lines })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The class names, sorted; a class's index is its position here.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The class index of every record.
    pub fn targets(&self) -> &[i64] {
        &self.labels
    }

    /// The text of every record, in file order.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }

    /// The 1-based line record `index` starts on.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn line(&self, index: usize) -> u64 {
        self.lines[index]
    }

    /// The empty records (white space only), by line: the samples `get` fails on.
    pub fn report(&self) -> DocumentReport {
        let empty = self
            .texts
            .iter()
            .zip(&self.lines)
            .filter(|(text, _)| crate::document::is_empty_document(text))
            .map(|(_, &line)| Location { path: self.path.clone(), line: Some(line) })
            .collect();
        DocumentReport { documents: self.texts.len(), unreadable: Vec::new(), empty }
    }
}

impl Dataset for TextRecords {
    type Item = (String, i64);

    fn len(&self) -> usize {
        self.texts.len()
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> torchlight_data::Result<(String, i64)> {
        let Some(text) = self.texts.get(index) else {
            return Err(DataError::IndexOutOfRange { index, len: self.texts.len() });
        };
        if crate::document::is_empty_document(text) {
            return Err(DataError::Sample {
                index,
                path: Some(self.path.clone()),
                message: format!("line {}: {EMPTY_DOCUMENT}", self.lines[index]),
            });
        }
        Ok((text.clone(), self.labels[index]))
    }
}
