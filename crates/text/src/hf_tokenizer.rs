//! `HfTokenizer`: a Hugging Face `tokenizers` tokenizer, loaded from a `tokenizer.json` or
//! trained offline (WordPiece or BPE) on the training split.

use crate::error::{Result, TextError};
use crate::tokenizer::Tokenizer;
use crate::word_vocab::{PAD_TOKEN, UNK_TOKEN};
use std::path::{Path, PathBuf};
use tokenizers::decoders::bpe::BPEDecoder;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainerBuilder};
use tokenizers::models::TrainerWrapper;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PaddingParams, PostProcessorWrapper,
    PreTokenizerWrapper, TokenizerBuilder,
};

/// The subword model [`HfTokenizer::train`] learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HfModel {
    /// BERT's WordPiece (`##` continuation prefix).
    #[default]
    WordPiece,
    /// Byte-pair encoding over characters, words ending in `</w>` (the original BPE).
    Bpe,
}

/// How [`HfTokenizer::train`] learns a tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfTrainConfig {
    /// WordPiece (default) or BPE.
    pub model: HfModel,
    /// The vocabulary size aimed at, special tokens included (default 30 000, Hugging Face's
    /// trainers' default); a small corpus may give fewer.
    pub vocab_size: usize,
    /// A pair must occur this often to be merged (default 2; Hugging Face's trainers: 0).
    pub min_frequency: u64,
    /// Whether text is lower-cased (default true, as `bert-base-uncased`).
    pub lowercase: bool,
}

impl Default for HfTrainConfig {
    fn default() -> Self {
        HfTrainConfig { model: HfModel::WordPiece, vocab_size: 30_000, min_frequency: 2, lowercase: true }
    }
}

impl HfTrainConfig {
    /// Learns `model`.
    pub fn with_model(mut self, model: HfModel) -> Self {
        self.model = model;
        self
    }

    /// Aims at `vocab_size` entries.
    pub fn with_vocab_size(mut self, vocab_size: usize) -> Self {
        self.vocab_size = vocab_size;
        self
    }

    /// Merges pairs seen at least `min_frequency` times.
    pub fn with_min_frequency(mut self, min_frequency: u64) -> Self {
        self.min_frequency = min_frequency;
        self
    }

    /// Lower-cases text (or not).
    pub fn with_lowercase(mut self, lowercase: bool) -> Self {
        self.lowercase = lowercase;
        self
    }
}

/// A Hugging Face tokenizer: its `tokenizer.json` is the file that travels with the model.
///
/// [`encode`](Tokenizer::encode) is `tokenizer.encode(text, add_special_tokens=True).ids`
/// with the file's padding switched off (the collates pad) and its truncation kept.
pub struct HfTokenizer {
    /// As loaded or trained; what [`Tokenizer::save`] writes.
    inner: tokenizers::Tokenizer,
    /// `inner` without padding, for `encode`.
    encoder: tokenizers::Tokenizer,
    pad_id: u32,
    unk_id: Option<u32>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .field("pad_id", &self.pad_id)
            .field("unk_id", &self.unk_id)
            .finish()
    }
}

