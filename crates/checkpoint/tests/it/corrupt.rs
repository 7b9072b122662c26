use crate::{temp_dir, torch_rng_lock};
use std::fs;
use torchlight_checkpoint::*;
use torchlight_nn::{resnet18, resnet34, Linear};

/// A saved checkpoint, and the folder guard that removes it at the end of the test.
fn saved(name: &str) -> (crate::TempDir, std::path::PathBuf) {
    let dir = temp_dir(name);
    let model = Linear::new(4, 3, true);
    save(dir.join("ck"), &Snapshot::model(&model)).unwrap();
    let ck = dir.join("ck");
    (dir, ck)
}

#[test]
fn a_truncated_weights_file_is_named_with_its_sizes() {
    let (_dir, ck) = saved("trunc");
    let file = ck.join("model.safetensors");
    let bytes = fs::read(&file).unwrap();
    fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    let err = Checkpoint::load(&ck).unwrap_err();
    assert!(matches!(err, CheckpointError::Truncated { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors") && err.to_string().contains("truncated"), "{err}");
}

#[test]
fn a_flipped_byte_is_caught_by_the_checksum() {
    let (_dir, ck) = saved("flip");
    let file = ck.join("model.safetensors");
    let mut bytes = fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    fs::write(&file, &bytes).unwrap();
    let err = Checkpoint::load(&ck).unwrap_err().to_string();
    assert!(err.contains("model.safetensors: corrupted: CRC-32"), "{err}");
}

#[test]
fn a_newer_format_and_garbage_metadata_are_explained() {
    let (_dir, ck) = saved("newer");
    let meta = ck.join("meta.json");
    let text = fs::read_to_string(&meta).unwrap().replace("\"format_version\": 1", "\"format_version\": 7");
    fs::write(&meta, text).unwrap();
    let err = Checkpoint::load(&ck).unwrap_err().to_string();
    assert!(err.contains("format version 7 is newer") && err.contains("(up to 1)"), "{err}");
    fs::write(&meta, "{ not json").unwrap();
    let err = Checkpoint::load(&ck).unwrap_err().to_string();
    assert!(err.contains("meta.json: corrupted"), "{err}");
    let empty = ck.parent().unwrap().join("empty");
    fs::create_dir_all(&empty).unwrap();
    let err = Checkpoint::load(&empty).unwrap_err().to_string();
    assert!(err.contains("not a Torchlight checkpoint"), "{err}");
}

#[test]
fn another_architecture_names_the_mismatched_keys_and_loads_nothing() {
    let _lock = torch_rng_lock();
    let dir = temp_dir("arch");
    let model = resnet18(10);
    save(dir.join("ck"), &Snapshot::model(&model)).unwrap();
    let mut checkpoint = Checkpoint::load(dir.join("ck")).unwrap();
    let other = resnet34(10);
    let before = other.conv1.first_conv().weight.copy();
    let err = checkpoint.restore_model(&other).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("missing key(s): layer1.2.conv1.weight"),
        "{err}"
    );
    assert!(other.conv1.first_conv().weight.equal(&before));
    let err = checkpoint.restore_model(&resnet18(5)).unwrap_err().to_string();
    assert!(err.contains("fc.weight (weights [10, 512], model [5, 512])"), "{err}");
    let err = checkpoint.restore_optimizer(&mut dummy_optimizer()).unwrap_err().to_string();
    assert!(err.contains("holds no optimizer state"), "{err}");
}

fn dummy_optimizer() -> torchlight_optim::AdamW {
    let lin = Linear::new(2, 2, true);
    torchlight_optim::AdamW::new(vec![torchlight_optim::ParamGroup::new(
        torchlight_nn::named_parameters(&lin),
        torchlight_optim::AdamConfig::new(0.1),
    )])
    .unwrap()
}
