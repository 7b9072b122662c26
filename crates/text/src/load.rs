//! `load_tokenizer`: a saved tokenizer of either kind, told apart by its JSON, from a file
//! ([`load_tokenizer`]) or from the JSON itself ([`tokenizer_from_json`], e.g. the copy a
//! checkpoint carries).

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
    tokenizer_from_json(&text, Some(path))
}

/// [`load_tokenizer`] of the saved JSON `text` itself, with nothing read from disk; `origin`
/// (the file the JSON came from or sits in) names it in errors.
///
/// # Errors
/// [`TextError::Tokenizer`] naming `origin` when `text` is not JSON or is neither kind.
pub fn tokenizer_from_json(text: &str, origin: Option<&Path>) -> Result<Box<dyn Tokenizer>> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| TextError::Tokenizer {
        path: origin.map(Path::to_path_buf),
        reason: format!("not JSON: {e}"),
    })?;
    if value.get("type").and_then(|t| t.as_str()) == Some(WORD_VOCAB_TYPE) {
        Ok(Box::new(WordVocab::from_json(text, origin)?))
    } else {
        Ok(Box::new(HfTokenizer::from_json(text, origin, None)?))
    }
}
