//! The `Dataset` trait: a length and an indexed, fallible `get`.

use crate::error::Result;
use torchlight_base::seed::Rng;

/// A map-style dataset, like `torch.utils.data.Dataset`: `len()` samples, each loaded by index.
///
/// `get` takes the random generator the sample's random transforms draw from. The DataLoader
/// seeds it from (loader seed, epoch, index) with [`sample_seed`](crate::seed::sample_seed), so
/// augmentation is the same whatever the worker count and after a resume. Datasets without
/// randomness ignore it.
///
/// Datasets are shared between loader threads by reference (no per-worker copy), hence `Sync`.
/// A sample may be plain buffers ([`Array`](crate::Array)) or, with the `tch` feature, tch
/// tensors: `Tensor` is `Send`, so a worker can make one and hand it over, but not `Sync`, so
/// a dataset cannot *hold* tensors. Hold each as a `HostTensor` (its bytes, `Sync`) and make
/// the sample's tensors in `get` with `host.row(index)`, as `TensorDataset` does; the
/// `HostTensor` docs show a dataset of in-memory tensors with a random flip.
pub trait Dataset: Send + Sync {
    /// One sample, e.g. an image and its label.
    type Item: Send + 'static;

    /// The number of samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Loads sample `index` (`0 <= index < len()`), drawing any randomness from `rng`.
    fn get(&self, index: usize, rng: &mut Rng) -> Result<Self::Item>;
}

/// A shared dataset is a dataset: splits hand out [`Subset`](crate::Subset)s of one
/// `Arc<D>`, and a caller can keep a handle on a dataset it gives to a loader.
impl<D: Dataset + ?Sized> Dataset for std::sync::Arc<D> {
    type Item = D::Item;

    fn len(&self) -> usize {
        (**self).len()
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<Self::Item> {
        (**self).get(index, rng)
    }
}
