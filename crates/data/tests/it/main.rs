//! Integration tests of torchlight-data, in one binary because every test binary links
//! libtorch. GPU tests live in `cuda.rs` behind the `cuda-tests` feature.

mod adaptors;
mod collate;
mod common;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod distributed_sampler;
mod failures;
mod loader;
mod samplers;
mod splits;
