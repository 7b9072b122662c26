//! The text model of a config: one of nn's text classifiers, sized by `[text]`.

use crate::config::TrainConfig;
use torchlight_nn::TextClassifierConfig;

/// The [`TextClassifierConfig`] of `config`'s `[text]` section for a tokenizer of
/// `vocab_size` ids and `num_classes` classes (the transformer's positional table is
/// `text.max_len` long, as long as a batch can be).
pub fn text_classifier_config(
    config: &TrainConfig,
    vocab_size: usize,
    num_classes: usize,
) -> TextClassifierConfig {
    let x = &config.text;
    TextClassifierConfig::new(vocab_size as i64, num_classes as i64)
        .with_embed_dim(x.embed_dim as i64)
        .with_dropout(x.dropout)
        .with_num_filters(x.num_filters as i64)
        .with_hidden_size(x.hidden_size as i64)
        .with_nhead(x.nhead as i64)
        .with_encoder_layers(x.encoder_layers)
        .with_dim_feedforward(x.dim_feedforward as i64)
        .with_max_len(x.max_len as i64)
}
