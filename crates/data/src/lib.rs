//! `torchlight-data`: datasets, samplers, seeded splits and the DataLoader.

mod array;
mod dataset;
mod error;

pub use array::{Array, Buffer};
pub use dataset::Dataset;
pub use error::{DataError, Result};
