//! Event files read back by the tensorboard package's own EventAccumulator.

use std::collections::BTreeMap;
use torchlight_train::EventWriter;

const READER: &str = "crates/train/tests/scripts/read_tfevents.py";

/// What tensorboard's reader sees in `dir`: the file version and (step, value) per tag.
pub(crate) fn read_back(dir: &std::path::Path) -> (f64, BTreeMap<String, Vec<(i64, f64)>>) {
    let out = torchlight_testing::run_reference_script(READER, &[dir.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("tensorboard's reader failed: {e}"));
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let version = json["file_version"].as_f64().expect("a file version");
    let mut scalars = BTreeMap::new();
    for (tag, events) in json["scalars"].as_object().unwrap() {
        let points = events
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        scalars.insert(tag.clone(), points);
    }
    (version, scalars)
}

fn value(epoch: i64, tag: usize) -> f64 {
    // Values that f32 cannot hold exactly, so the test sees the f32 rounding TensorBoard stores.
    1.0 / (epoch as f64 + 3.0) + tag as f64 * 0.1
}

#[test]
fn scalars_round_trip_through_tensorboards_reader() {
    let tmp = crate::temp_dir();
    let mut w = EventWriter::create(tmp.path()).unwrap();
    let name = w.path().file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("events.out.tfevents."), "{name}");
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    assert!(name.contains(&host), "{name} names the host {host}");
    let tags = ["loss/train", "loss/val", "accuracy/val"];
    for epoch in 1..=5 {
        let values: Vec<(&str, f64)> = tags.iter().enumerate().map(|(i, t)| (*t, value(epoch, i))).collect();
        w.add_scalars(epoch, &values).unwrap();
    }
    w.add_scalar("lr", 1e-3, 5).unwrap();
    // Read while the writer is still open: records are written as they are added.
    let (version, scalars) = read_back(tmp.path());
    assert_eq!(version, 2.0);
    assert_eq!(
        scalars.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["accuracy/val", "loss/train", "loss/val", "lr"]
    );
    for (i, tag) in tags.iter().enumerate() {
        let expected: Vec<(i64, f64)> = (1..=5).map(|e| (e, value(e, i) as f32 as f64)).collect();
        assert_eq!(scalars[*tag], expected, "{tag}");
    }
    assert_eq!(scalars["lr"], vec![(5, 1e-3f32 as f64)]);
}

#[test]
fn a_resumed_run_replaces_the_steps_after_its_checkpoint() {
    let tmp = crate::temp_dir();
    let mut first = EventWriter::create(tmp.path()).unwrap();
    for epoch in 1..=5 {
        first.add_scalar("loss/train", epoch as f64, epoch).unwrap();
    }
    drop(first);
    // Crash after epoch 5, resume from the epoch-3 checkpoint: epochs 4 and 5 are redone.
    let mut second = EventWriter::resume(tmp.path(), 3).unwrap();
    for epoch in 4..=6 {
        second.add_scalar("loss/train", 10.0 * epoch as f64, epoch).unwrap();
    }
    let files = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(files, 2, "the resumed run writes its own event file");
    let (_, scalars) = read_back(tmp.path());
    assert_eq!(scalars["loss/train"], vec![(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]);
}
