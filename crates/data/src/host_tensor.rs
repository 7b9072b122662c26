//! `HostTensor`: a tensor's elements kept as host bytes, so a dataset can hold tensors and stay `Sync`.

use crate::error::{DataError, Result};
use crate::tensor_collate::dtype_name;
use tch::{Kind, Tensor};

/// A tensor copied once into host memory, which a [`Dataset`](crate::Dataset) can hold.
///
/// A dataset is shared by reference between loader threads, so it must be `Sync`, and tch's
/// `Tensor` is not (tch-rs issue 752): a struct with a `Tensor` field cannot be a dataset.
/// Keep each tensor as a `HostTensor` instead and make the sample's tensors in
/// [`get`](crate::Dataset::get), from a [`row`](HostTensor::row) (`x[i]`, like indexing in
/// PyTorch) or the whole [`tensor`](HostTensor::tensor). Each call makes a fresh contiguous
/// CPU tensor of the original element type: one copy of that row's bytes, no sharing.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use torchlight_data::{DataLoader, Dataset, HostTensor, Result, Rng};
/// use torchlight_data::rand::Rng as _;
///
/// /// Images `[N, 3, 8, 8]` and labels `[N]`, with a random horizontal flip.
/// struct Flipped {
///     images: HostTensor,
///     labels: HostTensor,
/// }
///
/// impl Dataset for Flipped {
///     type Item = (Tensor, Tensor);
///     fn len(&self) -> usize {
///         self.images.rows()
///     }
///     fn get(&self, index: usize, rng: &mut Rng) -> Result<(Tensor, Tensor)> {
///         let image = self.images.row(index)?;
///         let image = if rng.random::<bool>() { image.flip([-1]) } else { image };
///         Ok((image, self.labels.row(index)?))
///     }
/// }
///
/// let images = Tensor::randn([100, 3, 8, 8], (Kind::Float, Device::Cpu));
/// let labels = Tensor::randint(10, [100], (Kind::Int64, Device::Cpu));
/// let data = Flipped { images: HostTensor::new(&images)?, labels: HostTensor::new(&labels)? };
/// let mut loader = DataLoader::builder(data).batch_size(32).shuffle(true).build()?;
/// for batch in loader.epoch(0) {
///     let (x, y) = batch?; // [32, 3, 8, 8] float32, [32] int64
/// }
/// # Ok::<(), torchlight_data::DataError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HostTensor {
    bytes: Vec<u8>,
    kind: Kind,
    size: Vec<i64>,
}

impl HostTensor {
    /// Copies `tensor` (any element type, any device; a non-contiguous view is read in its
    /// logical order) into host memory. Call it outside `no_grad` or inside: the copy carries
    /// no autograd history either way.
    ///
    /// # Errors
    /// [`DataError::Config`] (field `tensor`) when the tensor cannot be copied to the host,
    /// naming its element type.
    pub fn new(tensor: &Tensor) -> Result<Self> {
        let bad = |reason: String| DataError::Config { field: "tensor", reason };
        let kind = tensor.f_kind()?;
        let numel = tensor.numel();
        let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
        tensor.f_copy_data_u8(&mut bytes, numel).map_err(|e| {
            bad(format!("a {} tensor cannot be copied to host memory: {e}", dtype_name(kind)))
        })?;
        Ok(HostTensor { bytes, kind, size: tensor.size() })
    }

    /// The tensor's size (`tensor.size()`).
    pub fn size(&self) -> &[i64] {
        &self.size
    }

    /// The tensor's element type.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The length of the first dimension (`len(x)` in PyTorch); 0 for a scalar.
    pub fn rows(&self) -> usize {
        self.size.first().map_or(0, |&n| n as usize)
    }

    /// The whole tensor, as a fresh CPU tensor.
    ///
    /// # Errors
    /// [`DataError::Tensor`] when libtorch cannot allocate it.
    pub fn tensor(&self) -> Result<Tensor> {
        Ok(Tensor::f_from_data_size(&self.bytes, &self.size, self.kind)?)
    }

    /// Row `index` along the first dimension (`x[index]`), shape `size()[1..]`, as a fresh CPU
    /// tensor.
    ///
    /// # Errors
    /// [`DataError::IndexOutOfRange`] when `index >= rows()` (always, for a scalar);
    /// [`DataError::Tensor`] when libtorch cannot allocate it.
    pub fn row(&self, index: usize) -> Result<Tensor> {
        let rows = self.rows();
        if index >= rows || self.size.is_empty() {
            return Err(DataError::IndexOutOfRange { index, len: rows });
        }
        let row_bytes = self.bytes.len() / rows;
        let bytes = &self.bytes[index * row_bytes..(index + 1) * row_bytes];
        Ok(Tensor::f_from_data_size(bytes, &self.size[1..], self.kind)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_sync<T: Sync + Send>() {}

    #[test]
    fn rows_and_the_whole_tensor_come_back_with_their_type_and_shape() {
        assert_sync::<HostTensor>();
        // A transposed (non-contiguous) view is read in its logical order.
        let x = Tensor::arange(12, (Kind::Double, tch::Device::Cpu)).view([3, 4]).tr();
        let host = HostTensor::new(&x).unwrap();
        assert_eq!((host.size(), host.kind(), host.rows()), (&[4i64, 3][..], Kind::Double, 4));
        let row = host.row(1).unwrap();
        assert_eq!(row.size(), [3]);
        assert_eq!(Vec::<f64>::try_from(&row).unwrap(), [1.0, 5.0, 9.0]);
        assert!(host.tensor().unwrap().equal(&x));
        assert!(matches!(host.row(4), Err(DataError::IndexOutOfRange { index: 4, len: 4 })));
    }

    #[test]
    fn a_scalar_has_no_rows() {
        let host = HostTensor::new(&Tensor::from(2.5f32)).unwrap();
        assert_eq!(host.rows(), 0);
        assert!(matches!(host.row(0), Err(DataError::IndexOutOfRange { index: 0, len: 0 })));
        assert_eq!(host.tensor().unwrap().double_value(&[]), 2.5);
    }

    #[test]
    fn an_empty_first_dimension_has_no_rows() {
        let host = HostTensor::new(&Tensor::zeros([0, 2], (Kind::Float, tch::Device::Cpu))).unwrap();
        assert_eq!((host.rows(), host.tensor().unwrap().size()), (0, vec![0, 2]));
        assert!(host.row(0).is_err());
    }
}
