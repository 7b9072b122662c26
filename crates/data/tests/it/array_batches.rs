//! The DataLoader with `ArrayCollate`: plain `Array` batches, no tensors and no libtorch (this
//! file also runs without the `tch` feature), in sampler order with per-sample seeds whatever
//! the worker count.

use crate::common::Noisy;
use torchlight_data::rand::Rng as _;
use torchlight_data::seed::sample_seed;
use torchlight_data::{
    rng_from_seed, Array, ArrayCollate, Buffer, DataLoaderBuilder, RandomSampler, Sampler,
};

fn epochs(num_workers: usize) -> Vec<Vec<(Array, Array)>> {
    let mut loader = DataLoaderBuilder::new(Noisy { len: 23 })
        .collate(ArrayCollate)
        .batch_size(5)
        .shuffle(true)
        .seed(99)
        .num_workers(num_workers)
        .build()
        .unwrap();
    (0..2).map(|epoch| loader.epoch(epoch).map(|b| b.unwrap()).collect()).collect()
}

#[test]
fn array_batches_are_identical_for_every_worker_count_and_follow_the_seeds() {
    let reference = epochs(0);
    assert_eq!(epochs(3), reference, "num_workers = 3");
    for (epoch, batches) in reference.iter().enumerate() {
        assert_eq!(batches.iter().map(|(x, _)| x.shape[0]).collect::<Vec<_>>(), [5, 5, 5, 5, 3]);
        let order = RandomSampler::new(23, 99).indices(epoch as u64);
        let labels: Vec<i64> = batches
            .iter()
            .flat_map(|(_, y)| match &y.buffer {
                Buffer::I64(v) => v.clone(),
                other => panic!("labels are int64, got {}", other.dtype()),
            })
            .collect();
        assert_eq!(labels, order.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let (first, _) = &batches[0];
        assert_eq!(first.shape, [5, 2, 3]);
        let i = order[0];
        let mut rng = rng_from_seed(sample_seed(99, epoch as u64, i as u64));
        let expected: Vec<f32> = (0..6).map(|_| i as f32 + rng.random::<f32>()).collect();
        let Buffer::F32(values) = &first.buffer else { panic!("inputs are float32") };
        assert_eq!(values[..6], expected[..], "sample {i} draws from sample_seed(99, {epoch}, {i}) alone");
    }
}
