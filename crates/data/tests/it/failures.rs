//! Failing samples and corrupt files (error and skip policies), panics in workers, timeouts.

use crate::common::{i64s, Faulty, Gated};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use torchlight_data::{Array, DataError, DataLoader, Dataset, ErrorPolicy};
use torchlight_tensor::seed::Rng;

#[test]
fn a_failing_sample_is_an_error_naming_index_and_file() {
    for workers in [0, 3] {
        let mut loader = DataLoader::builder(Faulty { len: 20, bad: Some(5), panic_at: None })
            .batch_size(4)
            .num_workers(workers)
            .build()
            .unwrap();
        let results: Vec<_> = loader.epoch(0).collect();
        assert_eq!(results.len(), 5);
        for (i, result) in results.iter().enumerate() {
            match (i, result) {
                (1, Err(e)) => {
                    let msg = e.to_string();
                    assert!(msg.contains("sample 5") && msg.contains("images/cat/5.png"), "{msg}");
                }
                (1, Ok(_)) => panic!("batch 1 holds the failing sample"),
                (_, r) => assert!(r.is_ok(), "batch {i}: {:?}", r.as_ref().err()),
            }
        }
        let stats = loader.last_epoch_stats().unwrap();
        assert_eq!((stats.batches, stats.failed_batches, stats.samples), (4, 1, 16));
        assert!(stats.skipped.is_empty());
    }
}

#[test]
fn the_skip_policy_leaves_bad_samples_out_and_counts_them() {
    for workers in [0, 3] {
        let mut loader = DataLoader::builder(Faulty { len: 20, bad: Some(5), panic_at: None })
            .batch_size(4)
            .num_workers(workers)
            .on_error(ErrorPolicy::Skip)
            .build()
            .unwrap();
        let labels: Vec<Vec<i64>> = loader.epoch(0).map(|b| i64s(&b.unwrap().1)).collect();
        assert_eq!(labels.len(), 5);
        assert_eq!(labels[1], [4, 6, 7]);
        assert_eq!(labels.iter().map(Vec::len).sum::<usize>(), 19);
        let stats = loader.last_epoch_stats().unwrap();
        assert_eq!((stats.batches, stats.failed_batches, stats.samples), (5, 0, 19));
        assert_eq!(stats.skipped.len(), 1);
        assert_eq!(stats.skipped[0].index, 5);
        assert!(stats.skipped[0].error.contains("images/cat/5.png"), "{:?}", stats.skipped);
    }
}

#[test]
fn a_batch_of_only_bad_samples_is_skipped_whole() {
    let mut loader = DataLoader::builder(Faulty { len: 5, bad: Some(4), panic_at: None })
        .batch_size(2)
        .on_error(ErrorPolicy::Skip)
        .build()
        .unwrap();
    let labels: Vec<Vec<i64>> = loader.epoch(0).map(|b| i64s(&b.unwrap().1)).collect();
    assert_eq!(labels, [vec![0, 1], vec![2, 3]]);
    assert_eq!(loader.last_epoch_stats().unwrap().skipped.len(), 1);
}

#[test]
fn a_panic_in_a_worker_becomes_an_error() {
    for workers in [0, 2] {
        // Even with the skip policy: a panic is a bug, not a bad file.
        let mut loader = DataLoader::builder(Faulty { len: 12, bad: None, panic_at: Some(9) })
            .batch_size(4)
            .num_workers(workers)
            .on_error(ErrorPolicy::Skip)
            .build()
            .unwrap();
        let results: Vec<_> = loader.epoch(0).collect();
        assert_eq!(results.len(), 3);
        assert!(results[0].is_ok() && results[1].is_ok());
        match &results[2] {
            Err(DataError::Panic { index: Some(9), message }) => {
                assert!(message.contains("decoder blew up on sample 9"), "{message}")
            }
            other => panic!("expected a panic error, got {:?}", other.as_ref().err()),
        }
        // The workers survive the panic: the next epoch loads normally up to the same sample.
        assert_eq!(loader.epoch(1).filter(|b| b.is_ok()).count(), 2);
    }
}

#[test]
fn a_batch_that_does_not_arrive_in_time_is_a_timeout_error() {
    let dataset = Arc::new(Gated { open: Mutex::new(false), opened: Condvar::new() });
    let mut loader = DataLoader::builder(Arc::clone(&dataset))
        .num_workers(2)
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let mut epoch = loader.epoch(0);
    // Dropped before `epoch` (reverse declaration order): should an assertion below fail, the
    // gate opens and the workers can be joined, so the test fails instead of hanging.
    struct OpenOnDrop(Arc<Gated>);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }
    let _open_on_exit = OpenOnDrop(Arc::clone(&dataset));
    match epoch.next() {
        Some(Err(DataError::Timeout { batch: 0, .. })) => {}
        other => panic!("expected a timeout, got {:?}", other.map(|r| r.err())),
    }
    dataset.open();
    let (_, labels) = epoch.next().unwrap().unwrap();
    assert_eq!(i64s(&labels), [1]);
    assert!(epoch.next().is_none());
    drop(epoch);
    assert_eq!(loader.last_epoch_stats().unwrap().failed_batches, 1);
}

/// Samples stored as files of four little-endian `f32`s, named `{index}.bin`.
struct RawFiles {
    dir: PathBuf,
    len: usize,
}

impl Dataset for RawFiles {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> torchlight_data::Result<(Array, i64)> {
        let path = self.dir.join(format!("{index}.bin"));
        let fail = |message: String| DataError::Sample { index, path: Some(path.clone()), message };
        let bytes = std::fs::read(&path).map_err(|e| fail(e.to_string()))?;
        if bytes.len() != 16 {
            return Err(fail(format!("{} bytes where 16 were expected", bytes.len())));
        }
        let values = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        Ok((Array::from_f32(values.collect(), vec![4])?, index as i64))
    }
}

#[test]
fn a_corrupt_file_is_reported_with_its_path_or_skipped() {
    let dir = std::env::temp_dir().join(format!("torchlight-data-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for index in 0..8u8 {
        let bytes: Vec<u8> = if index == 6 {
            vec![0; 7] // truncated
        } else {
            [f32::from(index); 4].iter().flat_map(|v| v.to_le_bytes()).collect()
        };
        std::fs::write(dir.join(format!("{index}.bin")), bytes).unwrap();
    }
    let corrupt = dir.join("6.bin").display().to_string();
    for workers in [0, 2] {
        let dataset = RawFiles { dir: dir.clone(), len: 8 };
        let mut loader = DataLoader::builder(dataset).batch_size(4).num_workers(workers).build().unwrap();
        let results: Vec<_> = loader.epoch(0).collect();
        assert!(results[0].is_ok());
        let msg = results[1].as_ref().expect_err("batch 1 holds the corrupt file").to_string();
        assert!(msg.contains("sample 6") && msg.contains(&corrupt) && msg.contains("7 bytes"), "{msg}");

        let dataset = RawFiles { dir: dir.clone(), len: 8 };
        let mut loader = DataLoader::builder(dataset)
            .batch_size(4)
            .num_workers(workers)
            .on_error(ErrorPolicy::Skip)
            .build()
            .unwrap();
        let labels: Vec<i64> = loader.epoch(0).flat_map(|b| i64s(&b.unwrap().1)).collect();
        assert_eq!(labels, [0, 1, 2, 3, 4, 5, 7]);
        let skipped = &loader.last_epoch_stats().unwrap().skipped;
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].error.contains(&corrupt), "{skipped:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
