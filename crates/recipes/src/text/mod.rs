//! The text-classification recipe on the same [`Trainer`](torchlight_train::Trainer), run folder
//! and checkpoints as the image one: a TextFolder (`train/<class>/*.txt`, optional `val/` and
//! `test/`), a word vocabulary built from the training split (or a Hugging Face
//! `tokenizer.json`) saved in the run folder, padded `ids` and `lengths` batches, one of nn's
//! text classifiers (`fasttext`, `textcnn`, `bilstm`, `transformer`) sized by `[text]`; then
//! the test split. `torchlight train --task text` is this recipe.

mod data;
mod fit;
mod model;

pub use data::{
    loader, new_tokenizer, open_splits, run_tokenizer, truncation_of, TextCollate, TextDataset, TextLoader,
    TOKENIZER_FILE, VOCAB_FILE,
};
pub(crate) use fit::HEAD;
pub use fit::{fit, resume};
pub use model::text_classifier_config;
