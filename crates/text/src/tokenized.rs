//! `Tokenized`: a dataset of `(text, label)` documents encoded by a tokenizer into
//! `(token ids, label)` samples, in the loader's worker threads.

use crate::tokenizer::Tokenizer;
use torchlight_base::seed::{rng_from_seed, Rng};
use torchlight_data::{DataError, Dataset};

/// `dataset` with every document encoded by `tokenizer`: what [`PadCollate`](crate::PadCollate)
/// and [`BagCollate`](crate::BagCollate) take. The encoding runs in the loader's workers.
///
/// A document that encodes to no tokens (all of it removed by the tokenizer's normalizer)
/// fails its sample like an empty document, so a model never sees a length of 0 (which
/// `pack_padded_sequence` refuses).
#[derive(Debug, Clone)]
pub struct Tokenized<D, T> {
    dataset: D,
    tokenizer: T,
}

impl<D, T> Tokenized<D, T>
where
    D: Dataset<Item = (String, i64)>,
    T: Tokenizer,
{
    /// Encodes `dataset`'s documents with `tokenizer` (an `Arc` to share one tokenizer).
    pub fn new(dataset: D, tokenizer: T) -> Self {
        Tokenized { dataset, tokenizer }
    }

    /// The dataset of documents.
    pub fn inner(&self) -> &D {
        &self.dataset
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &T {
        &self.tokenizer
    }

    /// The token count of every sample, by encoding each once (0 for a sample that fails):
    /// what [`BucketSampler`](crate::BucketSampler) groups by and
    /// [`Truncation::of_lengths`](crate::Truncation::of_lengths) reports on.
    pub fn lengths(&self) -> Vec<usize> {
        // Text datasets draw no randomness; the generator is there for the trait.
        let mut rng = rng_from_seed(0);
        (0..self.dataset.len())
            .map(|i| self.get(i, &mut rng).map(|(ids, _)| ids.len()).unwrap_or(0))
            .collect()
    }
}

impl<D, T> Dataset for Tokenized<D, T>
where
    D: Dataset<Item = (String, i64)>,
    T: Tokenizer,
{
    type Item = (Vec<u32>, i64);

    fn len(&self) -> usize {
        self.dataset.len()
    }

    fn get(&self, index: usize, rng: &mut Rng) -> torchlight_data::Result<(Vec<u32>, i64)> {
        let (text, label) = self.dataset.get(index, rng)?;
        let fail = |message: String| DataError::Sample { index, path: None, message };
        let ids = self.tokenizer.encode(&text).map_err(|e| fail(e.to_string()))?;
        if ids.is_empty() {
            return Err(fail("the document encodes to no tokens".to_string()));
        }
        Ok((ids, label))
    }
}
