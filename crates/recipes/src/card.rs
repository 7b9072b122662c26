//! `ModelCard`: what a checkpoint's `config` holds beyond the weights, so that eval, predict
//! and export rebuild the model and its preprocessing from the checkpoint alone (for a text
//! run, its tokenizer too: [`CardTokenizer`]).

use crate::config::{TaskKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::model::{model_architecture, model_spec};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use tch::{Device, Kind};
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::{LayerOptions, Module};
use torchlight_text::{tokenizer_from_json, Tokenizer};

/// What the checkpoint's `config` holds beyond the TrainConfig, so eval/predict/export can
/// rebuild the model and its preprocessing from a checkpoint alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The effective training config.
    pub config: TrainConfig,
    /// Class names, in index order.
    pub classes: Vec<String>,
    /// The epoch the lr schedule started at: 0, or where a resumed run with more epochs
    /// restarted it (`train.extend_schedule = "restart"`).
    #[serde(default)]
    pub schedule_start: u64,
    /// A text run's tokenizer, whole, so the checkpoint folder alone tokenizes as training
    /// did; `None` for image runs (and left out of their JSON, which reads as before) and for
    /// text checkpoints saved before tokenizers travelled (then [`ModelCard::from_checkpoint`]
    /// takes the one of the run folder the checkpoint sits in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<CardTokenizer>,
    /// The temperature `torchlight eval --calibrate` fitted on the validation split
    /// (temperature scaling, Guo et al. 2017), which predict and export divide the logits by;
    /// `None` for an uncalibrated checkpoint (left out of its JSON, which reads as before),
    /// whose logits are used as they are. Training never writes it: a checkpoint saved over
    /// holds new weights, uncalibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// The tokenizer a text checkpoint carries: the JSON its run folder saved ([`load_tokenizer`]'s
/// file), under the `tokenizer` key of the checkpoint's `meta.json` `config`.
///
/// [`load_tokenizer`]: torchlight_text::load_tokenizer
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardTokenizer {
    /// The file it is saved as in the run folder: [`VOCAB_FILE`](crate::text::VOCAB_FILE) for
    /// the built-in word vocabulary, [`TOKENIZER_FILE`](crate::text::TOKENIZER_FILE) for a
    /// Hugging Face tokenizer.
    pub file: String,
    /// Its number of ids: the rows of the model's embedding table.
    pub vocab_size: usize,
    /// The file's JSON (a word vocabulary with `"type": "torchlight-word-vocab"`, or a Hugging
    /// Face `tokenizer.json`), as [`torchlight_text::tokenizer_from_json`] reads it.
    pub json: serde_json::Value,
}

impl CardTokenizer {
    /// The card's copy of `tokenizer`, saved at `saved` (its file in the run folder).
    pub fn of_saved(tokenizer: &dyn Tokenizer, saved: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(saved).map_err(|e| RecipeError::io(saved, e))?;
        let json = serde_json::from_str(&text)
            .map_err(|e| RecipeError::io(saved, std::io::Error::other(format!("not JSON: {e}"))))?;
        let file = saved.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        Ok(CardTokenizer { file, vocab_size: tokenizer.vocab_size(), json })
    }

    /// The tokenizer itself, read from the JSON (nothing read from disk); `origin` names where
    /// the card came from in errors. A vocabulary size other than the recorded one is an error.
    pub fn load(&self, origin: &Path) -> Result<Arc<dyn Tokenizer>> {
        let tokenizer: Arc<dyn Tokenizer> =
            Arc::from(tokenizer_from_json(&self.json.to_string(), Some(origin))?);
        if tokenizer.vocab_size() != self.vocab_size {
            return Err(RecipeError::InvalidConfig {
                field: "tokenizer.vocab_size".into(),
                value: self.vocab_size.to_string(),
                reason: format!(
                    "{}: the tokenizer it carries has {} ids",
                    origin.display(),
                    tokenizer.vocab_size()
                ),
            });
        }
        Ok(tokenizer)
    }
}

impl ModelCard {
    /// Reads the card from a checkpoint's metadata. A text card without its tokenizer (saved
    /// before tokenizers travelled) takes the one of the run folder the checkpoint sits in
    /// (`RUN/checkpoints/NAME`), when there is one.
    pub fn from_checkpoint(checkpoint: &Checkpoint) -> Result<Self> {
        let mut card: ModelCard = serde_json::from_value(checkpoint.meta.config.clone()).map_err(|e| {
            RecipeError::InvalidConfig {
                field: "checkpoint config".into(),
                value: checkpoint.dir.display().to_string(),
                reason: format!("not a Torchlight training checkpoint: {e}"),
            }
        })?;
        if card.task() == TaskKind::Text && card.tokenizer.is_none() {
            if let Some(run) = checkpoint.dir.parent().and_then(Path::parent) {
                if let Ok((tokenizer, path)) = crate::text::run_tokenizer(run) {
                    card.tokenizer = Some(CardTokenizer::of_saved(tokenizer.as_ref(), &path)?);
                }
            }
        }
        Ok(card)
    }

    /// The task the model was trained for (`train.task`).
    pub fn task(&self) -> TaskKind {
        self.config.train.task
    }

    /// The tokenizer of a text card, from the JSON it carries; `origin` (the checkpoint
    /// folder) names it in errors. An image card, or a text card without one, is an error
    /// that says so.
    pub fn text_tokenizer(&self, origin: &Path) -> Result<Arc<dyn Tokenizer>> {
        self.card_tokenizer(origin)?.load(origin)
    }

    fn card_tokenizer(&self, origin: &Path) -> Result<&CardTokenizer> {
        if self.task() != TaskKind::Text {
            return Err(RecipeError::RunDir {
                path: origin.to_path_buf(),
                reason: format!("a checkpoint of an {} model, which has no tokenizer", self.task().name()),
            });
        }
        self.tokenizer.as_ref().ok_or_else(|| RecipeError::RunDir {
            path: origin.to_path_buf(),
            reason: "a text checkpoint without its tokenizer (saved before checkpoints carried it) outside its run folder: \
                     copy the run folder's vocab.json or tokenizer.json beside checkpoints/, or pass the run folder"
                .into(),
        })
    }

    /// Builds the model this card describes, uninitialised, on `device` (each tensor allocated
    /// once there): restore the checkpoint into it. An image card builds `model.name` of the
    /// image architectures; a text card the text classifier `model.name` names, sized by the
    /// `[text]` section and its tokenizer's vocabulary (its `MultiInput` forward through
    /// [`crate::text::as_multi_input`]).
    pub fn build_model(&self, device: Device) -> Result<Box<dyn Module>> {
        let options = LayerOptions::new(Kind::Float, device).skip_init();
        if self.task() == TaskKind::Text {
            let vocab_size = self.card_tokenizer(Path::new("the model card"))?.vocab_size;
            return crate::text::build_text_model(&self.config, vocab_size, self.classes.len(), options);
        }
        let arch = model_architecture(&self.config)?;
        Ok(arch.build(model_spec(&self.config, self.classes.len()), options)?)
    }

    /// The `state_dict` prefix of the model's head.
    pub fn head(&self) -> Result<&'static str> {
        if self.task() == TaskKind::Text {
            return Ok(crate::text::TEXT_HEAD);
        }
        Ok(model_architecture(&self.config)?.head())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(task: TaskKind) -> ModelCard {
        let mut config = TrainConfig::default();
        config.train.task = task;
        ModelCard {
            config,
            classes: vec!["a".into(), "b".into()],
            schedule_start: 0,
            tokenizer: None,
            temperature: None,
        }
    }

    #[test]
    fn an_image_card_serialises_as_before_and_an_old_card_still_reads() {
        let image = card(TaskKind::Image);
        let json = serde_json::to_value(&image).unwrap();
        assert!(json.get("tokenizer").is_none(), "an image card has no tokenizer key: {json}");
        assert!(json.get("temperature").is_none(), "an uncalibrated card has no temperature key: {json}");
        // A card written before `tokenizer` (and `schedule_start`) existed.
        let mut old = json.clone();
        old.as_object_mut().unwrap().remove("schedule_start");
        let back: ModelCard = serde_json::from_value(old).unwrap();
        assert_eq!(back, image);
    }

    #[test]
    fn a_text_card_carries_its_tokenizer_whole() {
        let dir = tempfile::tempdir().unwrap();
        let vocab = torchlight_text::WordVocab::build(
            ["good film", "bad film", "good plot"],
            &torchlight_text::WordVocabConfig::default(),
        )
        .unwrap();
        let saved = dir.path().join(crate::text::VOCAB_FILE);
        vocab.save(&saved).unwrap();
        let mut text = card(TaskKind::Text);
        text.tokenizer = Some(CardTokenizer::of_saved(&vocab, &saved).unwrap());
        std::fs::remove_file(&saved).unwrap();
        let json = serde_json::to_string(&text).unwrap();
        let back: ModelCard = serde_json::from_str(&json).unwrap();
        assert_eq!(back, text);
        let t = back.tokenizer.as_ref().unwrap();
        assert_eq!((t.file.as_str(), t.vocab_size), ("vocab.json", vocab.vocab_size()));
        let loaded = back.text_tokenizer(dir.path()).unwrap();
        assert_eq!(loaded.encode("good plot twist").unwrap(), vocab.encode("good plot twist").unwrap());

        let err = card(TaskKind::Image).text_tokenizer(Path::new("ckpt")).err().unwrap().to_string();
        assert!(err.contains("ckpt: a checkpoint of an image model"), "{err}");
        let err = card(TaskKind::Text).text_tokenizer(Path::new("ckpt")).err().unwrap().to_string();
        assert!(err.contains("ckpt: a text checkpoint without its tokenizer"), "{err}");
        let mut wrong = text.clone();
        wrong.tokenizer.as_mut().unwrap().vocab_size += 1;
        let err = wrong.text_tokenizer(Path::new("ckpt")).err().unwrap().to_string();
        assert!(err.contains("tokenizer.vocab_size") && err.contains("ids"), "{err}");
    }
}
