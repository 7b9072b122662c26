//! `torchlight-text`: text-classification data with no libtorch: datasets, tokenizers, batches.
//!
//! - Datasets of `(text, label)` documents: [`TextFolder`] (`root/<class>/*.txt`), with
//!   [`TextSplitFolders`] for a `train/ val/ test/` layout (aclImdb's) and a seeded stratified
//!   validation split when there is no `val/` ([`TextSplits`]); [`TextRecords`] from a CSV or
//!   TSV file ([`read_delimited`]) or a JSON-lines file ([`read_json_lines`]). Unreadable,
//!   non-UTF-8 and empty documents fail their sample naming the file (and line), so the
//!   loader's `ErrorPolicy::Skip` skips and counts them, and [`DocumentReport`] lists them
//!   before training.
//! - Tokenizers behind one trait, [`Tokenizer`]: [`WordVocab`] (a word-level vocabulary of
//!   the training split, torchtext's rules, `[PAD]` = 0 and `[UNK]` = 1) and [`HfTokenizer`]
//!   (Hugging Face `tokenizers`: a `tokenizer.json`, or WordPiece/BPE trained offline). Both
//!   save to a JSON file that travels with the run; [`load_tokenizer`] opens either, and
//!   [`tokenizer_from_json`] the same JSON held in memory (a checkpoint's copy).
//! - Batches: [`Tokenized`] encodes documents in the loader's workers; [`PadCollate`] makes
//!   padded `ids [B, T]` + `lengths [B]` + `mask [B, T]` + labels ([`PaddedBatch`]),
//!   [`BagCollate`] the flat `ids` + `offsets [B]` of `nn.EmbeddingBag` ([`BagBatch`]), both
//!   cutting to `max_len` and counting it ([`Truncation`]); [`BucketSampler`] groups documents
//!   of similar length, deterministically per seed and epoch.
//!
//! Batches are `torchlight_data::Array`s (int64 ids, lengths, offsets and labels; a u8 0/1
//! mask), for a training loop to turn into tensors (`ArrayToTensor` with the data crate's
//! `tch` feature) or to feed another engine.

mod bag_collate;
mod bucket_sampler;
mod delimited;
mod document;
mod error;
mod hf_tokenizer;
mod json_lines;
mod load;
mod pad_collate;
mod records;
mod report;
mod text_folder;
mod text_splits;
mod tokenized;
mod tokenizer;
mod truncation;
mod word_vocab;

pub use bag_collate::{BagBatch, BagCollate};
pub use bucket_sampler::BucketSampler;
pub use delimited::{read_delimited, DelimitedOptions};
pub use document::{is_empty_document, read_document};
pub use error::{Result, TextError};
pub use hf_tokenizer::{HfModel, HfTokenizer, HfTrainConfig};
pub use json_lines::read_json_lines;
pub use load::{load_tokenizer, tokenizer_from_json};
pub use pad_collate::{PadCollate, PaddedBatch};
pub use records::{Columns, TextRecords};
pub use report::{DocumentReport, Location};
pub use text_folder::{TextFolder, TextFolderOptions, TEXT_EXTENSIONS};
pub use text_splits::{read_records, records_files, TextSplitFolders, TextSplits, RECORD_EXTENSIONS};
pub use tokenized::Tokenized;
pub use tokenizer::Tokenizer;
pub use truncation::Truncation;
pub use word_vocab::{
    split_words, WordVocab, WordVocabConfig, PAD_ID, PAD_TOKEN, UNK_ID, UNK_TOKEN, WORD_VOCAB_TYPE,
};
