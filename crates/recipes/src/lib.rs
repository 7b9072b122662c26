//! `torchlight-recipes`: the recipes behind `torchlight train`, built on the public API of
//! `torchlight-train`'s [`Trainer`](torchlight_train::Trainer).
//!
//! - [`TrainConfig`]: every hyperparameter of a run in one TOML file, overridable by dotted key
//!   ([`TrainConfig::set`]) and validated with the field named ([`TrainConfig::validate`]).
//! - [`image`]: image classification, from an ImageFolder (`train/`, optional `val/` and
//!   `test/`) to a run folder (`runs/exp_001`: `config.toml`, `metrics.csv`, TensorBoard
//!   events, `curves.png`, `checkpoints/`, `confusion_matrix.png`, `summary.json`), resumable
//!   exactly and data-parallel.
//! - [`text`]: text classification from a TextFolder, with the same Trainer, run folder,
//!   checkpoints and resume, and the tokenizer saved in the run folder (`train.task = "text"`).
//! - What recipes share: the model of a config ([`build_model`]), its optimizer and schedule
//!   ([`param_groups`], [`build_optimizer`], [`build_scheduler`], [`build_plateau`]), the [`ModelCard`] a checkpoint carries, the
//!   [`RunSummary`] and the numbered [`RunDir`].
//! - [`doctor`](mod@doctor): the "why does it not train" checklist, cheapest check first, for
//!   image and text configs.
//! - [`synthetic`]: the deterministic image sets of the demo and the tests.

mod card;
mod config;
pub mod doctor;
mod error;
pub mod image;
mod model;
mod optimizer;
mod resume;
mod run_dir;
mod summary;
pub mod synthetic;
pub mod text;
pub mod tune;

pub use card::{CardTokenizer, ModelCard};
pub use config::{format_lr, set_toml_value};
pub use config::{
    AutoAugmentKind, ClassWeights, ClassWeightsKind, CropMode, DataConfig, ExtendSchedule, Interpolation,
    LoopConfig, ModelConfig, OptimConfig, OptimizerKind, SamplerKind, SchedulerConfig, TaskKind, TextConfig,
    TrainConfig, CONFIG_KEYS, DEFAULT_IMAGE_SIZE, MAX_CLASSES, MAX_IMAGE_SIZE, TEXT_MODELS,
};
pub use doctor::{doctor, DoctorOptions, DoctorReport, Finding, Status};
pub use error::{RecipeError, Result};
pub use model::{
    build_model, check_batch_norm_batches, check_eval_size, model_architecture, pretrained_load_options,
};
pub use optimizer::{build_optimizer, build_plateau, build_scheduler, param_groups};
pub use run_dir::RunDir;
pub use summary::{selected_checkpoint, ParamGroupSummary, RunSummary};
