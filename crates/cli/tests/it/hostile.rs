//! A hostile trial of the command line (issue 27): hand-edited sidecars and configs, weight
//! files that collide or lie, damaged checkpoints, odd caches and closed outputs. Each case is
//! one clear error (or the right result), never a panic.

use super::harden::{images, tiny_run};
use super::{fails, ok, s, temp};
use std::path::Path;
use torchlight_vision::{EvalPreprocessing, Sample, Transform};

/// `predict`'s JSON probabilities for `image`, by class name.
fn predicted(model: &Path, image: &str) -> std::collections::HashMap<String, f64> {
    let out = ok(&["predict", "--checkpoint", &s(model), "--device", "cpu", "--json", "--top-k", "3", image]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    json[0]["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["class"].as_str().unwrap().to_string(), t["probability"].as_f64().unwrap()))
        .collect()
}

/// An edited TorchScript sidecar is checked against the model (one error naming the sidecar
/// and the field, never a panic), and its preprocessing is the one `predict` applies: the
/// probabilities equal the TorchScript module's on inputs made with the sidecar's resize,
/// interpolation, mean and std (tolerance 1e-6: the same module on the same input, through softmax).
#[test]
fn an_edited_torchscript_sidecar_is_checked_and_used() {
    let dir = temp("sidecar");
    let (checkpoint, data) = tiny_run(&dir);
    let pt = dir.join("model.pt");
    ok(&["export", "--checkpoint", &s(&checkpoint), "--format", "torchscript", "--out", &s(&pt)]);
    let sidecar_path = dir.join("model.json");
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sidecar_path).unwrap()).unwrap();
    let image = images(&data).into_iter().find(|p| p.ends_with(".png")).unwrap();
    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut sidecar = exported.clone();
        change(&mut sidecar);
        std::fs::write(&sidecar_path, serde_json::to_string_pretty(&sidecar).unwrap()).unwrap();
    };
    let predict_fails = || fails(&["predict", "--checkpoint", &s(&pt), "--device", "cpu", &image]);
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        ("classes", serde_json::json!(["a", "b"]), "names 2 classes but"),
        ("classes", serde_json::json!(["a", "b", "c", "d"]), "names 4 classes but"),
        ("classes", serde_json::json!(["a"]), "names 1 classes but"),
        ("image_size", serde_json::json!(0), "0 is not a whole number"),
        ("std", serde_json::json!([0, 0, 0]), "not 3 positive finite numbers"),
        ("mean", serde_json::json!("0.5"), "not 3 finite numbers"),
        ("resize_shorter_side", serde_json::json!(-3), "not a whole number"),
    ];
    for (field, value, want) in cases {
        edit(&|j| j[field] = value.clone());
        let err = predict_fails();
        assert!(
            err.contains(&s(&sidecar_path)) && err.contains(&format!("`{field}`")) && err.contains(want),
            "{field} = {value}: {err}"
        );
        if field == "classes" {
            assert!(err.contains(&format!("{} outputs 3 scores", s(&pt))), "{err}");
        }
    }

    // The sidecar's recipe is applied: other resize, mean and std, other probabilities, and
    // exactly those of the module on inputs built with them.
    edit(&|_| {});
    let as_exported = predicted(&pt, &image);
    let recipe = EvalPreprocessing {
        resize: 48,
        mean: [0.25, 0.5, 0.75],
        std: [0.5, 0.125, 2.0],
        ..EvalPreprocessing::classification(32)
    };
    edit(&|j| {
        j["resize_shorter_side"] = serde_json::json!(recipe.resize);
        j["mean"] = serde_json::json!(recipe.mean);
        j["std"] = serde_json::json!(recipe.std);
    });
    let edited = predicted(&pt, &image);
    let decoded = torchlight_vision::decode_file(&image).unwrap();
    let module = torchlight_export::load_torchscript(&pt).unwrap();
    let module_probs = |recipe: &EvalPreprocessing| {
        let mut rng = torchlight_tensor::seed::rng_from_seed(0);
        let t = recipe
            .transform()
            .apply(Sample::Image(decoded.clone()), &mut rng)
            .unwrap()
            .into_tensor()
            .unwrap();
        let x = tch::Tensor::from_slice(&t.data).view([1, 3, 32, 32]);
        let probs = tch::no_grad(|| module.forward_ts(&[x]).unwrap()).softmax(-1, tch::Kind::Double);
        Vec::<f64>::try_from(probs.squeeze_dim(0)).unwrap()
    };
    let probs = module_probs(&recipe);
    let mut moved = 0.0f64;
    for (i, class) in ["circle", "cross", "star"].iter().enumerate() {
        let (got, want) = (edited[*class], probs[i]);
        assert!(
            (got - want).abs() <= 1e-6,
            "{class}: predict {got}, the module on the sidecar's input {want}"
        );
        moved = moved.max((got - as_exported[*class]).abs());
    }
    assert!(moved > 1e-4, "the edited recipe changes the probabilities ({moved})");

    // `resize_interpolation` too (what `data.interpolation` exports): bicubic resizing, which
    // moves the module's probabilities by more than the tolerance, is what predict applies.
    let bicubic =
        EvalPreprocessing { interpolation: torchlight_vision::InterpolationMode::Bicubic, ..recipe };
    edit(&|j| {
        j["resize_shorter_side"] = serde_json::json!(recipe.resize);
        j["mean"] = serde_json::json!(recipe.mean);
        j["std"] = serde_json::json!(recipe.std);
        j["resize_interpolation"] = serde_json::json!("bicubic");
    });
    let edited = predicted(&pt, &image);
    let (want, bilinear) = (module_probs(&bicubic), module_probs(&recipe));
    let mut apart = 0.0f64;
    for (i, class) in ["circle", "cross", "star"].iter().enumerate() {
        let got = edited[*class];
        assert!(
            (got - want[i]).abs() <= 1e-6,
            "{class}: predict {got}, the module on bicubic input {}",
            want[i]
        );
        apart = apart.max((want[i] - bilinear[i]).abs());
    }
    assert!(apart > 1e-5, "bicubic and bilinear inputs give the module other probabilities ({apart})");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hand-edited `config.toml` in a run folder is held against the config in the checkpoint's
