//! The text model of a config: one of nn's text classifiers, sized by `[text]`; built by name
//! as a `Box<dyn Module>` (what a checkpoint restores into) and seen again as the
//! [`MultiInput`] it is.

use crate::config::{TrainConfig, TEXT_MODELS};
use crate::error::{RecipeError, Result};
use torchlight_nn::{
    BiLstmClassifier, FastText, LayerOptions, Module, MultiInput, TextClassifierConfig, TextCnn,
    TransformerClassifier,
};

/// The `state_dict` prefix of every text classifier's head: the parameters at `optim.lr`
/// (the rest, embeddings and encoders, at `optim.backbone_lr`).
pub const TEXT_HEAD: &str = "fc";

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

/// The text classifier `model.name` names (`fasttext`, `textcnn`, `bilstm`, `transformer`),
/// sized by [`text_classifier_config`], built with `options` (e.g. `skip_init` on a device for
/// a checkpoint to restore into). Its `MultiInput` forward: [`as_multi_input`].
pub fn build_text_model(
    config: &TrainConfig,
    vocab_size: usize,
    num_classes: usize,
    options: LayerOptions,
) -> Result<Box<dyn Module>> {
    let c = text_classifier_config(config, vocab_size, num_classes);
    Ok(match config.model.name.as_str() {
        "fasttext" => Box::new(FastText::new_on(&c, options)),
        "textcnn" => Box::new(TextCnn::new_on(&c, options)),
        "bilstm" => Box::new(BiLstmClassifier::new_on(&c, options)),
        "transformer" => Box::new(TransformerClassifier::new_on(&c, options)),
        other => {
            return Err(RecipeError::InvalidConfig {
                field: "model.name".into(),
                value: other.to_string(),
                reason: format!("not a text model; expected one of {}", TEXT_MODELS.join(", ")),
            })
        }
    })
}

/// `model` as the [`MultiInput`] (ids and lengths) model it is, when it is one of the four
/// text classifiers (e.g. what [`build_text_model`] or `ModelCard::build_model` returned);
/// `None` for any other module.
pub fn as_multi_input(model: &dyn Module) -> Option<&dyn MultiInput> {
    let any = model.as_any();
    if let Some(m) = any.downcast_ref::<FastText>() {
        return Some(m);
    }
    if let Some(m) = any.downcast_ref::<TextCnn>() {
        return Some(m);
    }
    if let Some(m) = any.downcast_ref::<BiLstmClassifier>() {
        return Some(m);
    }
    any.downcast_ref::<TransformerClassifier>().map(|m| m as &dyn MultiInput)
}