impl HfTokenizer {
    /// Loads a `tokenizer.json`. The padding id is the file's padding setting's, else the id
    /// of `[PAD]` or `<pad>`; the unknown id is the model's unknown token's, else that of
    /// `[UNK]` or `<unk>`, else none (byte-level BPE).
    ///
    /// # Errors
    /// [`TextError::Io`] for an unreadable file; [`TextError::Tokenizer`] naming it when it is
    /// not a tokenizer Hugging Face reads, or has no padding token (then use
    /// [`HfTokenizer::from_file_with_pad_token`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        Self::open(path.as_ref(), None)
    }

    /// [`HfTokenizer::from_file`] with `pad_token` as the padding token (e.g. GPT-2's
    /// `<|endoftext|>`), which must be in the vocabulary.
    pub fn from_file_with_pad_token(path: impl AsRef<Path>, pad_token: &str) -> Result<Self> {
        Self::open(path.as_ref(), Some(pad_token))
    }

    fn open(path: &Path, pad_token: Option<&str>) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| TextError::Io { path: path.to_path_buf(), error })?;
        Self::from_json(&text, Some(path), pad_token)
    }

    /// Parses a `tokenizer.json`'s text; `path` names the file in errors.
    pub(crate) fn from_json(text: &str, path: Option<&Path>, pad_token: Option<&str>) -> Result<Self> {
        let inner = text.parse::<tokenizers::Tokenizer>().map_err(|e| TextError::Tokenizer {
            path: path.map(Path::to_path_buf),
            reason: format!("not a Hugging Face tokenizer: {}", one_line(&e.to_string())),
        })?;
        Self::wrap(inner, path.map(Path::to_path_buf), pad_token)
    }

    fn wrap(inner: tokenizers::Tokenizer, path: Option<PathBuf>, pad_token: Option<&str>) -> Result<Self> {
        let bad = |reason: String| TextError::Tokenizer { path: path.clone(), reason };
        let pad_id = match pad_token {
            Some(token) => {
                inner.token_to_id(token).ok_or_else(|| bad(format!("the padding token {token:?} is not in its vocabulary")))?
            }
            None => match inner.get_padding() {
                Some(padding) => padding.pad_id,
                None => first_id(&inner, &[PAD_TOKEN, "<pad>"]).ok_or_else(|| {
                    bad(format!(
                        "no padding token: no padding settings and neither {PAD_TOKEN} nor <pad> in its vocabulary \
                         (name one with `from_file_with_pad_token`)"
                    ))
                })?,
            },
        };
        let model_unk = match inner.get_model() {
            ModelWrapper::BPE(bpe) => bpe.unk_token.clone(),
            ModelWrapper::WordPiece(wp) => Some(wp.unk_token.clone()),
            ModelWrapper::WordLevel(wl) => Some(wl.unk_token.clone()),
            ModelWrapper::Unigram(_) => None,
        };
        let unk_id =
            model_unk.and_then(|t| inner.token_to_id(&t)).or_else(|| first_id(&inner, &[UNK_TOKEN, "<unk>"]));
        let mut encoder = inner.clone();
        encoder.with_padding(None);
        Ok(HfTokenizer { inner, encoder, pad_id, unk_id, path })
    }

    /// Learns a tokenizer from `texts` (the training split's documents), offline: BERT's
    /// normalizer (`lowercase` as configured, accents kept) and pre-tokenizer (white space and
    /// punctuation), then a WordPiece or BPE model whose first entries are `[PAD]` (0) and
    /// `[UNK]` (1). The padding setting (`[PAD]`, id 0) is stored in the tokenizer, so a
    /// Python user's `Tokenizer.from_file` pads as this crate does.
    ///
    /// # Errors
    /// [`TextError::Config`] naming `vocab_size` when it is under 2; [`TextError::Tokenizer`]
    /// when training fails.
    pub fn train<I, S>(texts: I, config: &HfTrainConfig) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        I::IntoIter: Send,
        S: AsRef<str> + Send,
    {
        if config.vocab_size < 2 {
            return Err(TextError::Config {
                field: "vocab_size",
                reason: format!("{} leaves no room for [PAD] and [UNK]", config.vocab_size),
            });
        }
        let bad = |e: tokenizers::Error| TextError::Tokenizer {
            path: None,
            reason: format!("training failed: {}", one_line(&e.to_string())),
        };
        let specials = vec![AddedToken::from(PAD_TOKEN, true), AddedToken::from(UNK_TOKEN, true)];
        let (model, decoder, mut trainer): (ModelWrapper, DecoderWrapper, TrainerWrapper) = match config.model
        {
            HfModel::WordPiece => (
                WordPiece::builder().unk_token(UNK_TOKEN.to_string()).build().map_err(bad)?.into(),
                WordPieceDecoder::default().into(),
                WordPieceTrainerBuilder::new()
                    .vocab_size(config.vocab_size)
                    .min_frequency(config.min_frequency)
                    .special_tokens(specials)
                    .show_progress(false)
                    .build()
                    .into(),
            ),
            HfModel::Bpe => (
                BPE::builder()
                    .unk_token(UNK_TOKEN.to_string())
                    .end_of_word_suffix("</w>".to_string())
                    .build()
                    .map_err(bad)?
                    .into(),
                BPEDecoder::new("</w>".to_string()).into(),
                BpeTrainerBuilder::new()
                    .vocab_size(config.vocab_size)
                    .min_frequency(config.min_frequency)
                    .special_tokens(specials)
                    .end_of_word_suffix("</w>".to_string())
                    .show_progress(false)
                    .build()
                    .into(),
            ),
        };
        let normalizer = BertNormalizer::new(true, true, Some(false), config.lowercase);
        let mut built = TokenizerBuilder::<
            ModelWrapper,
            NormalizerWrapper,
            PreTokenizerWrapper,
            PostProcessorWrapper,
            DecoderWrapper,
        >::new()
        .with_model(model)
        .with_normalizer(Some(normalizer.into()))
        .with_pre_tokenizer(Some(BertPreTokenizer.into()))
        .with_decoder(Some(decoder))
        .build()
        .map_err(bad)?;
        built.train(&mut trainer, texts.into_iter()).map_err(bad)?;
        built.with_padding(Some(PaddingParams {
            pad_id: crate::word_vocab::PAD_ID,
            pad_token: PAD_TOKEN.to_string(),
            ..PaddingParams::default()
        }));
        Self::wrap(built.into(), None, None)
    }

    /// The Hugging Face tokenizer itself (offsets, decoding, batch encoding).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The file it was loaded from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The text of `ids`, special tokens left out.
    ///
    /// # Errors
    /// [`TextError::Tokenizer`] when an id is outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| self.error(e))
    }

    fn error(&self, e: tokenizers::Error) -> TextError {
        TextError::Tokenizer { path: self.path.clone(), reason: one_line(&e.to_string()) }
    }
}

fn first_id(tokenizer: &tokenizers::Tokenizer, tokens: &[&str]) -> Option<u32> {
    tokens.iter().find_map(|t| tokenizer.token_to_id(t))
}

/// Dependency messages kept to one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.encoder.encode(text, true).map_err(|e| self.error(e))?.get_ids().to_vec())
    }

    /// Added tokens included (Hugging Face's `get_vocab_size(with_added_tokens=True)`).
    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn pad_id(&self) -> u32 {
        self.pad_id
    }

    fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }

    fn save(&self, path: &Path) -> Result<()> {
        self.inner.save(path, true).map_err(|e| TextError::Write {
            path: path.to_path_buf(),
            error: std::io::Error::other(one_line(&e.to_string())),
        })
    }
}
