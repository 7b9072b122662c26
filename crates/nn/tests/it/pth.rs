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
