//! Collation through the loader: keyed (dict) batches, (input, target) array pairs and shape
//! mismatches.

use crate::common::f32s;
use std::collections::BTreeMap;
use torchlight_data::{Array, ArrayError, DataError, DataLoader, Dataset, Result};
use torchlight_tensor::seed::Rng;

/// Sample `i`: `{"image": F32 [2, 2] of i, "mask": U8 [2, 2] of i}`.
struct Keyed;

impl Dataset for Keyed {
    type Item = BTreeMap<String, Array>;

    fn len(&self) -> usize {
        5
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<Self::Item> {
        Ok(BTreeMap::from([
            ("image".to_string(), Array::from_f32(vec![index as f32; 4], vec![2, 2])?),
            ("mask".to_string(), Array::from_u8(vec![index as u8; 4], vec![2, 2])?),
        ]))
    }
}

#[test]
fn keyed_samples_become_keyed_batches() {
    let mut loader = DataLoader::builder(Keyed).batch_size(3).num_workers(2).build().unwrap();
    let batches: Vec<BTreeMap<String, tch::Tensor>> = loader.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 2);
    let first = &batches[0];
    assert_eq!(first.keys().collect::<Vec<_>>(), ["image", "mask"]);
    assert_eq!(first["image"].size(), [3, 2, 2]);
    assert_eq!(first["image"].kind(), tch::Kind::Float);
    assert_eq!(first["mask"].kind(), tch::Kind::Uint8);
    assert_eq!(f32s(&batches[1]["image"]), [3.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0]);
}

/// Sample 4 is `[3]` where the others are `[2]`.
struct Ragged;

impl Dataset for Ragged {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        6
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<(Array, i64)> {
        let n = if index == 4 { 3 } else { 2 };
        Ok((Array::from_f32(vec![0.0; n], vec![n])?, 0))
    }
}

#[test]
fn a_shape_mismatch_names_the_samples_and_shapes() {
    for workers in [0, 2] {
        let mut loader = DataLoader::builder(Ragged).batch_size(3).num_workers(workers).build().unwrap();
        let results: Vec<_> = loader.epoch(0).collect();
        assert!(results[0].is_ok());
        let err = results[1].as_ref().expect_err("batch 1 holds the ragged sample");
        match err {
            DataError::Array(ArrayError::ShapeMismatch { index, shape, first_index, first_shape, key }) => {
                assert_eq!((*index, *first_index), (4, 3));
                assert_eq!((shape.clone(), first_shape.clone(), key.clone()), (vec![3], vec![2], None));
                let msg = err.to_string();
                assert!(msg.contains("sample 4 has shape [3]") && msg.contains("sample 3"), "{msg}");
            }
            other => panic!("expected a shape mismatch, got {other}"),
        }
    }
}

/// Sample `i`: an input `[2]` of `i` and a target `[1]` of `-i`, both arrays.
struct Pairs;

impl Dataset for Pairs {
    type Item = (Array, Array);

    fn len(&self) -> usize {
        5
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<(Array, Array)> {
        let i = index as f32;
        Ok((Array::from_f32(vec![i, i], vec![2])?, Array::from_f32(vec![-i], vec![1])?))
    }
}

#[test]
fn array_pairs_become_tensor_pairs() {
    let mut loader = DataLoader::builder(Pairs).batch_size(2).num_workers(2).build().unwrap();
    let batches: Vec<(tch::Tensor, tch::Tensor)> = loader.epoch(0).map(|b| b.unwrap()).collect();
    assert_eq!((batches[0].0.size(), batches[0].1.size()), (vec![2, 2], vec![2, 1]));
    assert_eq!(f32s(&batches[1].1), [-2.0, -3.0]);
    assert_eq!(batches[2].0.size(), [1, 2], "the last batch is short");
}
