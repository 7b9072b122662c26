//! Buckets: tensors of one dtype and device packed into a flat buffer, so that a few large
//! collectives replace many small ones (DDP's gradient buckets, `_broadcast_coalesced`).

use tch::{Device, Kind, Tensor};

/// Tensors packed into one flat buffer: `members` index the caller's list, in order.
pub(crate) struct Bucket {
    pub(crate) members: Vec<usize>,
    /// 1-D, `sum(numel)` elements, of the members' dtype and device; reused every step.
    pub(crate) flat: Tensor,
}

/// Splits `tensors` (index, tensor) into buckets of one (dtype, device) each, in the given
/// order, closing a bucket once it holds `cap_bytes` or more (so a tensor larger than the cap
/// gets a bucket of its own), as DDP's `_compute_bucket_assignment_by_size` does.
pub(crate) fn plan<'a>(
    tensors: impl IntoIterator<Item = (usize, &'a Tensor)>,
    cap_bytes: usize,
) -> Vec<Bucket> {
    struct Open {
        kind: Kind,
        device: Device,
        members: Vec<usize>,
        numel: i64,
        bytes: usize,
    }
    let mut open: Vec<Open> = Vec::new();
    let mut closed: Vec<Open> = Vec::new();
    for (index, t) in tensors {
        let (kind, device) = (t.kind(), t.device());
        let numel = t.numel() as i64;
        let bytes = t.numel() * kind.elt_size_in_bytes();
        let slot = match open.iter().position(|o| o.kind == kind && o.device == device) {
            Some(i) => i,
            None => {
                open.push(Open { kind, device, members: Vec::new(), numel: 0, bytes: 0 });
                open.len() - 1
            }
        };
        let o = &mut open[slot];
        o.members.push(index);
        o.numel += numel;
        o.bytes += bytes;
        if o.bytes >= cap_bytes {
            closed.push(open.remove(slot));
        }
    }
    closed.extend(open);
    closed
        .into_iter()
        .map(|o| Bucket { members: o.members, flat: Tensor::empty([o.numel], (o.kind, o.device)) })
        .collect()
}

/// Concatenates `tensors` (one dtype and device, any shapes) into a new 1-D tensor.
pub(crate) fn flatten<'a>(tensors: impl Iterator<Item = &'a Tensor>) -> Tensor {
    let views: Vec<Tensor> = tensors.map(|t| t.reshape([-1])).collect();
    Tensor::cat(&views, 0)
}

/// Concatenates `tensors` into `flat`, which has room for exactly their elements.
pub(crate) fn flatten_into<'a>(flat: &Tensor, tensors: impl Iterator<Item = &'a Tensor>) {
    let views: Vec<Tensor> = tensors.map(|t| t.reshape([-1])).collect();
    let _ = Tensor::cat_out(flat, &views, 0);
}

/// Copies consecutive slices of `flat` back into `tensors`, each reshaped to its tensor.
pub(crate) fn unflatten_into<'a>(flat: &Tensor, tensors: impl Iterator<Item = &'a Tensor>) {
    let mut offset = 0;
    for t in tensors {
        let n = t.numel() as i64;
        t.shallow_clone().copy_(&flat.narrow(0, offset, n).view(t.size().as_slice()));
        offset += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_split_by_dtype_and_cap_in_order() {
        let f = |n: i64| Tensor::zeros([n], (Kind::Float, Device::Cpu));
        let tensors = [f(10), Tensor::zeros([3], (Kind::Int64, Device::Cpu)), f(20), f(5), f(100), f(1)];
        // 64 bytes = 16 floats: [10, 20] closes (120 bytes), [5, 100] closes, [1] stays open.
        let buckets = plan(tensors.iter().enumerate(), 64);
        let members: Vec<Vec<usize>> = buckets.iter().map(|b| b.members.clone()).collect();
        assert_eq!(members, vec![vec![0, 2], vec![3, 4], vec![1], vec![5]]);
        assert_eq!(buckets[0].flat.size(), [30]);
        assert_eq!(buckets[2].flat.kind(), Kind::Int64);
    }

    #[test]
    fn flatten_and_unflatten_round_trip_any_shapes() {
        let a = Tensor::arange(6, (Kind::Float, Device::Cpu)).view([2, 3]);
        let b = Tensor::arange(4, (Kind::Float, Device::Cpu)).view([2, 2]).tr(); // not contiguous
        let flat = flatten([&a, &b].into_iter());
        assert_eq!(Vec::<f32>::try_from(&flat).unwrap(), [0., 1., 2., 3., 4., 5., 0., 2., 1., 3.]);
        let into = Tensor::zeros([10], (Kind::Float, Device::Cpu));
        flatten_into(&into, [&a, &b].into_iter());
        assert!(into.equal(&flat));
        let (a2, b2) = (a.zeros_like(), Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)).tr());
        unflatten_into(&(&flat * 2.0), [&a2, &b2].into_iter());
        assert!(a2.equal(&(&a * 2.0)) && b2.equal(&(&b * 2.0)));
    }
}
