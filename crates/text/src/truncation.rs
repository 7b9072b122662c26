//! `Truncation`: how many documents were cut to `max_len`, for reporting.

use std::ops::AddAssign;

/// How many documents were cut to a maximum length, and how many tokens that dropped.
///
/// Every batch of [`PadCollate`](crate::PadCollate) and [`BagCollate`](crate::BagCollate)
/// carries its own; summing them over an epoch gives the epoch's, the same at any worker
/// count. [`Truncation::of_lengths`] gives a dataset's before training.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Truncation {
    /// Documents seen.
    pub documents: usize,
    /// Documents longer than the maximum, and so cut.
    pub truncated: usize,
    /// Tokens cut off, over all documents.
    pub dropped_tokens: usize,
}

impl Truncation {
    /// The truncation of documents of these token `lengths` to `max_len` (`None`: no limit).
    pub fn of_lengths(lengths: impl IntoIterator<Item = usize>, max_len: Option<usize>) -> Self {
        let mut t = Truncation::default();
        for length in lengths {
            t.record(length, max_len);
        }
        t
    }

    /// Counts one document of `length` tokens; returns the length it is cut to.
    pub(crate) fn record(&mut self, length: usize, max_len: Option<usize>) -> usize {
        self.documents += 1;
        match max_len {
            Some(max) if length > max => {
                self.truncated += 1;
                self.dropped_tokens += length - max;
                max
            }
            _ => length,
        }
    }

    /// The share of documents cut, in `[0, 1]` (0 when there are none).
    pub fn share(&self) -> f64 {
        if self.documents == 0 {
            0.0
        } else {
            self.truncated as f64 / self.documents as f64
        }
    }
}

impl AddAssign for Truncation {
    fn add_assign(&mut self, other: Truncation) {
        self.documents += other.documents;
        self.truncated += other.truncated;
        self.dropped_tokens += other.dropped_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_share_and_sums() {
        let mut t = Truncation::of_lengths([3, 10, 5, 7], Some(5));
        assert_eq!(t, Truncation { documents: 4, truncated: 2, dropped_tokens: 7 });
        assert_eq!(t.share(), 0.5);
        t += Truncation::of_lengths([1, 2, 3, 4], None);
        assert_eq!((t.documents, t.truncated), (8, 2));
        assert_eq!(Truncation::default().share(), 0.0);
    }
}
