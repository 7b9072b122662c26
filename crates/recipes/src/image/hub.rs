//! A Hugging Face Hub model folder as a finished classifier, with no training run: the timm
//! architecture its `config.json` names, every weight loaded (the head too), its classes, and
//! the preprocessing its `pretrained_cfg` gives the recipe, described by a [`ModelCard`] as a
//! checkpoint's is, so `export`, `summary` and `predict` treat both alike.

use crate::card::ModelCard;
use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use crate::model::{check_finite, model_architecture, model_spec};
use std::path::Path;
use tch::{Device, Kind};
use torchlight_nn::{
    canonical_architecture, check_timm_architecture, load_weights, read_hub_folder, to_device, HubFolder,
    LayerOptions, LoadOptions, Module,
};

/// timm's default head (`num_classes` of a `config.json` that does not say).
const TIMM_DEFAULT_CLASSES: usize = 1000;

/// A Hub folder's model, ready to run or export.
pub struct HubModel {
    /// The model in eval-ready form (every tensor from the folder), on the device asked for.
    pub model: Box<dyn Module>,
    /// What a checkpoint's card would say: the config (`model.name`, `model.pretrained` the
    /// folder, the `[data]` preprocessing with `pretrained_cfg` applied) and the class names
    /// (`pretrained_cfg.label_names`, else `"0"`, `"1"`, ...).
    pub card: ModelCard,
    /// The folder as read.
    pub folder: HubFolder,
    /// The line [`apply_pretrained_cfg`](super::apply_pretrained_cfg) printed, if the folder has
    /// a `pretrained_cfg`.
    pub preprocessing_line: Option<String>,
}

/// Loads the Hub folder `dir` as a classifier under `config` (any `[data]` key it sets wins
/// over the folder's `pretrained_cfg`, as in training); `name`, when given, must be the
/// folder's `architecture` or an alias of it ([`torchlight_nn::ARCHITECTURE_ALIASES`]), and is
/// `model.name` (else the folder's `architecture` is). The weights load strictly, head included: the class
/// count is the folder's `num_classes` (timm's 1000 when unset).
///
/// # Errors
/// The folder's ([`read_hub_folder`]), an architecture timm's weights of which do not load,
/// a `model.name` other than the folder's (field `model.name`), `label_names` of another
/// length than `num_classes`, the config's validation, the strict load (naming the keys), and
/// NaN or Inf in the weights (naming the tensor).
pub fn load_hub_model(
    mut config: TrainConfig,
    name: Option<&str>,
    dir: &Path,
    device: Device,
) -> Result<HubModel> {
    let folder = read_hub_folder(dir)?;
    let arch_name = folder.config.architecture.clone();
    check_timm_architecture(&arch_name)?;
    match name {
        Some(name) if canonical_architecture(name) != canonical_architecture(&arch_name) => {
            return Err(RecipeError::InvalidConfig {
                field: "model.name".into(),
                value: name.to_string(),
                reason: format!(
                    "{} is a `{arch_name}` (its config.json's `architecture`); give --model {arch_name} or leave it out",
                    dir.display()
                ),
            })
        }
        // An alias given (`vit_s_16` for a `vit_small_patch16_224` folder) names the model.
        given => config.model.name = given.unwrap_or(&arch_name).to_string(),
    }
    config.model.pretrained = Some(dir.to_path_buf());
    let preprocessing_line = super::apply_pretrained_cfg(&mut config)?;
    config.data.image_size = Some(config.data.image_size());
    config.validate()?;
    crate::model::check_eval_size(&config)?;
    let num_classes = folder.config.num_classes.map_or(TIMM_DEFAULT_CLASSES, |n| n as usize);
    let classes = match folder.config.pretrained_cfg.as_ref().and_then(|c| c.label_names.clone()) {
        Some(names) if names.len() == num_classes => names,
        Some(names) => {
            return Err(RecipeError::InvalidConfig {
                field: "pretrained_cfg.label_names".into(),
                value: format!("{} names", names.len()),
                reason: format!("{}: num_classes is {num_classes}", dir.join("config.json").display()),
            })
        }
        None => (0..num_classes).map(|i| i.to_string()).collect(),
    };
    let arch = model_architecture(&config)?;
    let model = arch
        .build(model_spec(&config, num_classes), LayerOptions::new(Kind::Float, Device::Cpu).skip_init())?;
    let report = load_weights(model.as_ref(), dir, &LoadOptions::strict().strip_wrappers())?;
    check_finite(model.as_ref(), &report, dir)?;
    to_device(model.as_ref(), device);
    let card = ModelCard { config, classes, schedule_start: 0, tokenizer: None, temperature: None };
    Ok(HubModel { model, card, folder, preprocessing_line })
}
