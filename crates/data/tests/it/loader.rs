//! DataLoader: determinism across worker counts, batch sizes, persistence, pinning, early drop,
//! resuming mid-epoch and data-stall accounting.

use crate::common::{f32s, i64s, Noisy, Recording, Slow};
use rand::Rng as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use torchlight_data::{DataError, DataLoader, RandomSampler, Sampler, SequentialSampler};
use torchlight_tensor::seed::{rng_from_seed, sample_seed};
use torchlight_tensor::{is_pinned, pinning_supported};

type Flat = (Vec<i64>, Vec<f32>, Vec<i64>);

fn run_epochs(num_workers: usize, persistent: bool, epochs: u64) -> Vec<Vec<Flat>> {
    let mut builder = DataLoader::builder(Noisy { len: 50 })
        .batch_size(7)
        .shuffle(true)
        .seed(1234)
        .num_workers(num_workers);
    if persistent {
        builder = builder.persistent_workers(true);
    }
    let mut loader = builder.build().unwrap();
    (0..epochs)
        .map(|epoch| {
            loader
                .epoch(epoch)
                .map(|batch| {
                    let (images, labels) = batch.unwrap();
                    (images.size(), f32s(&images), i64s(&labels))
                })
                .collect()
        })
        .collect()
}

#[test]
fn batches_are_identical_for_every_worker_count() {
    let reference = run_epochs(0, false, 2);
    for workers in [1, 4] {
        assert_eq!(run_epochs(workers, false, 2), reference, "num_workers = {workers}");
    }
    assert_eq!(run_epochs(3, true, 2), reference, "persistent workers");
    assert_ne!(reference[0], reference[1], "epochs must be reshuffled");
}

#[test]
fn epoch_from_resumes_at_the_exact_batch_and_never_loads_the_skipped_ones() {
    let flat = |batch: torchlight_data::Result<(tch::Tensor, tch::Tensor)>| -> Flat {
        let (images, labels) = batch.unwrap();
        (images.size(), f32s(&images), i64s(&labels))
    };
    for workers in [0, 2] {
        let build = || {
            DataLoader::builder(Recording::new(23))
                .batch_size(4)
                .shuffle(true)
                .seed(99)
                .num_workers(workers)
                .build()
                .unwrap()
        };
        let mut full = build();
        let all: Vec<Flat> = full.epoch(3).map(flat).collect();
        assert_eq!(all.len(), 6);
        for first in [0, 2, 5] {
            let mut resumed = build();
            let rest: Vec<Flat> = resumed.epoch_from(3, first).map(flat).collect();
            let expected: Vec<Flat> = full.epoch(3).skip(first).map(flat).collect();
            assert_eq!(rest, expected, "num_workers = {workers}, first_batch = {first}");
            assert_eq!(rest, all[first..], "num_workers = {workers}, first_batch = {first}");
            // Exactly the samples of the yielded batches were loaded, each once.
            let mut wanted: Vec<usize> = rest.iter().flat_map(|b| b.2.iter().map(|&i| i as usize)).collect();
            wanted.sort_unstable();
            assert_eq!(resumed.dataset().loaded(), wanted, "num_workers = {workers}, first_batch = {first}");
            assert_eq!(resumed.last_epoch_stats().unwrap().batches, 6 - first);
        }
        let mut loader = build();
        assert_eq!(loader.epoch_from(3, 6).count(), 0, "resuming at the end gives an empty epoch");
        let past: Vec<_> = loader.epoch_from(3, 7).collect();
        assert_eq!(past.len(), 1);
        let err = past.into_iter().next().unwrap().unwrap_err();
        assert!(
            matches!(&err, DataError::Config { field: "first_batch", .. })
                && err.to_string().contains("6 batches"),
            "{err}"
        );
        assert!(loader.dataset().loaded().is_empty(), "nothing loads for an empty or invalid resume");
    }
}

