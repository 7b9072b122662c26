//! `DocumentReport`: the documents of a dataset that cannot be read or are empty, found
//! before training so a run can stop (or say what it will skip) before its first epoch.

use std::fmt;
use std::path::PathBuf;

/// Where a document is: a file, or a line of a CSV/TSV/JSON-lines file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line the document's row starts on, for a file of many documents.
    pub line: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} line {line}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// What reading every document of a dataset found: the ones that cannot be read (with why)
/// and the empty ones (white space only). A dataset's `get` fails on exactly these, so under
/// the loader's `ErrorPolicy::Skip` they are the documents skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocumentReport {
    /// How many documents were read.
    pub documents: usize,
    /// Documents that cannot be read (not UTF-8, unreadable file), with the reason.
    pub unreadable: Vec<(Location, String)>,
    /// Documents with nothing but white space.
    pub empty: Vec<Location>,
}

impl DocumentReport {
    /// Whether every document can be used.
    pub fn is_clean(&self) -> bool {
        self.unreadable.is_empty() && self.empty.is_empty()
    }

    /// One line for a log: the counts and the first few documents of each kind, e.g.
    /// `2 of 100 documents cannot be read (a.txt: not UTF-8 ...); 1 is empty (b.txt)`.
    pub fn summary(&self) -> String {
        const SHOWN: usize = 3;
        if self.is_clean() {
            return format!("all {} documents can be read and none is empty", self.documents);
        }
        let list = |items: Vec<String>| {
            let total = items.len();
            let mut shown: Vec<String> = items.into_iter().take(SHOWN).collect();
            if total > SHOWN {
                shown.push(format!("and {} more", total - SHOWN));
            }
            shown.join("; ")
        };
        let mut parts = Vec::new();
        if !self.unreadable.is_empty() {
            let items = self.unreadable.iter().map(|(at, why)| format!("{at}: {why}")).collect();
            parts.push(format!(
                "{} of {} documents cannot be read ({})",
                self.unreadable.len(),
                self.documents,
                list(items)
            ));
        }
        if !self.empty.is_empty() {
            let items = self.empty.iter().map(ToString::to_string).collect();
            let verb = if self.empty.len() == 1 { "is" } else { "are" };
            parts.push(format!(
                "{} of {} documents {verb} empty ({})",
                self.empty.len(),
                self.documents,
                list(items)
            ));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_and_names() {
        let at = |name: &str, line| Location { path: PathBuf::from(name), line };
        let report = DocumentReport {
            documents: 10,
            unreadable: vec![(at("a.txt", None), "not UTF-8".into())],
            empty: vec![at("b.csv", Some(4))],
        };
        assert_eq!(
            report.summary(),
            "1 of 10 documents cannot be read (a.txt: not UTF-8); 1 of 10 documents is empty (b.csv line 4)"
        );
        assert!(!report.is_clean());
        assert!(DocumentReport { documents: 3, ..Default::default() }.is_clean());
    }
}
