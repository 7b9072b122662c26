//! The seed workflow as a recipe on the [`Trainer`](crate::Trainer): an ImageFolder, a
//! registered architecture with its pretrained backbone and a new head, AdamW and
//! cross-entropy, staged fine-tuning, a run folder; then the test split. `torchlight train`
//! is this recipe.

mod data;
mod fit;
mod model;

pub use data::{
    class_weights, eval_resize, eval_transform, loader, open_splits, sharded_loader, train_transform, Loader,
    Split, Splits,
};
pub use fit::{evaluate, fit, fit_distributed, resume, resume_distributed, RunSummary, RESUME_CHANGEABLE};
pub use model::{
    build_model, build_optimizer, build_scheduler, model_architecture, pretrained_load_options, ModelCard,
};
