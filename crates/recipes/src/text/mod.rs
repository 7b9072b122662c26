//! The text-classification recipe on the same [`Trainer`](torchlight_train::Trainer), run folder
//! and checkpoints as the image one: a TextFolder (`train/<class>/*.txt`, optional `val/` and
//! `test/`), a word vocabulary built from the training split (or a Hugging Face
//! `tokenizer.json`) saved in the run folder, padded `ids` and `lengths` batches, one of nn's
//! text classifiers (`fasttext`, `textcnn`, `bilstm`, `transformer`) sized by `[text]`; then
//! the test split. `torchlight train --task text` is this recipe; [`fit_distributed`] and
//! [`resume_distributed`] run it as one rank of a data-parallel run (`--nproc N`), each rank on
//! its shard of the documents ([`sharded_loader`]).
//!
//! After training: every checkpoint's [`ModelCard`](crate::ModelCard) carries the tokenizer
//! ([`CardTokenizer`](crate::CardTokenizer)), so a checkpoint folder alone rebuilds the model
//! (`ModelCard::build_model`, seen as [`MultiInput`](torchlight_nn::MultiInput) through
//! [`as_multi_input`]) and its inputs; [`evaluate`] a TextFolder with the recipe's loader
//! ([`eval_loader`]) and the Trainer's evaluation loop, or classify one document
//! ([`document_inputs`], [`text_logits`]), as `torchlight eval` and `predict` do.

mod data;
mod fit;
mod infer;
mod model;

pub use data::{
    check_documents, loader, new_tokenizer, open_splits, run_tokenizer, sharded_loader, truncation_of,
    TextCollate, TextDataset, TextLoader, TOKENIZER_FILE, VOCAB_FILE,
};
pub(crate) use fit::HEAD;
pub use fit::{fit, fit_distributed, resume, resume_distributed};
pub use infer::{
    document_inputs, eval_loader, evaluate, evaluate_with_logits, open_eval_folder, text_logits, val_loader,
};
pub use model::{as_multi_input, build_text_model, text_classifier_config, TEXT_HEAD};