/// meta on resume, by the rule `--set` follows there: a changed key outside the changeable few
/// is refused naming the file, the key and both values (a changed model is blamed on the config,
/// not reported as missing weights); a changed changeable key is applied.
#[test]
fn resume_holds_a_hand_edited_config_to_the_checkpoint() {
    let dir = temp("edited-config");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "4"]);
    let runs = dir.join("runs");
    ok(&[
        "train",
        "--data",
        &s(&dir.join("data/target")),
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "4",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--out",
        &s(&runs),
    ]);
    let run = runs.join("exp_001");
    let config_path = run.join("config.toml");
    let written = std::fs::read_to_string(&config_path).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(written.contains(from), "{from} in {written}");
        std::fs::write(&config_path, written.replacen(from, to, 1)).unwrap();
    };
    let resume = ["train", "--resume", &s(&run), "--epochs", "2"];
    for (from, to, key, values) in [
        ("image_size = 32", "image_size = 64", "data.image_size", ("64", "32")),
        ("batch_size = 4", "batch_size = 8", "train.batch_size", ("8", "4")),
        ("name = \"resnet18\"", "name = \"resnet34\"", "model.name", ("\"resnet34\"", "\"resnet18\"")),
    ] {
        edit(from, to);
        let err = fails(&resume);
        assert!(
            err.contains(&s(&config_path))
                && err.contains(&format!("`{key}` is {} here but {} in the checkpoint", values.0, values.1)),
            "{key}: {err}"
        );
        assert!(!err.contains("missing key"), "{err}");
    }
    // The same rule as `--set` on resume.
    std::fs::write(&config_path, &written).unwrap();
    let err = fails(&["train", "--resume", &s(&run), "--epochs", "2", "--set", "data.image_size=64"]);
    assert!(err.contains("data.image_size") && err.contains("start a new run"), "{err}");
    // Four images a class leave the validation split empty: no epoch has a best checkpoint,
    // and a command given the run folder says so, naming `last`.
    let last = run.join("checkpoints/last");
    let err =
        fails(&["eval", "--checkpoint", &s(&run), "--data", &s(&dir.join("data/target")), "--device", "cpu"]);
    assert!(err.contains("no best checkpoint") && err.contains(&s(&last)), "{err}");
    let err = fails(&[
        "export",
        "--checkpoint",
        &s(&run),
        "--format",
        "safetensors",
        "--out",
        &s(&dir.join("w.st")),
    ]);
    assert!(err.contains("no best checkpoint") && err.contains(&s(&last)), "{err}");
    // A changeable key edited in the file is taken.
    edit("workers = 0", "workers = 1");
    ok(&resume);
    let resumed = std::fs::read_to_string(&config_path).unwrap();
    assert!(resumed.contains("workers = 1") && resumed.contains("epochs = 2"), "{resumed}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--out` naming a file (or a path below one) says so, not "File exists (os error 17)".
#[test]
fn an_out_folder_that_is_a_file_is_named() {
    let dir = temp("out-file");
    let (_, data) = tiny_run(&dir);
    let file = dir.join("runs.txt");
    std::fs::write(&file, b"").unwrap();
    for out in [file.clone(), file.join("below")] {
        let err =
            fails(&["train", "--data", &s(&data), "--epochs", "1", "--device", "cpu", "--out", &s(&out)]);
        assert!(
            err.contains(&format!("{}: is a file, not a folder", s(&file))) && !err.contains("os error"),
            "{err}"
        );
        let err = fails(&["demo-data", "--out", &s(&out), "--per-class", "3"]);
        assert!(
            err.contains(&format!("{}: is a file, not a folder", s(&file))) && !err.contains("os error"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `summary`'s sizes are bounded as training's are: a clear error, not an allocator abort.
#[test]
fn summary_sizes_are_bounded() {
    for (flag, value) in
        [("--num-classes", "4000000000"), ("--num-classes", "1000001"), ("--image-size", "100000")]
    {
        let err = fails(&["summary", "--model", "resnet18", flag, value]);
        assert!(err.contains(flag) && err.contains(value), "{flag} {value}: {err}");
    }
    let err = fails(&["summary", "--image-size", "0"]);
    assert!(err.contains("--image-size") && err.contains('0'), "{err}");
}

/// A value of the wrong type names what is wanted in words, not as a Rust type.
#[test]
fn a_wrong_value_type_is_said_in_words() {
    let dir = temp("value-words");
    let (_, data) = tiny_run(&dir);
    let runs = s(&dir.join("runs"));
    for (set, want) in [
        ("train.epochs=abc", "expected a whole number (0 or more)"),
        ("train.epochs=-3", "expected a whole number (0 or more)"),
        ("optim.lr=abc", "expected a number"),
    ] {
        let err = fails(&["train", "--data", &s(&data), "--out", &runs, "--set", set]);
        assert!(err.contains(want) && !err.contains("usize") && !err.contains("f64"), "{set}: {err}");
    }
    std::fs::write(dir.join("bad.toml"), "[train]\nepochs = \"ten\"\n").unwrap();
    let err = fails(&["train", "--config", &s(&dir.join("bad.toml"))]);
    assert!(err.contains("bad.toml:2") && err.contains("expected a whole number (0 or more)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A standard output that cannot take the results is an error with a non-zero exit: closed
/// from the start (`>&-`) or full (`> /dev/full`); a reader that leaves early (`| head`) still
/// ends it quietly (`harden::a_closed_pipe_ends_predict_quietly`). `--top-k 0` is refused.
#[test]
fn predict_fails_when_its_output_cannot_be_written() {
    let dir = temp("closed-stdout");
    let (checkpoint, data) = tiny_run(&dir);
    let image = images(&data).remove(0);
    let args = ["predict", "--checkpoint", &s(&checkpoint), "--device", "cpu", &image];
    let closed = std::process::Command::new("sh")
        .arg("-c")
        .arg("exec \"$0\" \"$@\" >&-")
        .arg(env!("CARGO_BIN_EXE_torchlight"))
        .args(args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(1), "{said}");
    assert!(said.contains("standard output is closed") && !said.contains("panicked"), "{said}");
    let full = std::process::Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(args)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{said}");
    assert!(said.contains("standard output") && said.contains("No space left"), "{said}");
    // Discarding the output on purpose is not an error.
    let null = std::process::Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(args)
        .stdout(std::fs::File::create("/dev/null").unwrap())
        .output()
        .unwrap();
    assert!(null.status.success(), "{}", String::from_utf8_lossy(&null.stderr));
    let err = fails(&["predict", "--checkpoint", &s(&checkpoint), "--device", "cpu", "--top-k", "0", &image]);
    assert!(err.contains("--top-k 0") && err.contains("at least 1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--seed` takes what `train.seed` holds (0 to i64::MAX, a config's integers): one range,
/// said by the flag, instead of a value the flag takes and the config then refuses.
#[test]
fn the_seed_flag_takes_the_configs_range() {
    let err = fails(&["train", "--seed", "18446744073709551615"]);
    assert!(err.contains("--seed") && err.contains("0..=9223372036854775807"), "{err}");
    let err = fails(&["train", "--set", "train.seed=9223372036854775808"]);
    assert!(err.contains("train.seed") && err.contains("at most 9223372036854775807"), "{err}");
}
