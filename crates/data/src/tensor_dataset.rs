//! `TensorDataset`: samples cut from in-memory tensors along their first dimension, like
//! `torch.utils.data.TensorDataset`, held as [`HostTensor`]s so the dataset is `Sync`.

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::host_tensor::HostTensor;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use tch::Tensor;
use torchlight_base::Rng;

/// What a [`TensorDataset`] is built from and what each of its samples is: one tensor, a pair
/// (input, target), or a map of named tensors. Each has a [`DefaultCollate`](crate::DefaultCollate)
/// that stacks samples back into batches.
pub trait TensorSample: Sized + Send + 'static {
    /// The tensors with their names: `0`, `1` for tuple positions, the keys for a map.
    fn into_named(self) -> Vec<(String, Tensor)>;
    /// A sample from one row of each tensor, in the order and with the names of
    /// [`into_named`](TensorSample::into_named).
    fn from_named(rows: Vec<(String, Tensor)>) -> Self;
}

impl TensorSample for Tensor {
    fn into_named(self) -> Vec<(String, Tensor)> {
        vec![("0".into(), self)]
    }

    fn from_named(rows: Vec<(String, Tensor)>) -> Self {
        rows.into_iter().next().map(|(_, t)| t).expect("one column")
    }
}

impl TensorSample for (Tensor, Tensor) {
    fn into_named(self) -> Vec<(String, Tensor)> {
        vec![("0".into(), self.0), ("1".into(), self.1)]
    }

    fn from_named(rows: Vec<(String, Tensor)>) -> Self {
        let mut rows = rows.into_iter().map(|(_, t)| t);
        let (Some(x), Some(y)) = (rows.next(), rows.next()) else { unreachable!("two columns") };
        (x, y)
    }
}

impl TensorSample for BTreeMap<String, Tensor> {
    fn into_named(self) -> Vec<(String, Tensor)> {
        self.into_iter().collect()
    }

    fn from_named(rows: Vec<(String, Tensor)>) -> Self {
        rows.into_iter().collect()
    }
}

/// `torch.utils.data.TensorDataset`: sample `i` is row `i` of each tensor it was built from,
/// e.g. `(x[i], y[i])` for `TensorDataset::new((x, y))`.
///
/// The tensors are copied once into [`HostTensor`]s (any element type and device), because
/// a dataset is shared by reference between loader threads and tch tensors are not `Sync`;
/// `get` makes each row a fresh CPU tensor, and [`DefaultCollate`](crate::DefaultCollate)
/// stacks rows into batches: `(Tensor [N, ...], Tensor [N, ...])` for a pair.
///
/// ```no_run
/// use tch::{Device, Kind, Tensor};
/// use torchlight_data::{DataLoader, TensorDataset};
///
/// let x = Tensor::randn([100, 3, 8, 8], (Kind::Float, Device::Cpu));
/// let y = Tensor::randint(10, [100], (Kind::Int64, Device::Cpu));
/// let mut loader = DataLoader::builder(TensorDataset::new((x, y))?).batch_size(32).shuffle(true).build()?;
/// for batch in loader.epoch(0) {
///     let (xb, yb) = batch?; // [32, 3, 8, 8] float32, [32] int64
/// }
/// # Ok::<(), torchlight_data::DataError>(())
/// ```
#[derive(Debug)]
pub struct TensorDataset<T: TensorSample = (Tensor, Tensor)> {
    columns: Vec<(String, HostTensor)>,
    len: usize,
    sample: PhantomData<fn() -> T>,
}

impl<T: TensorSample> TensorDataset<T> {
    /// A dataset of the rows of `tensors`, which must all have the same size in their first
    /// dimension (an error names the tensor that differs, as PyTorch's "Size mismatch between
    /// tensors" does not).
    pub fn new(tensors: T) -> Result<Self> {
        let named = tensors.into_named();
        let mut columns = Vec::with_capacity(named.len());
        let mut len = None;
        for (name, tensor) in named {
            let bad = |reason: String| DataError::Config { field: "tensors", reason };
            let size = tensor.size();
            let Some(&rows) = size.first() else {
                return Err(bad(format!("tensor {name} is a scalar; it needs a first dimension to index")));
            };
            match len {
                None => len = Some((rows, name.clone())),
                Some((n, ref first)) if n != rows => {
                    return Err(bad(format!("tensor {name} has {rows} rows but tensor {first} has {n}")))
                }
                Some(_) => {}
            }
            let host = HostTensor::new(&tensor).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            columns.push((name, host));
        }
        let len = len.map_or(0, |(n, _)| n as usize);
        Ok(TensorDataset { columns, len, sample: PhantomData })
    }
}

impl<T: TensorSample> Dataset for TensorDataset<T> {
    type Item = T;

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<T> {
        if index >= self.len {
            return Err(DataError::IndexOutOfRange { index, len: self.len });
        }
        let rows = self
            .columns
            .iter()
            .map(|(name, host)| Ok((name.clone(), host.row(index)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(T::from_named(rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;
    use torchlight_base::rng_from_seed;

    fn assert_sync<T: Sync>() {}

    #[test]
    fn a_tensor_dataset_is_sync_and_gives_rows() {
        assert_sync::<TensorDataset<(Tensor, Tensor)>>();
        assert_sync::<TensorDataset<BTreeMap<String, Tensor>>>();
        let x = Tensor::arange(12, (Kind::Double, tch::Device::Cpu)).view([4, 3]);
        let y = Tensor::from_slice(&[true, false, true, true]);
        let ds = TensorDataset::new((x, y)).unwrap();
        assert_eq!(ds.len(), 4);
        let (row, flag) = ds.get(2, &mut rng_from_seed(0)).unwrap();
        assert_eq!((row.size(), row.kind()), (vec![3], Kind::Double));
        assert_eq!(Vec::<f64>::try_from(&row).unwrap(), [6.0, 7.0, 8.0]);
        assert_eq!((flag.size(), bool::try_from(&flag).unwrap()), (vec![], true));
        assert!(matches!(
            ds.get(4, &mut rng_from_seed(0)),
            Err(DataError::IndexOutOfRange { index: 4, len: 4 })
        ));
    }

    #[test]
    fn mismatched_lengths_and_scalars_name_the_tensor() {
        let x = Tensor::zeros([5, 2], (Kind::Float, tch::Device::Cpu));
        let y = Tensor::zeros([4], (Kind::Int64, tch::Device::Cpu));
        let msg = TensorDataset::new((x, y)).unwrap_err().to_string();
        assert!(msg.contains("tensor 1 has 4 rows but tensor 0 has 5"), "{msg}");
        let msg = TensorDataset::new(Tensor::from(3.0)).unwrap_err().to_string();
        assert!(msg.contains("tensor 0 is a scalar"), "{msg}");
    }
}
