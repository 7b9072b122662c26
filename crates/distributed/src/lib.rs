//! `torchlight-distributed`: data-parallel training on PyTorch's own distributed engine.
//!
//! Collectives are c10d's, the C++ library behind `torch.distributed`, reached through a small
//! C++ shim: process groups over Gloo (CPU; loopback or TCP between machines) or NCCL (GPU,
//! with the `nccl` feature), rendezvous through a `TCPStore`, configured from the environment
//! torchrun, SLURM scripts and Kubernetes' PyTorchJob set.
//!
//! - [`DistEnv`]: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`,
//!   `TORCHELASTIC_USE_AGENT_STORE` (and SLURM's equivalents).
//! - [`ProcessGroup`]: `init_process_group`; [`all_reduce`](ProcessGroup::all_reduce)
//!   (sum, avg, product, min, max), [`broadcast`](ProcessGroup::broadcast),
//!   [`all_gather`](ProcessGroup::all_gather), [`barrier`](ProcessGroup::barrier), each
//!   failing with an error naming the rank and the operation when a peer dies or the timeout
//!   passes. Dropping the last handle destroys the group (`destroy_process_group`).
//! - [`DistributedDataParallel`]: replicas kept identical; gradients averaged in ~25 MiB
//!   buckets after backward; BatchNorm buffers broadcast from rank 0.
//! - [`convert_sync_batchnorm`]: BatchNorm with batch statistics over every rank
//!   ([`SyncBatchNorm`], `torch.nn.SyncBatchNorm`).
//! - [`Launcher`]: N local ranks of a program, like `torchrun --standalone`.
//! - [`DataParallel`] (and `DistributedDataParallel` itself): the `torchlight-train` Trainer's
//!   [`Distributed`](torchlight_train::Distributed) world, so `fit` trains data-parallel.
//!
//! The `DistributedSampler` lives in `torchlight-data`, which needs no collectives.
//!
//! Building needs gloo's C++ headers, which libtorch does not ship: `cargo xtask setup
//! --distributed` fetches Debian's `libgloo-dev` into the per-user cache (see the build script).

mod bucket;
mod ddp;
mod env;
mod error;
mod ffi;
mod group;
mod launch;
mod store;
mod sync_bn;
mod trainer;

pub use ddp::{DdpConfig, DistributedDataParallel};
pub use env::DistEnv;
pub use error::{DistributedError, Result};
pub use group::{Backend, InitOptions, ProcessGroup, ReduceOp, Work, DEFAULT_TIMEOUT};
pub use launch::{LaunchOutcome, Launcher, RankExit};
pub use store::TcpStore;
pub use sync_bn::{convert_sync_batchnorm, revert_sync_batchnorm, SyncBatchNorm};
pub use trainer::DataParallel;
