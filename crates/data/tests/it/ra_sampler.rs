//! RASampler against torchvision's reference `RASampler` (fixture from
//! `tests/fixtures/make_ra_sampler.py`, torch 2.11.0, torchvision 0.26's sampler.py): exact
//! equality, every case; and its mid-epoch resume through the loader's position.

use serde_json::Value;
use torchlight_data::{RASampler, Sampler};

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ra_sampler.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("fixture is JSON")
}

#[test]
fn indices_equal_torchvisions_ra_sampler() {
    let data = fixture();
    let cases = data["cases"].as_array().expect("cases");
    assert!(cases.len() > 200);
    let mut nonempty = 0;
    for case in cases {
        let n = |k: &str| case[k].as_u64().unwrap() as usize;
        let sampler = RASampler::new(n("len"), n("num_replicas"), n("rank"))
            .unwrap()
            .with_repetitions(n("repetitions"))
            .unwrap()
            .with_shuffle(case["shuffle"].as_bool().unwrap())
            .with_seed(n("seed") as u64)
            .with_selected_round(n("selected_round"));
        let expected: Vec<usize> =
            case["indices"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as usize).collect();
        assert_eq!(sampler.len(), n("num_selected"), "{case}");
        assert_eq!(sampler.indices(n("epoch") as u64), expected, "{case}");
        nonempty += usize::from(!expected.is_empty());
    }
    assert!(nonempty > 150, "{nonempty}");
}

#[cfg(feature = "tch")]
mod loading {
    use crate::common::{f32s, i64s, Noisy};
    use torchlight_data::{DataLoader, RASampler, Sampler};

    type Flat = (Vec<i64>, Vec<f32>);

    fn loader(workers: usize) -> DataLoader<Noisy> {
        let sampler = RASampler::new(23, 2, 1).unwrap().with_seed(5).with_selected_round(0);
        DataLoader::builder(Noisy { len: 23 })
            .batch_size(4)
            .sampler(sampler)
            .seed(9)
            .num_workers(workers)
            .build()
            .unwrap()
    }

    fn flat(batch: torchlight_data::Result<(tch::Tensor, tch::Tensor)>) -> Flat {
        let (images, labels) = batch.unwrap();
        (i64s(&labels), f32s(&images))
    }

    #[test]
    fn repeats_are_augmented_anew_and_an_epoch_resumes_mid_way_identically() {
        let sampler = RASampler::new(23, 2, 1).unwrap().with_seed(5).with_selected_round(0);
        let mut full = loader(0);
        let all: Vec<Flat> = full.epoch(2).map(flat).collect();
        let labels: Vec<usize> = all.iter().flat_map(|b| b.0.iter().map(|&l| l as usize)).collect();
        assert_eq!(labels, sampler.indices(2), "the sampler's order");
        assert_eq!(all.len(), 3, "12 indices per rank (ceil(23 / 2)) in batches of 4");
        // A sample listed twice in the epoch gets two different augmentations.
        let images: Vec<&[f32]> = all.iter().flat_map(|b| b.1.chunks(6)).collect();
        let mut repeated = 0;
        for i in 0..labels.len() {
            for j in i + 1..labels.len() {
                if labels[i] == labels[j] {
                    assert_ne!(images[i], images[j], "repeat of sample {}", labels[i]);
                    repeated += 1;
                }
            }
        }
        assert!(repeated > 0, "this rank sees some sample twice: {labels:?}");
        for workers in [0, 2] {
            assert_eq!(
                loader(workers).epoch(2).map(flat).collect::<Vec<_>>(),
                all,
                "num_workers = {workers}"
            );
            for first in [1, 2] {
                let rest: Vec<Flat> = loader(workers).epoch_from(2, first).map(flat).collect();
                assert_eq!(rest, all[first..], "resumed at batch {first}, num_workers = {workers}");
            }
        }
    }
}
