//! `ModelCard`: what a checkpoint's `config` holds beyond the weights, so that eval, predict
//! and export rebuild the model and its preprocessing from the checkpoint alone.

use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use crate::model::{model_architecture, model_spec};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::{LayerOptions, Module};

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
}

impl ModelCard {
    /// Reads the card from a checkpoint's metadata.
    pub fn from_checkpoint(checkpoint: &Checkpoint) -> Result<Self> {
        serde_json::from_value(checkpoint.meta.config.clone()).map_err(|e| RecipeError::InvalidConfig {
            field: "checkpoint config".into(),
            value: checkpoint.dir.display().to_string(),
            reason: format!("not a Torchlight training checkpoint: {e}"),
        })
    }

    /// Builds the model this card describes, uninitialised, on `device` (each tensor allocated
    /// once there): restore the checkpoint into it.
    pub fn build_model(&self, device: Device) -> Result<Box<dyn Module>> {
        let arch = model_architecture(&self.config)?;
        let options = LayerOptions::new(Kind::Float, device).skip_init();
        Ok(arch.build(model_spec(&self.config, self.classes.len()), options)?)
    }

    /// The `state_dict` prefix of the model's head.
    pub fn head(&self) -> Result<&'static str> {
        Ok(model_architecture(&self.config)?.head())
    }
}
