//! `load_tokenizer`: a saved tokenizer of either kind, told apart by its JSON.

use crate::error::{Result, TextError};
use crate::hf_tokenizer::HfTokenizer;
use crate::tokenizer::Tokenizer;
use crate::word_vocab::{WordVocab, WORD_VOCAB_TYPE};
use std::path::Path;

/// Opens a saved tokenizer of either kind: a [`WordVocab`] file (its JSON says
/// `"type": "torchlight-word-vocab"`) or a Hugging Face `tokenizer.json` ([`HfTokenizer`]).
///
/// # Errors
/// [`TextError::Io`] for an unreadable file, [`TextError::Tokenizer`] naming the file when it
/// is neither kind (or has no padding token; see [`HfTokenizer::from_file`]).
pub fn load_tokenizer(path: impl AsRef<Path>) -> Result<Box<dyn Tokenizer>> {
    let path = path.as_ref();
    let text =
        std::fs::read_to_string(path).map_err(|error| TextError::Io { path: path.to_path_buf(), error })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| TextError::Tokenizer {
        path: Some(path.to_path_buf()),
        reason: format!("not JSON: {e}"),
    })?;
    if value.get("type").and_then(|t| t.as_str()) == Some(WORD_VOCAB_TYPE) {
        Ok(Box::new(WordVocab::from_json(&text, Some(path))?))
    } else {
        Ok(Box::new(HfTokenizer::from_json(&text, Some(path), None)?))
    }
}
