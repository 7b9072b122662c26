//! Datasets whose samples are tch tensors: `TensorDataset` and default collation against
//! PyTorch's `TensorDataset` + `default_collate` (`tests/fixtures/make_tensor_batches.py`,
//! tolerance 0: same values, shapes and dtypes), tensors made in worker threads, and errors
//! naming the samples that cannot be stacked.

use std::collections::{BTreeMap, HashMap};
use tch::{Kind, Tensor};
use torchlight_data::rand::Rng as _;
use torchlight_data::{ArrayError, DataError, DataLoader, Dataset, DatasetExt, Result, Rng, TensorDataset};
use torchlight_tensor::{is_pinned, pinning_supported};

fn fixtures() -> HashMap<String, Tensor> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tensor_batches.safetensors");
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

/// `got` equals PyTorch's `want` exactly: shape, dtype and every element.
fn assert_same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!((got.size(), got.kind()), (want.size(), want.kind()), "{what}: shape and dtype");
    assert!(got.equal(want), "{what}: values differ from PyTorch's (tolerance 0)");
}

#[test]
fn tensor_batches_match_pytorchs_default_collate() {
    let f = fixtures();
    for workers in [0, 2] {
        let pairs = TensorDataset::new((f["x"].shallow_clone(), f["y"].shallow_clone())).unwrap();
        let mut loader = DataLoader::builder(pairs).batch_size(3).num_workers(workers).build().unwrap();
        let batches: Vec<(Tensor, Tensor)> = loader.epoch(0).map(|b| b.unwrap()).collect();
        assert_eq!(batches.len(), 3, "7 samples in batches of 3");
        for (k, (x, y)) in batches.iter().enumerate() {
            assert_same(x, &f[&format!("pair.{k}.0")], &format!("pair batch {k} input ({workers} workers)"));
            assert_same(y, &f[&format!("pair.{k}.1")], &format!("pair batch {k} target ({workers} workers)"));
        }

        let columns = BTreeMap::from([
            ("x".to_string(), f["x"].shallow_clone()),
            ("m".to_string(), f["m"].shallow_clone()),
        ]);
        let keyed = TensorDataset::new(columns).unwrap();
        let mut loader = DataLoader::builder(keyed).batch_size(3).num_workers(workers).build().unwrap();
        for (k, batch) in loader.epoch(0).enumerate() {
            let batch = batch.unwrap();
            assert_eq!(batch.keys().collect::<Vec<_>>(), ["m", "x"]);
            for key in ["x", "m"] {
                assert_same(
                    &batch[key],
                    &f[&format!("keyed.{k}.{key}")],
                    &format!("keyed batch {k} `{key}`"),
                );
            }
        }

        // (tensor, python int) samples: the labels become an int64 tensor, as in PyTorch.
        let labelled = TensorDataset::new((f["x"].shallow_clone(), f["y"].shallow_clone()))
            .unwrap()
            .map(|(x, y), _rng| Ok((x, y.int64_value(&[]))));
        let mut loader = DataLoader::builder(labelled).batch_size(3).num_workers(workers).build().unwrap();
        for (k, batch) in loader.epoch(0).enumerate() {
            let (x, y) = batch.unwrap();
            assert_same(&x, &f[&format!("labelled.{k}.0")], &format!("labelled batch {k} input"));
            assert_same(&y, &f[&format!("labelled.{k}.1")], &format!("labelled batch {k} labels"));
        }
    }
}

/// Sample `i`: a `[2, 3]` tensor of `i + noise`, computed with tch ops in whichever thread loads
/// it, and label `i`.
struct NoisyTensors;

impl Dataset for NoisyTensors {
    type Item = (Tensor, i64);

    fn len(&self) -> usize {
        20
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<(Tensor, i64)> {
        let noise: Vec<f32> = (0..6).map(|_| rng.random::<f32>()).collect();
        let x = Tensor::from_slice(&noise).view([2, 3]) + index as f64;
        Ok((x, index as i64))
    }
}

#[test]
fn tensors_made_in_workers_give_the_same_batches_for_every_worker_count() {
    let run = |workers: usize, pin: bool| -> Vec<(Vec<f32>, Vec<i64>)> {
        let mut loader = DataLoader::builder(NoisyTensors)
            .batch_size(6)
            .shuffle(true)
            .seed(5)
            .num_workers(workers)
            .pin_memory(pin)
            .build()
            .unwrap();
        loader
            .epoch(1)
            .map(|b| {
                let (x, y) = b.unwrap();
                assert_eq!((x.kind(), y.kind()), (Kind::Float, Kind::Int64));
                assert_eq!(
                    (is_pinned(&x), is_pinned(&y)),
                    (pin && pinning_supported(), pin && pinning_supported())
                );
                let x: Vec<f32> = Vec::try_from(x.flatten(0, -1)).unwrap();
                (x, Vec::try_from(&y).unwrap())
            })
            .collect()
    };
    let reference = run(0, false);
    assert_eq!(reference.iter().map(|(_, y)| y.len()).collect::<Vec<_>>(), [6, 6, 6, 2]);
    assert_eq!(run(3, false), reference, "3 workers");
    assert_eq!(run(2, true), reference, "2 workers, pinned");
}

/// Sample 4 is `[3]` where the others are `[2]`; sample 2 is float64 where the others are float32.
struct Mismatched;

impl Dataset for Mismatched {
    type Item = Tensor;

    fn len(&self) -> usize {
        6
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<Tensor> {
        Ok(match index {
            4 => Tensor::zeros([3], (Kind::Float, tch::Device::Cpu)),
            2 => Tensor::zeros([2], (Kind::Double, tch::Device::Cpu)),
            _ => Tensor::zeros([2], (Kind::Float, tch::Device::Cpu)),
        })
    }
}

#[test]
fn tensor_samples_that_cannot_be_stacked_are_named() {
    for workers in [0, 2] {
        let mut loader = DataLoader::builder(Mismatched).batch_size(3).num_workers(workers).build().unwrap();
        let results: Vec<_> = loader.epoch(0).collect();
        match &results[0] {
            Err(DataError::Collate { index: 2, reason }) => {
                assert!(
                    reason.contains("float64") && reason.contains("float32") && reason.contains("sample 0"),
                    "{reason}"
                )
            }
            other => panic!("expected a dtype error for sample 2, got {other:?}"),
        }
        match &results[1] {
            Err(e @ DataError::Array(ArrayError::ShapeMismatch { index: 4, first_index: 3, .. })) => {
                assert!(e.to_string().contains("sample 4 has shape [3]"), "{e}")
            }
            other => panic!("expected a shape mismatch at sample 4, got {other:?}"),
        }
    }
}
