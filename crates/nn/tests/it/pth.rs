use crate::fixture;
use tch::{Kind, Tensor};
use torchlight_nn::*;

#[test]
fn reads_every_dtype_and_strided_views_like_torch_load() {
    let sd: std::collections::HashMap<String, Tensor> =
        read_pth(fixture("pth_cases/dtypes_and_views.pth")).unwrap().into_iter().collect();
    assert_eq!(Vec::<f32>::try_from(&sd["float"]).unwrap(), [-1.0, -0.5, 0.0, 0.5, 1.0]);
    assert_eq!(sd["half"].kind(), Kind::Half);
    assert_eq!(Vec::<f64>::try_from(&sd["half"].to_kind(Kind::Double)).unwrap(), [0.5, -2.0, 65504.0]);
    assert_eq!(sd["bfloat16"].kind(), Kind::BFloat16);
    assert_eq!(sd["int64"].size(), Vec::<i64>::new());
    assert_eq!(sd["int64"].int64_value(&[]), 7);
    assert_eq!(sd["bool"].kind(), Kind::Bool);
    assert_eq!(sd["uint8"].int64_value(&[0, 1]), 255);
    let base = Tensor::arange(24, (Kind::Float, tch::Device::Cpu)).view([4, 6]);
    assert!(sd["base"].equal(&base));
    assert!(sd["transposed"].equal(&base.tr()), "a transposed view keeps its strides");
    assert!(sd["row_view"].equal(&base.get(2)), "an offset view into a shared storage");
    assert_eq!(sd["empty"].size(), [0, 3]);
}

#[test]
fn keeps_the_file_order_and_reads_parameters() {
    let keys: Vec<String> =
        read_pth(fixture("pth_cases/linear.pth")).unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["weight", "bias"]);
    let p = read_pth(fixture("pth_cases/parameter.pth")).unwrap();
    assert_eq!(p[0].0, "w");
    assert_eq!(Vec::<f32>::try_from(&p[0].1).unwrap(), [1.0, 1.0]);
}

#[test]
fn a_pickle_that_calls_code_is_refused_by_name() {
    let err = read_pth(fixture("pth_cases/evil.pth")).unwrap_err().to_string();
    assert!(err.contains("evil.pth") && err.contains("refusing pickle global `posix.system`"), "{err}");
    assert!(!std::path::Path::new("/tmp/torchlight-pth-evil").exists());
}

