//! `torchlight eval --calibrate` on a tiny trained run: the temperature, the scores before and
//! after in the text and JSON output, and `reliability.png`.

use super::{fails, ok, s, temp};

#[test]
fn eval_calibrate_fits_a_temperature_and_draws_the_reliability_diagram() {
    let dir = temp("calibrate");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "8"]);
    let data = dir.join("data/target");
    let runs = dir.join("runs");
    ok(&[
        "train",
        "--data",
        &s(&data),
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--workers",
        "1",
        "--device",
        "cpu",
        "--out",
        &s(&runs),
    ]);
    let run = runs.join("exp_001");
    let png = dir.join("reliability.png");
    let (run_s, data_s, png_s) = (s(&run), s(&data), s(&png));
    let eval = |extra: &[&str]| {
        let mut args =
            vec!["eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu", "--calibrate"];
        args.extend(["--reliability-png", &png_s]);
        args.extend(extra);
        ok(&args)
    };
    let text = eval(&[]);
    assert!(text.contains("calibration: temperature T = "), "{text}");
    for row in ["val    z ", "val    z / T", "test   z ", "test   z / T"] {
        assert!(text.contains(row), "no `{row}` row in {text}");
    }
    // A PNG's IHDR chunk holds its width and height (big-endian) at bytes 16..24.
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let (w, h) = torchlight_train::RELIABILITY_PANEL_SIZE;
    assert_eq!((be(16), be(20)), (2 * w, 2 * h), "four panels: val and test, before and after");
    if let Ok(keep) = std::env::var("TORCHLIGHT_KEEP_PLOT") {
        std::fs::copy(&png, keep).unwrap();
    }
    std::fs::remove_file(&png).unwrap();

    let json: serde_json::Value = serde_json::from_str(&eval(&["--json"])).unwrap();
    let c = &json["calibration"];
    let t = c["temperature"].as_f64().unwrap();
    assert!(t > 0.0 && t.is_finite(), "{c}");
    assert_eq!(c["bins"], 15);
    for split in ["val", "data"] {
        for when in ["before", "after"] {
            for key in ["ece", "mce", "nll", "brier"] {
                let v = c[split][when][key].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v >= 0.0, "{split}.{when}.{key} = {v}");
            }
        }
        // T minimises the validation NLL, so dividing by it never raises it there.
        if split == "val" {
            let (b, a) =
                (c["val"]["before"]["nll"].as_f64().unwrap(), c["val"]["after"]["nll"].as_f64().unwrap());
            assert!(a <= b + 1e-9, "val NLL rose from {b} to {a}");
        }
    }
    assert_eq!(c["data"]["images"], json["images"]);
    assert!(png.exists(), "--json still draws the diagram");

    // The test split alone, with the run's data.root moved away: the error names both.
    let moved = dir.join("moved");
    std::fs::rename(&data, &moved).unwrap();
    let err = fails(&[
        "eval",
        "--checkpoint",
        &s(&run),
        "--data",
        &s(&moved.join("test")),
        "--device",
        "cpu",
        "--calibrate",
        "--reliability-png",
        &s(&png),
    ]);
    assert!(err.contains("--calibrate") && err.contains("data.root") && err.contains("train/"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
