//! `Map`: a dataset whose samples are another dataset's, passed through a function
//! (`dataset.map(f)`, the `transform=` argument of torchvision datasets).

use crate::dataset::Dataset;
use crate::error::Result;
use torchlight_base::seed::Rng;

/// `dataset.map(f)`: each sample of `D` passed through `f`, which may draw randomness from the
/// sample's generator (random augmentation) and may fail.
pub struct Map<D, F> {
    dataset: D,
    f: F,
}

impl<D, F> Map<D, F> {
    /// `dataset` with `f` applied to each sample.
    pub fn new(dataset: D, f: F) -> Self {
        Map { dataset, f }
    }

    /// The dataset underneath.
    pub fn inner(&self) -> &D {
        &self.dataset
    }
}

impl<D, F, T> Dataset for Map<D, F>
where
    D: Dataset,
    F: Fn(D::Item, &mut Rng) -> Result<T> + Send + Sync,
    T: Send + 'static,
{
    type Item = T;

    fn len(&self) -> usize {
        self.dataset.len()
    }

    /// The inner sample, then `f` with the same generator (so the inner dataset's own draws,
    /// if any, come first).
    fn get(&self, index: usize, rng: &mut Rng) -> Result<T> {
        let item = self.dataset.get(index, rng)?;
        (self.f)(item, rng)
    }
}

/// Adaptor methods for every [`Dataset`] (`use torchlight_data::DatasetExt`).
pub trait DatasetExt: Dataset + Sized {
    /// Each sample passed through `f(item, rng)`; see [`Map`].
    fn map<F, T>(self, f: F) -> Map<Self, F>
    where
        F: Fn(Self::Item, &mut Rng) -> Result<T> + Send + Sync,
        T: Send + 'static,
    {
        Map::new(self, f)
    }
}

impl<D: Dataset> DatasetExt for D {}
