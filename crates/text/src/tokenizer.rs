//! The `Tokenizer` trait: a document to token ids, and a file that travels with the model
//! (`load_tokenizer`, in `load.rs`, opens either kind).

use crate::error::Result;
use std::path::Path;
use std::sync::Arc;

/// Turns a document into token ids, and saves itself to a file that can travel with a run
/// folder and an exported model.
///
/// Shared by reference between loader threads, hence `Send + Sync`.
pub trait Tokenizer: Send + Sync {
    /// The token ids of `text`, as the model reads them (a loaded Hugging Face tokenizer adds
    /// its special tokens, e.g. BERT's `[CLS]` and `[SEP]`). Not padded or truncated here: the
    /// collates do both.
    ///
    /// # Errors
    /// [`TextError::Tokenizer`](crate::TextError::Tokenizer) when the tokenizer fails on the text.
    fn encode(&self, text: &str) -> Result<Vec<u32>>;

    /// The number of ids (every id is below it): an embedding's `num_embeddings`.
    fn vocab_size(&self) -> usize;

    /// The id padding positions hold: an embedding's `padding_idx`.
    fn pad_id(&self) -> u32;

    /// The id of an unknown token, or `None` for a tokenizer that can encode any text (a
    /// byte-level BPE).
    fn unk_id(&self) -> Option<u32>;

    /// Writes the tokenizer to `path` as JSON ([`load_tokenizer`](crate::load_tokenizer) reads it back).
    ///
    /// # Errors
    /// [`TextError::Write`](crate::TextError::Write) naming the file.
    fn save(&self, path: &Path) -> Result<()>;
}

impl<T: Tokenizer + ?Sized> Tokenizer for Arc<T> {
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        (**self).encode(text)
    }

    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }

    fn pad_id(&self) -> u32 {
        (**self).pad_id()
    }

    fn unk_id(&self) -> Option<u32> {
        (**self).unk_id()
    }

    fn save(&self, path: &Path) -> Result<()> {
        (**self).save(path)
    }
}

impl<T: Tokenizer + ?Sized> Tokenizer for Box<T> {
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        (**self).encode(text)
    }

    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }

    fn pad_id(&self) -> u32 {
        (**self).pad_id()
    }

    fn unk_id(&self) -> Option<u32> {
        (**self).unk_id()
    }

    fn save(&self, path: &Path) -> Result<()> {
        (**self).save(path)
    }
}
