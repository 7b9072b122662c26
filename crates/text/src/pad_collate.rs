//! `PadCollate`: token-id samples into padded batches, `ids [B, T]` with `lengths [B]` and
//! `mask [B, T]`, cut to `max_len`.

use crate::error::{Result, TextError};
use crate::tokenizer::Tokenizer;
use crate::truncation::Truncation;
use torchlight_data::{Array, Collate};

/// A padded batch of documents, as `Array`s (no libtorch); `T` is the longest document of the
/// batch after truncation.
#[derive(Debug, Clone, PartialEq)]
pub struct PaddedBatch {
    /// Token ids, int64 `[B, T]`, each row padded at the end with the pad id (Hugging Face's
    /// `padding_side="right"`).
    pub ids: Array,
    /// Each document's token count after truncation, int64 `[B]`: the CPU int64 lengths
    /// `pack_padded_sequence(..., enforce_sorted=False)` takes.
    pub lengths: Array,
    /// u8 `[B, T]`, 1 at real tokens and 0 at padding: Hugging Face's `attention_mask`. As a
    /// bool tensor it is `~src_key_padding_mask` (PyTorch's transformer masks the padding).
    pub mask: Array,
    /// Class indices, int64 `[B]`.
    pub labels: Array,
    /// The batch's truncation.
    pub truncation: Truncation,
}

/// Collates `(token ids, label)` samples (from [`Tokenized`](crate::Tokenized)) into a
/// [`PaddedBatch`]; documents over `max_len` keep their first `max_len` tokens (Hugging
/// Face's `truncation_side="right"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadCollate {
    pad_id: u32,
    max_len: Option<usize>,
}

impl PadCollate {
    /// Pads with `pad_id`, cutting documents to `max_len` tokens (`None`: no limit).
    ///
    /// # Errors
    /// [`TextError::Config`] naming `max_len` when it is 0.
    pub fn new(pad_id: u32, max_len: Option<usize>) -> Result<Self> {
        check_max_len(max_len)?;
        Ok(PadCollate { pad_id, max_len })
    }

    /// Pads with `tokenizer`'s pad id.
    pub fn for_tokenizer(tokenizer: &dyn Tokenizer, max_len: Option<usize>) -> Result<Self> {
        Self::new(tokenizer.pad_id(), max_len)
    }

    /// The longest document kept.
    pub fn max_len(&self) -> Option<usize> {
        self.max_len
    }
}

pub(crate) fn check_max_len(max_len: Option<usize>) -> Result<()> {
    if max_len == Some(0) {
        return Err(TextError::Config { field: "max_len", reason: "must be at least 1 token".into() });
    }
    Ok(())
}

impl Collate<(Vec<u32>, i64)> for PadCollate {
    type Staged = PaddedBatch;
    type Batch = PaddedBatch;

    fn stage(&self, items: Vec<(usize, (Vec<u32>, i64))>) -> torchlight_data::Result<PaddedBatch> {
        let mut truncation = Truncation::default();
        let kept: Vec<usize> =
            items.iter().map(|(_, (ids, _))| truncation.record(ids.len(), self.max_len)).collect();
        let b = items.len();
        let t = kept.iter().copied().max().unwrap_or(0);
        let mut ids = vec![i64::from(self.pad_id); b * t];
        let mut mask = vec![0u8; b * t];
        for (row, ((_, (doc, _)), &len)) in items.iter().zip(&kept).enumerate() {
            for (slot, &id) in ids[row * t..row * t + len].iter_mut().zip(doc) {
                *slot = i64::from(id);
            }
            mask[row * t..row * t + len].fill(1);
        }
        Ok(PaddedBatch {
            ids: Array::from_i64(ids, vec![b, t])?,
            lengths: Array::from_i64(kept.iter().map(|&l| l as i64).collect(), vec![b])?,
            mask: Array::from_u8(mask, vec![b, t])?,
            labels: Array::from_i64(items.iter().map(|(_, (_, label))| *label).collect(), vec![b])?,
            truncation,
        })
    }

    fn finish(&self, staged: PaddedBatch, _pin_memory: bool) -> torchlight_data::Result<PaddedBatch> {
        Ok(staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_data::Buffer;

    #[test]
    fn pads_masks_and_cuts() {
        let collate = PadCollate::new(0, Some(3)).unwrap();
        let batch = collate
            .stage(vec![(4, (vec![5, 6], 1)), (9, (vec![7, 8, 9, 10], 0)), (2, (vec![11], 1))])
            .unwrap();
        assert_eq!(batch.ids.shape, [3, 3]);
        assert_eq!(batch.ids.buffer, Buffer::I64(vec![5, 6, 0, 7, 8, 9, 11, 0, 0]));
        assert_eq!(batch.mask.buffer, Buffer::U8(vec![1, 1, 0, 1, 1, 1, 1, 0, 0]));
        assert_eq!(batch.lengths.buffer, Buffer::I64(vec![2, 3, 1]));
        assert_eq!(batch.labels.buffer, Buffer::I64(vec![1, 0, 1]));
        assert_eq!(batch.truncation, Truncation { documents: 3, truncated: 1, dropped_tokens: 1 });
        assert!(PadCollate::new(0, Some(0)).is_err());
    }
}
