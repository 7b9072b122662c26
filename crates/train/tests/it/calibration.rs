//! Calibration metrics and temperature scaling against the reference formulas and fits of
//! `tests/fixtures/make_calibration.py` (PyTorch and SciPy on the same float32 logits).

use tch::{Kind, Tensor};
use torchlight_train::{
    brier_score, calibration_scores, expected_calibration_error, fit_temperature, maximum_calibration_error,
    negative_log_likelihood, plot_reliability, reliability_bins, Calibration, Metric, ReliabilityPanel,
    CALIBRATION_BINS,
};

fn cases() -> Vec<serde_json::Value> {
    let dir = torchlight_testing::generated_fixture("crates/train/tests/fixtures/make_calibration.py", &[])
        .expect("the reference PyTorch and SciPy make the calibration fixture");
    let text = std::fs::read_to_string(dir.join("calibration.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["bins"].as_u64(), Some(CALIBRATION_BINS as u64));
    json["cases"].as_array().unwrap().clone()
}

fn tensors(case: &serde_json::Value) -> (Tensor, Tensor) {
    let c = case["classes"].as_i64().unwrap();
    let z: Vec<f32> = case["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
        .collect();
    let y: Vec<i64> = case["labels"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    (Tensor::from_slice(&z).reshape([-1, c]), Tensor::from_slice(&y))
}

/// Both sides compute in f64 from the same float32 logits, so 1e-6 leaves room only for
/// summation order (measured at most 2.7e-15, at the best and at `ATEN_CPU_CAPABILITY=default`).
fn close(what: &str, got: f64, want: f64, tol: f64) {
    eprintln!("{what}: |difference| {:.1e}", (got - want).abs());
    assert!((got - want).abs() <= tol, "{what}: {got} vs reference {want} (tolerance {tol})");
}

#[test]
fn scores_equal_the_reference_formulas() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let (z, y) = tensors(&case);
        let want = &case["scores"];
        let s = calibration_scores(&z, &y);
        close(&format!("{name} ece"), s.ece, want["ece"].as_f64().unwrap(), 1e-6);
        close(&format!("{name} mce"), s.mce, want["mce"].as_f64().unwrap(), 1e-6);
        close(&format!("{name} nll"), s.nll, want["nll"].as_f64().unwrap(), 1e-6);
        close(&format!("{name} brier"), s.brier, want["brier"].as_f64().unwrap(), 1e-6);
        assert_eq!(s.ece, expected_calibration_error(&z, &y));
        assert_eq!(s.mce, maximum_calibration_error(&z, &y));
        assert_eq!(s.nll, negative_log_likelihood(&z, &y));
        assert_eq!(s.brier, brier_score(&z, &y));
        let bins = reliability_bins(&z, &y, CALIBRATION_BINS);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>() as i64, y.size()[0]);

        // After dividing by the reference temperature.
        let t = case["t_scipy"].as_f64().unwrap();
        let scaled = z.to_kind(Kind::Double) / t;
        let s = calibration_scores(&scaled, &y);
        let want = &case["scores_after"];
        for (key, got) in [("ece", s.ece), ("mce", s.mce), ("nll", s.nll), ("brier", s.brier)] {
            close(&format!("{name} {key} after T"), got, want[key].as_f64().unwrap(), 1e-6);
        }
    }
}

#[test]
fn fitted_temperature_equals_scipy_and_lbfgs() {
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let (z, y) = tensors(&case);
        let t = fit_temperature(&z, &y).unwrap();
        let (scipy, lbfgs) = (case["t_scipy"].as_f64().unwrap(), case["t_lbfgs"].as_f64().unwrap());
        eprintln!("{name}: T = {t:.9}, SciPy {scipy:.9}, LBFGS {lbfgs:.9}");
        close(&format!("{name} T vs SciPy"), t, scipy, 1e-3);
        close(&format!("{name} T vs LBFGS"), t, lbfgs, 1e-3);
        // And the NLL at T is no worse than at the reference's T.
        let nll = |t: f64| negative_log_likelihood(&(z.to_kind(Kind::Double) / t), &y);
        assert!(nll(t) <= nll(scipy) + 1e-12, "{name}: {} > {}", nll(t), nll(scipy));
    }
}

#[test]
fn metric_accumulates_batches_like_the_whole() {
    let case = &cases()[0];
    let (z, y) = tensors(case);
    let mut metric = Calibration::new();
    for (zb, yb) in z.split(128, 0).iter().zip(y.split(128, 0)) {
        metric.update(zb, &yb).unwrap();
    }
    let got: std::collections::HashMap<String, f64> = metric.compute().into_iter().collect();
    let want = calibration_scores(&z, &y);
    assert_eq!(got["ece"], want.ece);
    assert_eq!(got["brier"], want.brier);
    // The saved state restores the same figures.
    let mut again = Calibration::new();
    again.load_state(&metric.state()).unwrap();
    assert_eq!(again.compute(), metric.compute());
    assert!(metric.update(&z, &y.narrow(0, 0, 3)).is_err());
}

#[test]
fn reliability_png_has_panels_before_and_after() {
    let case = &cases()[0];
    let (z, y) = tensors(case);
    let t = fit_temperature(&z, &y).unwrap();
    let panel = |title: &str, z: &Tensor| ReliabilityPanel {
        title: title.to_string(),
        bins: reliability_bins(z, &y, CALIBRATION_BINS),
    };
    let dir = crate::temp_dir();
    let path = dir.path().join("reliability.png");
    plot_reliability(&[panel("before", &z), panel(&format!("after, T = {t:.2}"), &(&z / t))], &path).unwrap();
    let image = image::open(&path).unwrap().to_rgb8();
    let (w, h) = torchlight_train::RELIABILITY_PANEL_SIZE;
    assert_eq!(image.dimensions(), (2 * w, h));
    // Both panels draw bars (not only white).
    for x0 in [0, w] {
        let coloured = (x0..x0 + w)
            .flat_map(|x| (0..h).map(move |yy| (x, yy)))
            .filter(|&(x, yy)| image.get_pixel(x, yy).0 != [255, 255, 255])
            .count();
        assert!(coloured > 10_000, "panel at {x0} is nearly empty ({coloured} pixels)");
    }
    if let Ok(keep) = std::env::var("TORCHLIGHT_KEEP_PLOT") {
        std::fs::copy(&path, keep).unwrap();
    }
}
