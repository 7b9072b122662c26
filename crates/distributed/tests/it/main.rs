//! Integration tests of torchlight-distributed, in one binary because every test binary links
//! libtorch. Multi-rank tests start their ranks as this same binary, filtered to the single
//! test `ranks::entry`, through the crate's own `Launcher` (see `common.rs` and `ranks.rs`);
//! every launch hosts its store on a free port, so tests run in parallel without collisions.

mod collectives;
mod common;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod ddp;
mod failures;
mod ranks;
mod shim_rule;
mod sync_bn;
mod torchrun;
mod trainer;