#[test]
fn batches_follow_the_sampler_and_per_sample_seeds() {
    let epochs = run_epochs(4, false, 2);
    for (epoch, batches) in epochs.iter().enumerate() {
        let order = RandomSampler::new(50, 1234).indices(epoch as u64);
        let labels: Vec<i64> = batches.iter().flat_map(|b| b.2.clone()).collect();
        assert_eq!(labels, order.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let images: Vec<f32> = batches.iter().flat_map(|b| b.1.clone()).collect();
        let expected: Vec<f32> = order
            .iter()
            .flat_map(|&i| {
                let mut rng = rng_from_seed(sample_seed(1234, epoch as u64, i as u64));
                (0..6).map(move |_| i as f32 + rng.random::<f32>()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(images, expected);
    }
}

#[test]
fn last_batch_is_short_unless_dropped() {
    for workers in [0, 2] {
        let mut loader =
            DataLoader::builder(Noisy { len: 10 }).batch_size(4).num_workers(workers).build().unwrap();
        assert_eq!(loader.len(), 3);
        let sizes: Vec<i64> = loader.epoch(0).map(|b| b.unwrap().0.size()[0]).collect();
        assert_eq!(sizes, [4, 4, 2]);
        let mut loader = DataLoader::builder(Noisy { len: 10 })
            .batch_size(4)
            .drop_last(true)
            .num_workers(workers)
            .build()
            .unwrap();
        assert_eq!(loader.len(), 2);
        let labels: Vec<Vec<i64>> = loader.epoch(0).map(|b| i64s(&b.unwrap().1)).collect();
        assert_eq!(labels, [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        let stats = loader.last_epoch_stats().unwrap();
        assert_eq!((stats.batches, stats.samples), (2, 8));
    }
}

#[test]
fn batches_have_pytorch_shapes_and_kinds() {
    let mut loader = DataLoader::builder(Noisy { len: 5 }).batch_size(5).build().unwrap();
    // A loader can move to the thread that trains (a compile-time check).
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&loader);
    let (images, labels) = loader.epoch(0).next().unwrap().unwrap();
    assert_eq!(images.size(), [5, 2, 3]);
    assert_eq!(images.kind(), tch::Kind::Float);
    assert_eq!(labels.size(), [5]);
    assert_eq!(labels.kind(), tch::Kind::Int64);
}

#[test]
fn a_custom_sampler_sets_the_order() {
    struct Reversed(usize);
    impl Sampler for Reversed {
        fn len(&self) -> usize {
            self.0
        }
        fn indices(&self, _epoch: u64) -> Vec<usize> {
            (0..self.0).rev().collect()
        }
    }
    let mut loader = DataLoader::builder(Noisy { len: 6 })
        .batch_size(4)
        .sampler(Reversed(6))
        .num_workers(2)
        .build()
        .unwrap();
    let labels: Vec<Vec<i64>> = loader.epoch(0).map(|b| i64s(&b.unwrap().1)).collect();
    assert_eq!(labels, [vec![5, 4, 3, 2], vec![1, 0]]);
    let sequential = SequentialSampler::new(3);
    let mut loader = DataLoader::builder(Noisy { len: 6 }).sampler(sequential).build().unwrap();
    assert_eq!(loader.epoch(0).count(), 3);
}

#[test]
fn builder_names_the_bad_field() {
    let field = |r: torchlight_data::Result<DataLoader<Noisy>>| match r {
        Err(DataError::Config { field, .. }) => field,
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("expected an error"),
    };
    let ds = || Noisy { len: 4 };
    assert_eq!(field(DataLoader::builder(ds()).batch_size(0).build()), "batch_size");
    assert_eq!(field(DataLoader::builder(ds()).prefetch(0).build()), "prefetch");
    assert_eq!(field(DataLoader::builder(ds()).persistent_workers(true).build()), "persistent_workers");
    assert_eq!(
        field(DataLoader::builder(ds()).shuffle(true).sampler(SequentialSampler::new(4)).build()),
        "shuffle"
    );
    assert_eq!(field(DataLoader::builder(ds()).timeout(Duration::ZERO).build()), "timeout");
}

#[test]
fn pinned_batches_are_pinned_exactly_where_pinning_exists() {
    for workers in [0, 2] {
        let mut pinned = DataLoader::builder(Noisy { len: 9 })
            .batch_size(4)
            .pin_memory(true)
            .num_workers(workers)
            .build()
            .unwrap();
        let mut plain = DataLoader::builder(Noisy { len: 9 }).batch_size(4).build().unwrap();
        for (a, b) in pinned.epoch(0).zip(plain.epoch(0)) {
            let ((images, labels), (plain_images, plain_labels)) = (a.unwrap(), b.unwrap());
            assert_eq!(is_pinned(&images), pinning_supported());
            assert_eq!(is_pinned(&labels), pinning_supported());
            assert!(!is_pinned(&plain_images));
            assert_eq!(f32s(&images), f32s(&plain_images));
            assert_eq!(i64s(&labels), i64s(&plain_labels));
        }
    }
}

#[test]
fn dropping_the_loader_mid_epoch_stops_and_joins_its_workers() {
    for persistent in [false, true] {
        let dataset = Arc::new(Slow::new(100_000, Duration::from_millis(5)));
        let mut loader = DataLoader::builder(Arc::clone(&dataset))
            .batch_size(2)
            .num_workers(4)
            .prefetch(2)
            .persistent_workers(persistent)
            .build()
            .unwrap();
        {
            let mut epoch = loader.epoch(0);
            let (_, labels) = epoch.next().unwrap().unwrap();
            assert_eq!(i64s(&labels), [0, 1]);
        }
        drop(loader);
        // Joined: no get is running and no thread holds the dataset any more.
        assert_eq!(dataset.in_flight.load(Ordering::SeqCst), 0);
        assert_eq!(Arc::strong_count(&dataset), 1, "persistent = {persistent}");
        // Prompt: at most the prefetch window (8 batches of 2) plus one sample per worker
        // was started, not the epoch's 100 000 samples.
        let started = dataset.started.load(Ordering::SeqCst);
        assert!(started <= 2 * 8 + 4 + 2, "{started} samples started");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(dataset.started.load(Ordering::SeqCst), started);
    }
}

#[test]
fn an_abandoned_epoch_does_not_leak_into_the_next() {
    let mut loader = DataLoader::builder(Noisy { len: 40 })
        .batch_size(4)
        .shuffle(true)
        .seed(7)
        .num_workers(3)
        .persistent_workers(true)
        .build()
        .unwrap();
    assert_eq!(loader.epoch(0).take(2).count(), 2);
    let stats = loader.last_epoch_stats().unwrap();
    assert_eq!((stats.epoch, stats.batches), (0, 2));
    let labels: Vec<i64> = loader.epoch(1).flat_map(|b| i64s(&b.unwrap().1)).collect();
    let expected: Vec<i64> = RandomSampler::new(40, 7).indices(1).iter().map(|&i| i as i64).collect();
    assert_eq!(labels, expected);
}

#[test]
fn stall_time_is_accounted_per_epoch() {
    let delay = Duration::from_millis(3);
    for workers in [0, 2] {
        let mut loader =
            DataLoader::builder(Slow::new(12, delay)).batch_size(4).num_workers(workers).build().unwrap();
        assert_eq!(loader.epoch(0).filter(|b| b.is_ok()).count(), 3);
        let stats = loader.last_epoch_stats().unwrap().clone();
        assert_eq!((stats.batches, stats.samples, stats.failed_batches), (3, 12, 0));
        assert!(stats.stall <= stats.wall, "{stats:?}");
        // The consumer cannot have waited less than one batch's loading (4 sleeps), and
        // without workers it waits for every sample.
        let floor = if workers == 0 { delay * 12 } else { delay * 4 };
        assert!(stats.stall >= floor, "{stats:?}");
    }
}
