//! `WordVocab`: a word-level vocabulary built from the training split (lower-cased words,
//! punctuation split off), torchtext's `build_vocab_from_iterator` rules, saved as JSON.

use crate::error::{Result, TextError};
use crate::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The padding token, id [`PAD_ID`].
pub const PAD_TOKEN: &str = "[PAD]";
/// The unknown-word token, id [`UNK_ID`].
pub const UNK_TOKEN: &str = "[UNK]";
/// The padding id of every [`WordVocab`].
pub const PAD_ID: u32 = 0;
/// The unknown-word id of every [`WordVocab`].
pub const UNK_ID: u32 = 1;
/// The `type` a saved [`WordVocab`] declares, which [`load_tokenizer`](crate::load_tokenizer)
/// recognises.
pub const WORD_VOCAB_TYPE: &str = "torchlight-word-vocab";

/// How a [`WordVocab`] is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordVocabConfig {
    /// A word is kept when it occurs at least this often in the training texts (default 1,
    /// torchtext's `min_freq`).
    pub min_freq: usize,
    /// The most entries, `[PAD]` and `[UNK]` included (torchtext's `max_tokens`, which also
    /// counts its specials); the most frequent words are kept. `None` (default): no limit.
    pub max_size: Option<usize>,
    /// Whether text is lower-cased before splitting (default true).
    pub lowercase: bool,
}

impl Default for WordVocabConfig {
    fn default() -> Self {
        WordVocabConfig { min_freq: 1, max_size: None, lowercase: true }
    }
}

impl WordVocabConfig {
    /// Keeps words seen at least `min_freq` times.
    pub fn with_min_freq(mut self, min_freq: usize) -> Self {
        self.min_freq = min_freq;
        self
    }

    /// At most `max_size` entries, the two special tokens included.
    pub fn with_max_size(mut self, max_size: Option<usize>) -> Self {
        self.max_size = max_size;
        self
    }

    /// Lower-cases text (or not) before splitting it.
    pub fn with_lowercase(mut self, lowercase: bool) -> Self {
        self.lowercase = lowercase;
        self
    }
}

/// The words of `text`: lower-cased when asked, split at white space, and every character
/// that is neither alphanumeric nor white space (punctuation, symbols) made a word of its own,
/// as BERT's basic tokenizer splits punctuation: `"Don't stop!"` -> `don ' t stop !`.
pub fn split_words(text: &str, lowercase: bool) -> Vec<String> {
    let owned;
    let text = if lowercase {
        owned = text.to_lowercase();
        owned.as_str()
    } else {
        text
    };
    let mut words = Vec::new();
    for chunk in text.split_whitespace() {
        let mut start = 0;
        for (at, c) in chunk.char_indices() {
            if !c.is_alphanumeric() {
                if start < at {
                    words.push(chunk[start..at].to_string());
                }
                words.push(c.to_string());
                start = at + c.len_utf8();
            }
        }
        if start < chunk.len() {
            words.push(chunk[start..].to_string());
        }
    }
    words
}

/// A word-level vocabulary: `[PAD]` = 0, `[UNK]` = 1, then the training texts' words by
/// decreasing frequency, ties in alphabetical (code-point) order, as torchtext's
/// `build_vocab_from_iterator` orders them (`sorted(counter.items(), key=lambda x: (-x[1], x[0]))`).
/// A word outside it encodes as `[UNK]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordVocab {
    tokens: Vec<String>,
    index: HashMap<String, u32>,
    config: WordVocabConfig,
}

/// The saved form.
#[derive(Serialize, Deserialize)]
struct VocabFile {
    #[serde(rename = "type")]
    kind: String,
    version: u32,
    config: WordVocabConfig,
    tokens: Vec<String>,
}

