//! `torchlight-base`: what Torchlight's data side needs without libtorch.
//!
//! - [`Rng`] and the derived seeds ([`seed`]): every shuffle, split and augmentation is a pure
//!   function of (base seed, epoch, index), so results do not depend on the worker count.
//! - [`Array`] and [`Buffer`]: plain row-major host buffers with a shape, which loader
//!   workers produce and stack; `torchlight-data` turns them into tch tensors (its `tch`
//!   feature), and a user of another engine (burn, candle, ort) reads the buffer directly.
//!
//! No libtorch, no `unsafe`: `torchlight-vision` and `torchlight-data` without its `tch`
//! feature build on this alone.
//!
//! ```
//! use torchlight_base::seed::{rng_from_seed, sample_seed};
//! use torchlight_base::{rand::Rng as _, Array};
//!
//! // Sample 17 of epoch 3 draws the same numbers on every run and in every worker.
//! let mut rng = rng_from_seed(sample_seed(42, 3, 17));
//! let noise: Vec<f32> = (0..6).map(|_| rng.random::<f32>()).collect();
//! let a = Array::from_f32(noise, vec![2, 3])?;
//! let batch = Array::stack(&[(17, &a), (18, &a)], None)?;
//! assert_eq!(batch.shape, [2, 2, 3]);
//! # Ok::<(), torchlight_base::ArrayError>(())
//! ```

mod array;
mod error;
pub mod seed;

pub use array::{Array, Buffer};
pub use error::ArrayError;
pub use seed::{global_seed, rng_from_seed, set_global_seed, Rng};

/// The `rand` crate [`Rng`] implements, for its `Rng` extension trait
/// (`use torchlight_base::rand::Rng as _;` brings `rng.random::<f32>()` into scope).
pub use rand;

/// The README's example, compiled as a doc test so it cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
