//! ClassificationMetrics against PyTorch/NumPy values for the same logits
//! (`tests/fixtures/make_metrics.py`).

use std::collections::HashMap;
use tch::{Device, Kind, Tensor};
use torchlight_train::{ClassificationMetrics, ConfusionMatrix};

fn reference() -> HashMap<String, Tensor> {
    let path = crate::fixture("metrics.safetensors");
    Tensor::read_safetensors(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .collect()
}

fn scalar(t: &Tensor) -> f64 {
    t.double_value(&[])
}

#[test]
fn epoch_metrics_match_pytorch_and_numpy() {
    let r = reference();
    let (logits, targets) = (&r["logits"], &r["targets"]);
    let n = targets.size()[0];
    let mut m = ClassificationMetrics::new(7, 3, Device::Cpu);
    // Batches of 32 with a short last one, as a DataLoader yields them; the loss is tch's
    // cross-entropy (mean over the batch), as the training loop will compute it.
    for start in (0..n).step_by(32) {
        let len = 32.min(n - start);
        let (lb, tb) = (logits.narrow(0, start, len), targets.narrow(0, start, len));
        let loss = lb.cross_entropy_for_logits(&tb);
        m.update(&loss, &lb, &tb);
    }
    let s = m.compute();
    assert_eq!(s.count, n as u64);
    // Losses are f32 per batch in both; their weighted sum is f64 in both.
    assert!((s.loss - scalar(&r["loss"])).abs() <= 1e-6, "loss {} vs {}", s.loss, scalar(&r["loss"]));
    // Counts are exact, so accuracies are equal to the last bit.
    assert_eq!(s.top1, scalar(&r["top1"]));
    assert_eq!(s.topk, scalar(&r["top3"]));
    assert_eq!(s.k, 3);
    let expected = Vec::<i64>::try_from(&r["confusion"].view([-1])).unwrap();
    let counts: Vec<i64> = s.confusion.counts().iter().map(|&c| c as i64).collect();
    assert_eq!(counts, expected, "confusion matrix (rows = true class)");
    let per_class = Vec::<f64>::try_from(&r["per_class"]).unwrap();
    let ours: Vec<f64> = s.confusion.per_class_accuracy().into_iter().map(|a| a.unwrap()).collect();
    assert_eq!(ours, per_class);
    assert!((m.running_loss() - s.loss).abs() < 1e-15);
}

#[test]
fn device_tensors_agree_with_host_counting() {
    let logits =
        Tensor::from_slice(&[0.1f32, 0.9, 0.0, 0.8, 0.1, 0.1, 0.2, 0.3, 0.5, 0.6, 0.3, 0.1]).view([4, 3]);
    let targets = Tensor::from_slice(&[1i64, 0, 1, 2]);
    let mut m = ClassificationMetrics::new(3, 1, Device::Cpu);
    m.update(&Tensor::from(0.0f32), &logits, &targets);
    let preds = Vec::<i64>::try_from(&logits.argmax(1, false)).unwrap();
    let host = ConfusionMatrix::from_labels(
        3,
        &[1, 0, 1, 2],
        &preds.iter().map(|&p| p as usize).collect::<Vec<_>>(),
    );
    let s = m.compute();
    assert_eq!(s.confusion, host);
    // With k = 1, top-k accuracy is top-1 accuracy.
    assert_eq!(s.topk, s.top1);
    assert_eq!(s.top1, 0.5);
}

#[test]
fn loss_tensors_from_autograd_and_other_dtypes_are_accepted() {
    // Fixed values rather than randn, so this test never draws from torch's global generator.
    let values: Vec<f32> = (0..32).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
    let logits = Tensor::from_slice(&values).view([8, 4]).set_requires_grad(true);
    let targets = Tensor::from_slice(&[0i32, 1, 2, 3, 0, 1, 2, 3]);
    let loss = logits.cross_entropy_for_logits(&targets.to_kind(Kind::Int64));
    let mut m = ClassificationMetrics::new(4, 2, Device::Cpu);
    m.update(&loss, &logits, &targets);
    assert!((m.running_loss() - loss.double_value(&[])).abs() < 1e-6);
    assert_eq!(m.compute().confusion.total(), 8);
    // Nothing the metrics did joined the autograd graph.
    loss.backward();
    assert!(logits.grad().defined());
}

fn json_tensor(value: &serde_json::Value) -> tch::Tensor {
    let rows: Vec<Vec<f32>> = serde_json::from_value(value.clone()).unwrap();
    let (n, m) = (rows.len() as i64, rows[0].len() as i64);
    tch::Tensor::from_slice(&rows.concat()).view([n, m])
}

/// Multi-label F1, mean average precision, MAE and RMSE against scikit-learn 1.7.2
/// (`tests/fixtures/make_task_metrics.py`), fed in two uneven batches as a loop would.
#[test]
fn task_metrics_match_scikit_learn() {
    use torchlight_train::{
        MeanAbsoluteError, MeanAveragePrecision, Metric, MultiLabelF1, RootMeanSquaredError,
    };
    let text = std::fs::read_to_string(crate::fixture("task_metrics.json")).unwrap();
    let f: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (logits, targets) = (json_tensor(&f["logits"]), json_tensor(&f["targets"]));
    let (pred, target) = (json_tensor(&f["pred_reg"]), json_tensor(&f["target_reg"]));
    let mut metrics: Vec<Box<dyn Metric>> =
        vec![Box::new(MultiLabelF1::new(0.5)), Box::new(MeanAveragePrecision::new())];
    let mut regression: Vec<Box<dyn Metric>> =
        vec![Box::new(MeanAbsoluteError::new()), Box::new(RootMeanSquaredError::new())];
    for (start, len) in [(0, 20), (20, 37)] {
        for m in &mut metrics {
            m.update(&logits.narrow(0, start, len), &targets.narrow(0, start, len)).unwrap();
        }
        for m in &mut regression {
            m.update(&pred.narrow(0, start, len), &target.narrow(0, start, len)).unwrap();
        }
    }
    let close = |name: &str, got: f64, want: &serde_json::Value| {
        let want = want.as_f64().unwrap();
        assert!((got - want).abs() < 1e-6, "{name}: {got} vs scikit-learn {want}");
    };
    close("f1", metrics[0].compute()[0].1, &f["f1_macro"]);
    close("map", metrics[1].compute()[0].1, &f["map"]);
    let f1 = metrics[0].as_any().downcast_ref::<MultiLabelF1>().unwrap().per_label();
    let ap = metrics[1].as_any().downcast_ref::<MeanAveragePrecision>().unwrap().per_label();
    for j in 0..5 {
        close(&format!("f1[{j}]"), f1[j], &f["f1_per_label"][j]);
        close(&format!("ap[{j}]"), ap[j], &f["ap_per_label"][j]);
    }
    close("mae", regression[0].compute()[0].1, &f["mae"]);
    close("rmse", regression[1].compute()[0].1, &f["rmse"]);

    // The state round-trips (what a mid-epoch checkpoint keeps) and reset clears it.
    let state = metrics[1].state();
    let mut copy = MeanAveragePrecision::new();
    copy.load_state(&state).unwrap();
    assert_eq!(copy.compute(), metrics[1].compute());
    metrics[1].reset();
    assert!(metrics[1].compute()[0].1.is_nan());
    let err = MultiLabelF1::default().update(&logits, &targets.narrow(1, 0, 2)).unwrap_err();
    assert!(err.to_string().contains("multi-label F1: expects logits [N, L]"), "{err}");
}

/// The per-class report against scikit-learn 1.7.2's `classification_report` (labels 0..6,
/// `zero_division=0`; `tests/fixtures/make_classification_report.py`): a class never predicted
/// and a class with no sample included. The predictions are counted through
/// `ClassificationMetrics` in two uneven batches of one-hot logits, as `eval` counts them.
/// Tolerance 1e-12 (the same sums in another order).
#[test]
fn classification_report_matches_scikit_learn() {
    use torchlight_train::{ClassificationMetrics, ClassificationReport};
    let text = std::fs::read_to_string(crate::fixture("classification_report.json")).unwrap();
    let f: serde_json::Value = serde_json::from_str(&text).unwrap();
    let y_true: Vec<i64> = serde_json::from_value(f["y_true"].clone()).unwrap();
    let y_pred: Vec<i64> = serde_json::from_value(f["y_pred"].clone()).unwrap();
    let classes = 6;
    let logits = tch::Tensor::from_slice(&y_pred).one_hot(classes).to_kind(tch::Kind::Float);
    let targets = tch::Tensor::from_slice(&y_true);
    let mut m = ClassificationMetrics::new(classes as usize, 1, tch::Device::Cpu);
    let n = y_true.len() as i64;
    for (start, len) in [(0, 100), (100, n - 100)] {
        m.update(&tch::Tensor::from(0.0f32), &logits.narrow(0, start, len), &targets.narrow(0, start, len));
    }
    let report = ClassificationReport::from_confusion(&m.compute().confusion);
    let want = &f["report"];
    let check = |what: &str, got: &torchlight_train::ClassScores, want: &serde_json::Value| {
        for (key, value) in [("precision", got.precision), ("recall", got.recall), ("f1-score", got.f1)] {
            let w = want[key].as_f64().unwrap();
            assert!((value - w).abs() < 1e-12, "{what} {key}: {value} vs scikit-learn {w}");
        }
        assert_eq!(got.support as f64, want["support"].as_f64().unwrap(), "{what} support");
    };
    for (k, got) in report.per_class.iter().enumerate() {
        check(&format!("class {k}"), got, &want[k.to_string()]);
    }
    check("macro avg", &report.macro_avg, &want["macro avg"]);
    check("weighted avg", &report.weighted_avg, &want["weighted avg"]);
    assert!((report.accuracy - want["accuracy"].as_f64().unwrap()).abs() < 1e-12);
    // Class 4 is never predicted and class 5 has no sample: both score 0, as scikit-learn's.
    assert_eq!((report.per_class[4].precision, report.per_class[5].recall), (0.0, 0.0));
    // The most-confused pairs are the confusion matrix's largest off-diagonal cells, in order.
    let cm = m.compute().confusion;
    let mut cells: Vec<(u64, usize, usize)> = (0..6)
        .flat_map(|t| (0..6).map(move |p| (t, p)))
        .filter(|&(t, p)| t != p && cm.get(t, p) > 0)
        .map(|(t, p)| (cm.get(t, p), t, p))
        .collect();
    cells.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let got: Vec<(u64, usize, usize)> =
        report.confusions.iter().map(|c| (c.count, c.true_class, c.predicted)).collect();
    assert_eq!(got, cells);
    assert!(got[0].0 >= got[got.len() - 1].0 && got[0].0 > 1, "{got:?}");
}
