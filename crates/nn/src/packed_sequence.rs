//! `PackedSequence` with `pack_padded_sequence` and `pad_packed_sequence`
//! (`torch.nn.utils.rnn`): a padded batch of sequences of different lengths, time step by time
//! step without the padding, as the recurrent layers' packed kernels take it.

use tch::{Device, Kind, Tensor};

/// Sequences packed time step by time step (`torch.nn.utils.rnn.PackedSequence`): `data` holds
/// step 0 of every sequence, then step 1 of every sequence still running, and so on, the
/// batch sorted by decreasing length.
#[derive(Debug)]
pub struct PackedSequence {
    /// `[sum(lengths), *]`: the valid steps, time-major.
    pub data: Tensor,
    /// `[T_max]` int64 on the CPU: how many sequences are still running at each step.
    pub batch_sizes: Tensor,
    /// `[B]`: the original batch index of each packed position, when the batch was sorted here
    /// (`enforce_sorted = false`); on `data`'s device.
    pub sorted_indices: Option<Tensor>,
    /// `[B]`: the inverse permutation, to put results back in the caller's order.
    pub unsorted_indices: Option<Tensor>,
}

impl PackedSequence {
    /// A packed sequence with other `data` (an RNN's output) and this one's steps and order.
    pub fn with_data(&self, data: Tensor) -> PackedSequence {
        PackedSequence {
            data,
            batch_sizes: self.batch_sizes.shallow_clone(),
            sorted_indices: self.sorted_indices.as_ref().map(Tensor::shallow_clone),
            unsorted_indices: self.unsorted_indices.as_ref().map(Tensor::shallow_clone),
        }
    }

    /// The number of sequences, `B`.
    pub fn batch_size(&self) -> i64 {
        self.batch_sizes.int64_value(&[0])
    }
}

/// The inverse of the permutation `perm` (PyTorch's `invert_permutation`): its argsort, which
/// a TorchScript trace keeps at every batch size (an `arange` of the size read here would not).
fn invert_permutation(perm: &Tensor) -> Tensor {
    perm.argsort(0, false)
}

/// Packs `input` (`[B, T, *]` when `batch_first`, else `[T, B, *]`) of per-sample `lengths`
/// (`[B]`, any integer tensor; used as CPU int64, as PyTorch requires)
/// (`torch.nn.utils.rnn.pack_padded_sequence`). With `enforce_sorted` false the batch is
/// sorted by decreasing length here (stably) and the permutation kept in the result, so any
/// order of lengths is accepted; with it true the lengths must already decrease.
///
/// # Panics
/// When `lengths` does not have one entry per sample, a length is below 1 or above `T`, or,
/// with `enforce_sorted`, the lengths do not decrease (libtorch's check).
pub fn pack_padded_sequence(
    input: &Tensor,
    lengths: &Tensor,
    batch_first: bool,
    enforce_sorted: bool,
) -> PackedSequence {
    let lengths = lengths.to_device(Device::Cpu).to_kind(Kind::Int64);
    let (batch_dim, time_dim) = if batch_first { (0, 1) } else { (1, 0) };
    let size = input.size();
    assert!(
        size.len() >= 2,
        "pack_padded_sequence: input must have a batch and a time dimension, got {size:?}"
    );
    assert_eq!(
        lengths.size(),
        [size[batch_dim]],
        "pack_padded_sequence: lengths must have one entry per sequence (batch size {})",
        size[batch_dim]
    );
    if lengths.numel() > 0 {
        let (min, max) = (lengths.min().int64_value(&[]), lengths.max().int64_value(&[]));
        assert!(min > 0, "pack_padded_sequence: every length must be at least 1, got {min}");
        assert!(
            max <= size[time_dim],
            "pack_padded_sequence: length {max} is longer than the {} time steps of the input",
            size[time_dim]
        );
    }
    let (lengths, input, sorted_indices) = if enforce_sorted {
        (lengths, input.shallow_clone(), None)
    } else {
        let (sorted, order) = lengths.sort_stable(true, 0, true);
        let order = order.to_device(input.device());
        let input = input.index_select(batch_dim as i64, &order);
        (sorted, input, Some(order))
    };
    let (data, batch_sizes) = input.internal_pack_padded_sequence(&lengths, batch_first);
    let unsorted_indices = sorted_indices.as_ref().map(invert_permutation);
    PackedSequence { data, batch_sizes, sorted_indices, unsorted_indices }
}

