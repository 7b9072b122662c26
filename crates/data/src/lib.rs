//! `torchlight-data`: datasets, samplers, seeded splits and the DataLoader.
//!
//! - [`Dataset`] and its adaptors: [`Map`] (`dataset.map(f)` through [`DatasetExt`]),
//!   [`Subset`], [`ConcatDataset`].
//! - Seeded splits: [`random_split`], [`stratified_split`], per-class counts ([`class_counts`]).
//! - Samplers: [`SequentialSampler`], [`RandomSampler`], [`WeightedRandomSampler`],
//!   [`BatchSampler`], [`DistributedSampler`] (a rank's share, with PyTorch's exact
//!   indices) and [`RASampler`] (torchvision's repeated augmentation, its exact indices).
//! - [`DataLoader`]: worker threads, batches in sampler order whatever the worker count,
//!   [`Collate`] into tensors (pinned on request), failing samples as errors or skipped,
//!   data-stall time per epoch ([`EpochStats`]).
//! - What a dataset author needs: [`Rng`] (the generator `get` draws from), [`rng_from_seed`],
//!   `seed_everything` (with `tch`), and the [`rand`] crate for its `Rng` trait
//!   (`use torchlight_data::rand::Rng as _;`).
//!
//! Samples are plain host buffers ([`Array`]), which workers stack and the thread that
//! iterates turns into one tensor per batch, or tch tensors (`Tensor`, `(Tensor, Tensor)`,
//! `(Tensor, i64)`, maps of them), which workers make and stack (`Tensor` is `Send` but not
//! `Sync`, tch-rs issue 752, so tensors move between threads but are never shared).
//!
//! Tensors already in memory (with `tch`): `TensorDataset` gives their rows as samples, like
//! PyTorch's; a dataset of your own holds each tensor as a `HostTensor` (its bytes, `Sync`)
//! and makes the sample's tensors in `get` (`host.row(i)`), with any per-sample logic between.
//!
//! # Features
//! - `tch` (default): tensor batches ([`DefaultCollate`]), pinned memory, `TensorDataset`,
//!   `HostTensor`, `ArrayToTensor`, `seed_everything`; needs libtorch. Without it the crate builds on
//!   `torchlight-base` alone, with no libtorch anywhere: datasets, splits, samplers and the
//!   DataLoader with [`ArrayCollate`], whose `Array` batches can feed any engine.
//! - `cuda-tests`: this crate's GPU tests.
//!
//! # Where this departs from PyTorch
//! - Workers are threads sharing the dataset by reference, not processes with a pickled copy.
//! - Randomness is a pure function of (seed, epoch, index): a [`RandomSampler`]'s epoch `e`
//!   order comes from `epoch_seed(seed, e)` and sample `i`'s augmentation from
//!   `sample_seed(seed, e, i)`, so results do not depend on the worker count, on which epochs
//!   ran before, or on global generator state (no `worker_init_fn` needed).
//! - [`random_split`] requires a seed; its permutation is Torchlight's, not `torch.randperm`'s.
//! - A failing sample need not end the epoch: errors come out per batch, and
//!   [`ErrorPolicy::Skip`] leaves bad samples out and records them.

mod batch_sampler;
mod collate;
mod concat;
mod dataset;
mod distributed_sampler;
mod epoch;
mod error;
#[cfg(feature = "tch")]
mod host_tensor;
mod loader;
mod map;
mod ra_sampler;
mod random;
mod sampler;
mod split;
mod subset;
#[cfg(feature = "tch")]
mod tensor_collate;
#[cfg(feature = "tch")]
mod tensor_dataset;
mod torch_randperm;
mod weighted;
mod worker;

pub use batch_sampler::BatchSampler;
pub use collate::{ArrayCollate, Collate, DefaultCollate};
pub use concat::ConcatDataset;
pub use dataset::Dataset;
pub use distributed_sampler::DistributedSampler;
pub use epoch::{Epoch, EpochStats};
pub use error::{DataError, Result};
#[cfg(feature = "tch")]
pub use host_tensor::HostTensor;
pub use loader::{DataLoader, DataLoaderBuilder, ErrorPolicy};
pub use map::{DatasetExt, Map};
pub use ra_sampler::RASampler;
pub use sampler::{RandomSampler, Sampler, SequentialSampler};
pub use split::{
    random_split, random_split_indices, stratified_split, stratified_split_indices, SplitSizes, STREAM_SPLIT,
};
pub use subset::{class_counts, Subset};
#[cfg(feature = "tch")]
pub use tensor_collate::ArrayToTensor;
#[cfg(feature = "tch")]
pub use tensor_dataset::{TensorDataset, TensorSample};
pub use torch_randperm::Mt19937 as TorchGenerator;
pub use torchlight_base::seed::{self, rng_from_seed, Rng};
pub use torchlight_base::{rand, Array, ArrayError, Buffer};
#[cfg(feature = "tch")]
pub use torchlight_tensor::seed_everything;
pub use weighted::WeightedRandomSampler;
pub use worker::SkippedSample;
