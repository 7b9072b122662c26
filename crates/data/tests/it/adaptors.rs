//! Dataset adaptors: map, Subset and ConcatDataset, alone and through the loader.

use crate::common::{f32s, i64s, Noisy};
use rand::Rng as _;
use std::sync::Arc;
use torchlight_data::{Array, ConcatDataset, DataError, DataLoader, Dataset, DatasetExt, Subset};
use torchlight_tensor::seed::rng_from_seed;

#[test]
fn map_transforms_each_sample_with_its_generator() {
    // A "random flip": negate with probability 1/2, drawn after Noisy's own draws.
    let flipped = Noisy { len: 8 }.map(|(array, label), rng| {
        let Array { buffer: torchlight_data::Buffer::F32(mut v), shape } = array else {
            unreachable!("Noisy makes F32 arrays")
        };
        if rng.random::<bool>() {
            v.iter_mut().for_each(|x| *x = -*x);
        }
        Ok((Array::from_f32(v, shape)?, label * 10))
    });
    assert_eq!(flipped.len(), 8);
    let mut a = rng_from_seed(3);
    let mut b = rng_from_seed(3);
    assert_eq!(flipped.get(2, &mut a).unwrap(), flipped.get(2, &mut b).unwrap());

    let run = |workers| {
        let flipped = Noisy { len: 8 }.map(|(array, label), rng| {
            let sign = if rng.random::<bool>() { -1.0 } else { 1.0 };
            let Array { buffer: torchlight_data::Buffer::F32(v), shape } = array else { unreachable!() };
            Ok((Array::from_f32(v.into_iter().map(|x| x * sign).collect(), shape)?, label * 10))
        });
        let mut loader =
            DataLoader::builder(flipped).batch_size(3).shuffle(true).num_workers(workers).build().unwrap();
        loader.epoch(0).map(|b| b.unwrap()).map(|(x, y)| (f32s(&x), i64s(&y))).collect::<Vec<_>>()
    };
    let reference = run(0);
    assert_eq!(run(3), reference);
    let labels: Vec<i64> = reference.iter().flat_map(|b| b.1.clone()).collect();
    assert!(labels.iter().all(|l| l % 10 == 0));
    let values: Vec<f32> = reference.iter().flat_map(|b| b.0.clone()).collect();
    assert!(values.iter().any(|&v| v < 0.0) && values.iter().any(|&v| v > 0.0));
}

#[test]
fn map_errors_name_the_sample_through_the_loader() {
    let failing = Noisy { len: 4 }.map(|item: (Array, i64), _rng| {
        if item.1 == 2 {
            Err(DataError::Config { field: "transform", reason: "crop larger than image".into() })
        } else {
            Ok(item)
        }
    });
    let mut loader = DataLoader::builder(failing).batch_size(4).build().unwrap();
    let msg = loader.epoch(0).next().unwrap().unwrap_err().to_string();
    assert!(msg.contains("sample 2") && msg.contains("crop larger than image"), "{msg}");
}

#[test]
fn subset_and_concat_index_their_parts() {
    let base = Arc::new(Noisy { len: 10 });
    let subset = Subset::new(Arc::clone(&base), vec![7, 2, 9]).unwrap();
    assert!(matches!(
        Subset::new(Arc::clone(&base), vec![10]),
        Err(DataError::IndexOutOfRange { index: 10, len: 10 })
    ));
    let other = Subset::new(Arc::clone(&base), vec![0]).unwrap();
    let concat = ConcatDataset::new(vec![subset, other]);
    assert_eq!(concat.len(), 4);
    let mut loader = DataLoader::builder(concat).batch_size(4).num_workers(2).build().unwrap();
    let (_, labels) = loader.epoch(0).next().unwrap().unwrap();
    assert_eq!(i64s(&labels), [7, 2, 9, 0]);
}