impl WordVocab {
    /// Builds the vocabulary of `texts` (the training split's documents; never validation or
    /// test text, whose words would leak into the model's inputs).
    ///
    /// # Errors
    /// [`TextError::Config`] naming `min_freq` (0) or `max_size` (under 2, no room for the
    /// special tokens).
    pub fn build<I, S>(texts: I, config: &WordVocabConfig) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if config.min_freq == 0 {
            return Err(TextError::Config { field: "min_freq", reason: "must be at least 1".into() });
        }
        if let Some(max) = config.max_size.filter(|&m| m < 2) {
            return Err(TextError::Config {
                field: "max_size",
                reason: format!(
                    "{max} leaves no room for [PAD] and [UNK]; it counts them, so use at least 2"
                ),
            });
        }
        let mut counts: HashMap<String, usize> = HashMap::new();
        for text in texts {
            for word in split_words(text.as_ref(), config.lowercase) {
                *counts.entry(word).or_default() += 1;
            }
        }
        let mut words: Vec<(String, usize)> =
            counts.into_iter().filter(|(_, n)| *n >= config.min_freq).collect();
        words.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(max) = config.max_size {
            words.truncate(max - 2);
        }
        let tokens =
            [PAD_TOKEN.to_string(), UNK_TOKEN.to_string()].into_iter().chain(words.into_iter().map(|w| w.0));
        Self::from_tokens(tokens.collect(), config.clone(), None)
    }

    fn from_tokens(tokens: Vec<String>, config: WordVocabConfig, path: Option<&Path>) -> Result<Self> {
        let bad = |reason: String| TextError::Tokenizer { path: path.map(Path::to_path_buf), reason };
        if tokens.first().map(String::as_str) != Some(PAD_TOKEN)
            || tokens.get(1).map(String::as_str) != Some(UNK_TOKEN)
        {
            return Err(bad(format!("`tokens` must start with {PAD_TOKEN} and {UNK_TOKEN}")));
        }
        if u32::try_from(tokens.len()).is_err() {
            return Err(bad(format!("{} tokens do not fit 32-bit ids", tokens.len())));
        }
        let mut index = HashMap::with_capacity(tokens.len());
        for (id, token) in tokens.iter().enumerate() {
            if index.insert(token.clone(), id as u32).is_some() {
                return Err(bad(format!("`tokens` holds {token:?} twice")));
            }
        }
        Ok(WordVocab { tokens, index, config })
    }

    /// Reads a vocabulary saved by [`Tokenizer::save`].
    ///
    /// # Errors
    /// [`TextError::Io`] for an unreadable file, [`TextError::Tokenizer`] naming the file and
    /// field for one that is not a saved vocabulary.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| TextError::Io { path: path.to_path_buf(), error })?;
        Self::from_json(&text, Some(path))
    }

    /// Parses the saved form; `path` names the file in errors.
    pub(crate) fn from_json(text: &str, path: Option<&Path>) -> Result<Self> {
        let bad = |reason: String| TextError::Tokenizer { path: path.map(Path::to_path_buf), reason };
        let file: VocabFile =
            serde_json::from_str(text).map_err(|e| bad(format!("not a word vocabulary: {e}")))?;
        if file.kind != WORD_VOCAB_TYPE || file.version != 1 {
            return Err(bad(format!(
                "`type` {:?} version {} is not {WORD_VOCAB_TYPE:?} version 1",
                file.kind, file.version
            )));
        }
        Self::from_tokens(file.tokens, file.config, path)
    }

    /// Every token, by id.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The settings it was built with.
    pub fn config(&self) -> &WordVocabConfig {
        &self.config
    }

    /// The id of `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.index.get(token).copied()
    }

    /// The token of `id`, if there is one.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }
}

impl Tokenizer for WordVocab {
    /// [`split_words`], then each word's id, [`UNK_ID`] for words outside the vocabulary.
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(split_words(text, self.config.lowercase)
            .iter()
            .map(|w| self.token_to_id(w).unwrap_or(UNK_ID))
            .collect())
    }

    fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    fn pad_id(&self) -> u32 {
        PAD_ID
    }

    fn unk_id(&self) -> Option<u32> {
        Some(UNK_ID)
    }

    fn save(&self, path: &Path) -> Result<()> {
        let file = VocabFile {
            kind: WORD_VOCAB_TYPE.to_string(),
            version: 1,
            config: self.config.clone(),
            tokens: self.tokens.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).map_err(|e| TextError::Write {
            path: path.to_path_buf(),
            error: std::io::Error::other(e.to_string()),
        })?;
        text.push('\n');
        std::fs::write(path, text).map_err(|error| TextError::Write { path: path.to_path_buf(), error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_at_punctuation() {
        assert_eq!(
            split_words("Don't STOP!  Wait...", true),
            ["don", "'", "t", "stop", "!", "wait", ".", ".", "."]
        );
        assert_eq!(split_words("Café, 42ème", false), ["Café", ",", "42ème"]);
        assert!(split_words(" \n", true).is_empty());
    }

    #[test]
    fn frequency_then_alphabet_min_freq_and_max_size() {
        let texts = ["b a c", "a b d", "a e e"];
        // a:3, b:2, e:2, c:1, d:1 -> ties (b, e) and (c, d) alphabetical.
        let all = WordVocab::build(texts, &WordVocabConfig::default()).unwrap();
        assert_eq!(all.tokens(), ["[PAD]", "[UNK]", "a", "b", "e", "c", "d"]);
        let frequent = WordVocab::build(texts, &WordVocabConfig::default().with_min_freq(2)).unwrap();
        assert_eq!(frequent.tokens(), ["[PAD]", "[UNK]", "a", "b", "e"]);
        let small = WordVocab::build(texts, &WordVocabConfig::default().with_max_size(Some(4))).unwrap();
        assert_eq!(small.tokens(), ["[PAD]", "[UNK]", "a", "b"]);
        assert_eq!(small.encode("A e z").unwrap(), [2, UNK_ID, UNK_ID]);
        let err = WordVocab::build(texts, &WordVocabConfig::default().with_max_size(Some(1))).unwrap_err();
        assert!(err.to_string().starts_with("invalid `max_size`"), "{err}");
        assert!(WordVocab::build(texts, &WordVocabConfig::default().with_min_freq(0)).is_err());
    }
}
