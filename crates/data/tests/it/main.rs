//! Integration tests of torchlight-data, in one binary because every test binary links
//! libtorch. GPU tests live in `cuda.rs` behind the `cuda-tests` feature; tests of tensor
//! batches need the `tch` feature, and the rest also run without it (no libtorch at all).

#[cfg(feature = "tch")]
mod adaptors;
mod array_batches;
#[cfg(feature = "tch")]
mod collate;
mod common;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod distributed_sampler;
#[cfg(feature = "tch")]
mod failures;
#[cfg(feature = "tch")]
mod loader;
mod ra_sampler;
mod samplers;
mod splits;
#[cfg(feature = "tch")]
mod tensor_samples;
