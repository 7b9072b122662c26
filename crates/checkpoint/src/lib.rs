//! `torchlight-checkpoint`: save and resume everything a run needs, atomically, in a layout
//! PyTorch reads.
//!
//! A checkpoint is a folder (layout in [`meta`]): `model.safetensors` (the state_dict under
//! PyTorch keys), `training.safetensors` (optimizer and generator states) and `meta.json`
//! (format version, progress, scheduler and GradScaler state, best metric, config, file
//! checksums). [`save`] writes it atomically; [`Checkpoint::load`] verifies it and restores
//! each component; [`update_config`] replaces the config of a saved checkpoint atomically (what
//! `eval --calibrate` uses to store a temperature); [`CheckpointManager`] keeps `last`, `best` and the last N epochs;
//! [`export_weights`] writes the inference weights alone.

mod atomic;
mod checkpoint;
mod error;
mod manager;
pub mod meta;
mod tensor_file;

pub use atomic::{finish_removals, resolve};
pub use checkpoint::{export_weights, read_meta, save, update_config, Checkpoint, Snapshot};
pub use error::{CheckpointError, Result};
pub use manager::{CheckpointManager, Saved};
pub use meta::{Meta, Metric, MetricMode, Progress, FORMAT_VERSION};