/// Pads `sequence` back to `[B, T, *]` when `batch_first`, else `[T, B, *]`, in the caller's
/// batch order, with `padding_value` past each sequence's end
/// (`torch.nn.utils.rnn.pad_packed_sequence`). `T` is `total_length` when given, else the
/// longest length. Returns the padded tensor and the lengths (`[B]` int64 on the CPU).
///
/// # Panics
/// When `total_length` is shorter than the longest sequence.
pub fn pad_packed_sequence(
    sequence: &PackedSequence,
    batch_first: bool,
    padding_value: f64,
    total_length: Option<i64>,
) -> (Tensor, Tensor) {
    let longest = sequence.batch_sizes.size()[0];
    let total = match total_length {
        Some(t) => {
            assert!(
                t >= longest,
                "pad_packed_sequence: total_length {t} is shorter than the longest sequence ({longest})"
            );
            t
        }
        None => longest,
    };
    let (padded, lengths) = Tensor::internal_pad_packed_sequence(
        &sequence.data,
        &sequence.batch_sizes,
        batch_first,
        padding_value,
        total,
    );
    match &sequence.unsorted_indices {
        Some(unsort) => {
            let batch_dim = if batch_first { 0 } else { 1 };
            (padded.index_select(batch_dim, unsort), lengths.index_select(0, &unsort.to_device(Device::Cpu)))
        }
        None => (padded, lengths),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_then_padding_gives_the_input_back_in_its_order() {
        // Batch-first [3, 4, 1]: values 1.. with zeros past each length.
        let lengths = Tensor::from_slice(&[2i64, 4, 1]);
        let x = Tensor::arange_start(1, 13, (Kind::Float, Device::Cpu)).reshape([3, 4, 1]);
        let mask =
            Tensor::arange(4, (Kind::Int64, Device::Cpu)).unsqueeze(0).lt_tensor(&lengths.unsqueeze(1));
        let x = x * mask.unsqueeze(-1);
        let packed = pack_padded_sequence(&x, &lengths, true, false);
        assert_eq!(Vec::<i64>::try_from(&packed.batch_sizes).unwrap(), [3, 2, 1, 1]);
        assert_eq!(Vec::<i64>::try_from(packed.sorted_indices.as_ref().unwrap()).unwrap(), [1, 0, 2]);
        assert_eq!(Vec::<i64>::try_from(packed.unsorted_indices.as_ref().unwrap()).unwrap(), [1, 0, 2]);
        assert_eq!(
            Vec::<f32>::try_from(packed.data.flatten(0, -1)).unwrap(),
            [5., 1., 9., 6., 2., 7., 8.],
            "time-major, longest first"
        );
        let (padded, back) = pad_packed_sequence(&packed, true, 0.0, Some(4));
        assert!(padded.equal(&x));
        assert!(back.equal(&lengths));
        let (short, _) = pad_packed_sequence(&packed, false, -1.0, None);
        assert_eq!(short.size(), [4, 3, 1]);
        assert_eq!(short.double_value(&[3, 0, 0]), -1.0);
    }

    #[test]
    #[should_panic(expected = "every length must be at least 1")]
    fn an_empty_sequence_panics() {
        pack_padded_sequence(
            &Tensor::zeros([2, 3], (Kind::Float, Device::Cpu)),
            &Tensor::from_slice(&[0i64, 3]),
            true,
            false,
        );
    }
}
