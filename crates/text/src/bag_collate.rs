//! `BagCollate`: token-id samples into the flat `ids` + `offsets [B]` form that
//! `nn.EmbeddingBag` takes.

use crate::error::Result;
use crate::pad_collate::check_max_len;
use crate::truncation::Truncation;
use torchlight_data::{Array, Collate};

/// A batch of documents as one flat run of ids and where each document starts: PyTorch's
/// `EmbeddingBag(input, offsets)` form (torchtext's text-classification tutorial).
#[derive(Debug, Clone, PartialEq)]
pub struct BagBatch {
    /// Every document's token ids one after another, int64 `[N]` (`N` = the sum of lengths).
    pub ids: Array,
    /// Where each document starts in `ids`, int64 `[B]`, the first 0.
    pub offsets: Array,
    /// Class indices, int64 `[B]`.
    pub labels: Array,
    /// The batch's truncation.
    pub truncation: Truncation,
}

/// Collates `(token ids, label)` samples into a [`BagBatch`], documents over `max_len` keeping
/// their first `max_len` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BagCollate {
    max_len: Option<usize>,
}

impl BagCollate {
    /// Cuts documents to `max_len` tokens (`None`: no limit).
    ///
    /// # Errors
    /// [`TextError::Config`](crate::TextError::Config) naming `max_len` when it is 0.
    pub fn new(max_len: Option<usize>) -> Result<Self> {
        check_max_len(max_len)?;
        Ok(BagCollate { max_len })
    }
}

impl Collate<(Vec<u32>, i64)> for BagCollate {
    type Staged = BagBatch;
    type Batch = BagBatch;

    fn stage(&self, items: Vec<(usize, (Vec<u32>, i64))>) -> torchlight_data::Result<BagBatch> {
        let mut truncation = Truncation::default();
        let mut ids = Vec::new();
        let mut offsets = Vec::with_capacity(items.len());
        for (_, (doc, _)) in &items {
            let len = truncation.record(doc.len(), self.max_len);
            offsets.push(ids.len() as i64);
            ids.extend(doc[..len].iter().map(|&id| i64::from(id)));
        }
        let (n, b) = (ids.len(), items.len());
        Ok(BagBatch {
            ids: Array::from_i64(ids, vec![n])?,
            offsets: Array::from_i64(offsets, vec![b])?,
            labels: Array::from_i64(items.iter().map(|(_, (_, label))| *label).collect(), vec![b])?,
            truncation,
        })
    }

    fn finish(&self, staged: BagBatch, _pin_memory: bool) -> torchlight_data::Result<BagBatch> {
        Ok(staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_data::Buffer;

    #[test]
    fn flat_ids_and_offsets() {
        let batch = BagCollate::new(Some(2))
            .unwrap()
            .stage(vec![(0, (vec![5, 6, 7], 1)), (1, (vec![8], 0))])
            .unwrap();
        assert_eq!(batch.ids.buffer, Buffer::I64(vec![5, 6, 8]));
        assert_eq!(batch.offsets.buffer, Buffer::I64(vec![0, 2]));
        assert_eq!(batch.labels.shape, [2]);
        assert_eq!(batch.truncation.truncated, 1);
    }
}
