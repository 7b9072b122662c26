//! The image-classification recipe on the [`Trainer`](torchlight_train::Trainer): an
//! ImageFolder, a registered architecture with its pretrained backbone and a new head, AdamW and
//! cross-entropy, staged fine-tuning, a run folder; then the test split. `torchlight train`
//! is this recipe.

mod augment;
mod data;
mod evaluate;
mod fit;
mod hub;
mod pretrained_cfg;
mod tta;

pub use crate::resume::RESUME_CHANGEABLE;
pub use augment::{augment_files, augment_split, contact_sheet, save_png, to_u8, Augmented, Draws};
pub(crate) use augment::{finish, round_robin};
pub(crate) use data::class_weights_of;
pub use data::{
    class_weights, eval_preprocessing, loader, open_splits, sharded_loader, train_transform,
    train_transform_for, Loader, Split, Splits,
};
pub use evaluate::{evaluate, evaluate_with_logits, Evaluated};
pub(crate) use fit::{batch_mixing, sync_batch_norm, training_task};
pub use fit::{fit, fit_distributed, resume, resume_distributed};
pub use hub::{load_hub_model, HubModel};
pub use pretrained_cfg::apply_pretrained_cfg;
pub(crate) use pretrained_cfg::with_pretrained_cfg;
pub use tta::{
    average_softmax, evaluate_tta, multi_scale_resizes, view_batch, Tta, TtaEvaluated, TtaView, ViewResult,
    TTA_AVERAGES, TTA_NAMES,
};
