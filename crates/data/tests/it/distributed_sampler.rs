//! DistributedSampler against torch's own indices (fixture from
//! `tests/fixtures/make_distributed_sampler.py`, torch 2.11.0): exact equality, every case.

use serde_json::Value;
use torchlight_data::{DistributedSampler, Sampler};

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/distributed_sampler.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("fixture is JSON")
}

fn usize_list(v: &Value) -> Vec<usize> {
    v.as_array().expect("a list").iter().map(|x| x.as_u64().expect("an index") as usize).collect()
}

#[test]
fn indices_equal_torchs_distributed_sampler() {
    let data = fixture();
    let cases = data["cases"].as_array().expect("cases");
    assert!(cases.len() > 200);
    for case in cases {
        let n = |k: &str| case[k].as_u64().unwrap();
        let sampler =
            DistributedSampler::new(n("len") as usize, n("num_replicas") as usize, n("rank") as usize)
                .unwrap()
                .with_shuffle(case["shuffle"].as_bool().unwrap())
                .with_seed(n("seed"))
                .with_drop_last(case["drop_last"].as_bool().unwrap());
        assert_eq!(sampler.len() as u64, n("num_samples"), "{case}");
        assert_eq!(sampler.indices(n("epoch")), usize_list(&case["indices"]), "{case}");
    }
}