#[test]
fn truncated_and_non_zip_files_are_errors_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("tl-nn-pth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = std::fs::read(fixture("pth_cases/linear.pth")).unwrap();
    let cut = dir.join("cut.pth");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = read_pth(&cut).unwrap_err().to_string();
    assert!(err.contains("cut.pth"), "{err}");
    let junk = dir.join("junk.pth");
    std::fs::write(&junk, b"not a checkpoint at all").unwrap();
    let err = read_weights(&junk).unwrap_err().to_string();
    assert!(err.contains("junk.pth"), "{err}");
    let err = read_weights(dir.join("absent.pth")).unwrap_err().to_string();
    assert!(err.contains("absent.pth"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every crafted file of `pth_cases/hostile` (made by `make_pth_hostile.py`): where torch.load
/// raises, `read_pth` returns an error naming the file (never a panic); where torch.load loads,
/// `read_pth` loads the same shape and values (exactly: they are copies of stored floats).
#[test]
fn crafted_views_fail_exactly_where_torch_load_fails_and_load_the_same_values_elsewhere() {
    let dir = fixture("pth_cases/hostile");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let cases = expected.as_object().unwrap();
    assert!(cases.len() >= 25, "the fixture lists {} cases", cases.len());
    for (name, case) in cases {
        let path = dir.join(name);
        let result = std::panic::catch_unwind(|| read_pth(&path));
        let result = result.unwrap_or_else(|_| panic!("{name}: read_pth panicked"));
        if case["loads"].as_bool().unwrap() {
            let sd = result.unwrap_or_else(|e| panic!("{name}: torch.load reads it, read_pth failed: {e}"));
            let t = &sd[0].1;
            let shape: Vec<i64> =
                case["shape"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(t.size(), shape, "{name}: shape");
            let values: Vec<f64> =
                case["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert_eq!(
                Vec::<f64>::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap(),
                values,
                "{name}"
            );
        } else {
            let err = match result {
                Ok(_) => panic!("{name}: torch.load raises ({}), read_pth loaded it", case["torch_error"]),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(name.as_str()), "{name}: the error names the file: {err}");
        }
    }
}

/// Pickle-level attacks on the reader: each is a clean error naming the file and the reason,
/// reached without building the structure the pickle describes (no deep recursion, no
/// exponential copies, no unbounded stack).
#[test]
fn pickle_bombs_are_clean_errors() {
    let dir = fixture("pth_cases/hostile");
    let cases = [
        ("pickle_deep_nesting.pth", "more than 100 deep"),
        ("pickle_deep_tuple1.pth", "more than 100 deep"),
        ("pickle_memo_doubling.pth", "builds more than"),
        ("pickle_stack_flood.pth", "builds more than"),
        ("pickle_huge_string.pth", "ends inside an opcode"),
        ("pickle_long_integer.pth", "integer of 255 bytes"),
        ("pickle_unterminated_global.pth", "unterminated GLOBAL"),
    ];
    for (name, reason) in cases {
        let path = dir.join(name);
        let result =
            std::panic::catch_unwind(|| read_pth(&path)).unwrap_or_else(|_| panic!("{name}: panicked"));
        let err = result.err().unwrap_or_else(|| panic!("{name}: loaded")).to_string();
        assert!(err.contains(name) && err.contains(reason), "{name}: {err}");
    }
}

/// Weights in a format the reader does not take get an error saying what the file is and
/// what to do, not a safetensors parser's `HeaderTooLarge`.
#[test]
fn legacy_and_torchscript_files_are_named_for_what_they_are() {
    let err = read_weights(fixture("pth_cases/foreign/legacy.pth")).unwrap_err().to_string();
    assert!(
        err.contains("legacy.pth") && err.contains("legacy format") && err.contains("torch.save"),
        "{err}"
    );
    assert!(!err.contains("HeaderTooLarge") && !err.contains("safetensors"), "{err}");
    let err = read_weights(fixture("pth_cases/foreign/torchscript.pt")).unwrap_err().to_string();
    assert!(err.contains("torchscript.pt") && err.contains("TorchScript module"), "{err}");
}

/// Malformed safetensors files: each error names the file and says what is wrong in words
/// (the safetensors crate's own messages are its Debug names).
#[test]
fn malformed_safetensors_are_described_in_words() {
    let dir = std::env::temp_dir().join(format!("tl-nn-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.safetensors");
    write_safetensors(&[("w".to_string(), Tensor::from_slice(&[1f32, 2.0, 3.0]))], &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("cut.safetensors", bytes[..bytes.len() - 4].to_vec(), "do not cover the data section"),
        ("text.safetensors", b"hello world, not weights".to_vec(), "header does not fit"),
        ("tiny.safetensors", b"abcde".to_vec(), "fewer than the 8-byte header length"),
        ("json.safetensors", [&5u64.to_le_bytes()[..], b"{oops"].concat(), "not valid JSON"),
    ];
    for (name, data, reason) in cases {
        std::fs::write(dir.join(name), data).unwrap();
        let err = read_safetensors(dir.join(name)).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(reason), "{name}: {err}");
        assert!(!err.contains("Error") && !err.contains("TooLarge"), "{name}: no Debug names: {err}");
    }
    let back = read_weights(&good).unwrap();
    assert_eq!(Vec::<f32>::try_from(&back[0].1).unwrap(), [1.0, 2.0, 3.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A safetensors file of `header` (JSON) and `data` bytes.
fn safetensors_bytes(header: &str, data: usize) -> Vec<u8> {
    [&(header.len() as u64).to_le_bytes()[..], header.as_bytes(), &vec![0u8; data]].concat()
}

/// Headers the safetensors crate rejects with a vague reason are described tensor by tensor:
/// an FP8 or unknown dtype by name (not "not valid JSON"), a bad offset against the tensor
/// that has it (not its neighbour), and an empty file as empty.
#[test]
fn bad_safetensors_headers_name_the_tensor_and_the_dtype() {
    let dir = std::env::temp_dir().join(format!("tl-nn-st-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fc = |bias: &str| {
        format!(
            r#"{{"fc.bias":{{"dtype":"F32","shape":[2],"data_offsets":{bias}}},"fc.weight":{{"dtype":"F32","shape":[2,5],"data_offsets":[8,48]}}}}"#
        )
    };
    let fp8 = r#"{"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}"#;
    let odd = r#"{"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}}"#;
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        ("fp8.safetensors", safetensors_bytes(fp8, 4), "tensor `w` has dtype `F8_E4M3`".into()),
        ("q4.safetensors", safetensors_bytes(odd, 4), "tensor `w` has dtype `Q4`".into()),
        (
            "past.safetensors",
            safetensors_bytes(&fc("[100,108]"), 48),
            "tensor `fc.bias`: data_offsets [100, 108]".into(),
        ),
        (
            "overlap.safetensors",
            safetensors_bytes(&fc("[4,12]"), 48),
            "`fc.bias` [4, 12] and `fc.weight` [8, 48] overlap".into(),
        ),
    ];
    for (name, data, reason) in cases {
        std::fs::write(dir.join(name), data).unwrap();
        let err = read_weights(dir.join(name)).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(&reason), "{name}: {err}");
        assert!(!err.contains("not valid JSON"), "{name}: {err}");
    }
    // Sizes that add up past u64 are an error, not an overflow.
    let big = |k: &str| {
        format!(
            r#""{k}":{{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}"#
        )
    };
    let huge = format!("{{{},{},{}}}", big("a"), big("b"), big("c"));
    std::fs::write(dir.join("huge.safetensors"), safetensors_bytes(&huge, 8)).unwrap();
    assert!(read_weights(dir.join("huge.safetensors")).is_err());
    // The intact layout reads.
    std::fs::write(dir.join("fc.safetensors"), safetensors_bytes(&fc("[0,8]"), 48)).unwrap();
    assert_eq!(read_weights(dir.join("fc.safetensors")).unwrap().len(), 2);
    std::fs::write(dir.join("empty.pth"), b"").unwrap();
    let err = read_weights(dir.join("empty.pth")).unwrap_err().to_string();
    assert!(
        err.contains("empty.pth") && err.contains("is empty (0 bytes)") && !err.contains("safetensors"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writing into a folder that does not exist names the file asked for (not a temporary file)
/// and says what the OS said, once.
#[test]
fn saving_into_a_missing_folder_names_the_file_once() {
    let path = std::env::temp_dir().join(format!("tl-nn-nowhere-{}/model.safetensors", std::process::id()));
    let err = save_safetensors(&Linear::new(2, 2, true), &path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()) && !text.contains(".tmp"), "{text}");
    assert_eq!(text.matches("os error 2").count(), 1, "{text}");
    assert!(
        std::error::Error::source(&err).is_none(),
        "the OS error is in the message, not repeated as a source"
    );
}

/// The tensors `write_pth` is tested with: several element types, a scalar, an empty tensor,
/// a transposed (non-contiguous) view and an integer too large for 32 bits.
fn written_cases() -> Vec<(String, Tensor)> {
    let cpu = tch::Device::Cpu;
    let base = Tensor::arange(6, (Kind::Float, cpu)).view([2, 3]);
    vec![
        ("layer.weight".into(), base.tr()),
        ("layer.bias".into(), Tensor::from_slice(&[0.5f64, -1.5])),
        ("half".into(), Tensor::from_slice(&[0.25f32, -2.0]).to_kind(Kind::Half)),
        ("bf16".into(), Tensor::from_slice(&[3.0f32]).to_kind(Kind::BFloat16)),
        ("bn.num_batches_tracked".into(), Tensor::from(5_000_000_000i64)),
        ("mask".into(), Tensor::from_slice(&[true, false, true])),
        ("bytes".into(), Tensor::from_slice(&[0u8, 255])),
        ("empty".into(), Tensor::zeros([0, 4], (Kind::Float, cpu))),
    ]
}

#[test]
fn write_pth_round_trips_through_read_pth() {
    let dir = std::env::temp_dir().join(format!("tl-nn-write-pth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("written.pth");
    let cases = written_cases();
    write_pth(&cases, &path).unwrap();
    let back = read_pth(&path).unwrap();
    assert_eq!(
        back.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        cases.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    for ((key, want), (_, got)) in cases.iter().zip(&back) {
        assert_eq!((got.kind(), got.size()), (want.kind(), want.size()), "{key}");
        assert!(got.equal(want), "{key}: {got} != {want}");
    }
    // A model's state_dict, loaded back by strict key matching.
    let model = Linear::new(3, 2, true);
    save_pth(&model, &path).unwrap();
    let other = Linear::new(3, 2, true);
    load_weights(&other, &path, &LoadOptions::strict()).unwrap();
    assert!(
        other.weight.equal(&model.weight) && other.bias.as_ref().unwrap().equal(model.bias.as_ref().unwrap())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn write_pth_refuses_an_element_type_it_cannot_write_by_key() {
    let path = std::env::temp_dir().join(format!("tl-nn-write-pth-complex-{}.pth", std::process::id()));
    let z = Tensor::zeros([2], (Kind::ComplexFloat, tch::Device::Cpu));
    let err = write_pth(&[("z".into(), z)], &path).unwrap_err().to_string();
    assert!(err.contains("`z`") && err.contains("ComplexFloat") && err.contains(".pth"), "{err}");
    assert!(!path.exists());
}

#[test]
fn torch_load_reads_what_write_pth_writes() {
    let dir = std::env::temp_dir().join(format!("tl-nn-write-pth-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("for_torch.pth");
    let cases = written_cases();
    write_pth(&cases, &path).unwrap();
    let out = torchlight_testing::run_reference_script(
        "crates/nn/tests/fixtures/load_written_pth.py",
        &[path.to_str().unwrap()],
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), cases.len(), "{out}");
    let dtype = |k: Kind| match k {
        Kind::Float => "torch.float32",
        Kind::Double => "torch.float64",
        Kind::Half => "torch.float16",
        Kind::BFloat16 => "torch.bfloat16",
        Kind::Int64 => "torch.int64",
        Kind::Bool => "torch.bool",
        Kind::Uint8 => "torch.uint8",
        other => panic!("no case of {other:?}"),
    };
    for ((key, t), line) in cases.iter().zip(lines) {
        let values: Vec<f64> = Vec::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap();
        // Every case's values are exact in float64 (5e9 included), so the text must match.
        let want = serde_json::json!([key, dtype(t.kind()), t.size(), values]);
        let got: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(got, want, "{key}");
    }
}

type Reader = fn(&std::path::Path) -> Result<Vec<(String, Tensor)>>;

/// A pickle that is not a zip archive (torch.save's legacy format at protocol 4, a plain
/// `pickle.dump`) is named as such, not as a malformed safetensors file; a cut-off archive is
/// called truncated, not a file from before PyTorch 1.6 (`make_pickle_bins.py`, at test time).
#[test]
fn pickles_and_cut_archives_are_named_for_what_they_are() {
    let dir =
        torchlight_testing::generated_fixture("crates/nn/tests/fixtures/make_pickle_bins.py", &[]).unwrap();
    let err = read_weights(dir.join("legacy4.bin")).unwrap_err().to_string();
    assert!(err.contains("legacy4.bin") && err.contains("legacy format"), "{err}");
    assert!(!err.contains("cannot read as safetensors"), "{err}");
    let err = read_weights(dir.join("plain.bin")).unwrap_err().to_string();
    assert!(err.contains("plain.bin") && err.contains("plain Python pickle"), "{err}");
    assert!(!err.contains("cannot read as safetensors"), "{err}");
    let err = read_safetensors(dir.join("plain.bin")).unwrap_err().to_string();
    assert!(err.contains("plain Python pickle"), "{err}");
    let readers: [Reader; 2] = [|p| read_weights(p), |p| read_pth(p)];
    for read in readers {
        let err = read(&dir.join("cut.bin")).unwrap_err().to_string();
        assert!(err.contains("cut.bin") && err.contains("truncated"), "{err}");
        assert!(!err.contains("1.6"), "{err}");
    }
}

/// A FIFO or a device given as weights is refused before it is opened (opening a FIFO blocks
/// until a writer comes; `/dev/zero` never ends).
#[cfg(unix)]
#[test]
fn fifos_and_devices_are_not_weights() {
    let dir = std::env::temp_dir().join(format!("tl-nn-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("w.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let readers: [Reader; 3] = [|p| read_weights(p), |p| read_safetensors(p), |p| read_pth(p)];
    for read in readers {
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.contains("w.safetensors") && err.contains("FIFO"), "{err}");
    }
    let err = read_weights("/dev/zero").unwrap_err().to_string();
    assert!(err.contains("/dev/zero") && err.contains("device"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
