//! `torchlight eval --tta` and `predict --tta` on a tiny trained run: each view's accuracy and
//! the averaged one, checked against the views' softmax computed here independently (the
//! evaluation transform, and its output flipped with tch), and every augmentation's views.

use super::{fails, ok, s, temp};
use tch::{Device, Kind, Tensor};
use torchlight_checkpoint::Checkpoint;
use torchlight_recipes::image::eval_preprocessing;
use torchlight_recipes::{selected_checkpoint, ModelCard};
use torchlight_tensor::seed::rng_from_seed;
use torchlight_vision::{decode_file, ImageFolder, Sample, Transform};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// For every image of `test` (in the folder's order): its label and the softmax probabilities
/// `[2, C]` of the evaluation transform's output and of that output flipped left to right,
/// through the run's selected checkpoint.
fn independent_views(run: &std::path::Path, test: &std::path::Path) -> Vec<(i64, Tensor)> {
    let (card, model) = run_model(run);
    let transform = eval_preprocessing(&card.config).transform();
    let folder = ImageFolder::new(test).unwrap();
    folder
        .samples()
        .iter()
        .map(|(path, label)| {
            let image = decode_file(path).unwrap();
            let t =
                transform.apply(Sample::Image(image), &mut rng_from_seed(0)).unwrap().into_tensor().unwrap();
            let x = Tensor::from_slice(&t.data).view([1, 3, t.height as i64, t.width as i64]);
            let both = Tensor::cat(&[&x, &x.flip([3])], 0);
            let logits = tch::no_grad(|| model.forward_t(&both, false));
            (*label, logits.softmax(-1, Kind::Float))
        })
        .collect()
}

/// The run's selected checkpoint as a model, with its card.
fn run_model(run: &std::path::Path) -> (ModelCard, Box<dyn torchlight_nn::Module>) {
    let checkpoint = Checkpoint::load(selected_checkpoint(run)).unwrap();
    let card = ModelCard::from_checkpoint(&checkpoint).unwrap();
    let model = card.build_model(Device::Cpu).unwrap();
    checkpoint.restore_model(model.as_ref()).unwrap();
    (card, model)
}

fn accuracy(predictions: &[(i64, i64)]) -> f64 {
    predictions.iter().filter(|(label, pred)| label == pred).count() as f64 / predictions.len() as f64
}

#[test]
fn eval_and_predict_tta_average_the_views_softmax() {
    let dir = temp("tta");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "8"]);
    let data = dir.join("data/target");
    let runs = dir.join("runs");
    let (data_s, runs_s) = (s(&data), s(&runs));
    ok(&[
        "train",
        "--data",
        &data_s,
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
        &runs_s,
    ]);
    let run = runs.join("exp_001");
    let run_s = s(&run);
    let eval = |extra: &[&str]| {
        ok(&[&["eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu"], extra].concat())
    };

    // Here: each view's prediction and the mean of the two softmaxes.
    let views = independent_views(&run, &data.join("test"));
    let argmax = |p: &Tensor| p.argmax(-1, false).int64_value(&[]);
    let per_view: Vec<f64> = (0..2)
        .map(|v| accuracy(&views.iter().map(|(l, p)| (*l, argmax(&p.get(v)))).collect::<Vec<_>>()))
        .collect();
    let mean: Vec<Tensor> = views.iter().map(|(_, p)| p.mean_dim(0, false, Kind::Float)).collect();
    let averaged = accuracy(&views.iter().zip(&mean).map(|((l, _), m)| (*l, argmax(m))).collect::<Vec<_>>());

    let plain = json(&eval(&["--json"]));
    let e = json(&eval(&["--tta", "hflip", "--json"]));
    let t = &e["tta"];
    assert_eq!(t["mode"], "hflip", "{t}");
    assert_eq!(t["averages"], "softmax probabilities", "{t}");
    let names: Vec<&str> =
        t["views"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["eval", "hflip"]);
    for (v, want) in t["views"].as_array().unwrap().iter().zip(&per_view) {
        assert_eq!(v["accuracy"].as_f64().unwrap(), *want, "view {v} against its softmax computed here");
    }
    // The `eval` view is the evaluation transform: plain eval's figures exactly.
    assert_eq!(t["views"][0]["accuracy"], plain["accuracy"]);
    assert_eq!(t["views"][0]["loss"], plain["loss"]);
    assert_eq!(t["views"][0]["is_eval_transform"], true);
    assert_eq!(t["averaged"]["accuracy"].as_f64().unwrap(), averaged, "{t}");
    assert_eq!(e["accuracy"], t["averaged"]["accuracy"], "eval's accuracy is the averaged prediction's");
    let gain = t["accuracy_gain"].as_f64().unwrap();
    assert!((gain - (averaged - per_view[0])).abs() < 1e-12, "{t}");
    assert_eq!(e["images"], plain["images"]);

    let text = eval(&["--tta", "hflip"]);
    assert!(
        text.contains("test-time augmentation hflip: softmax probabilities averaged over 2 views"),
        "{text}"
    );
    assert!(text.contains(&format!("  eval      {:.4}", per_view[0])), "{text}");
    assert!(text.contains(&format!("  hflip     {:.4}", per_view[1])), "{text}");
    assert!(text.contains(&format!("  averaged  {averaged:.4}")), "{text}");
    assert!(text.contains(&format!("accuracy {averaged:.4}")), "{text}");

    // predict --tta: every class's probability is the mean of the two softmaxes computed here
    // (1e-6: the same [2, 3, 32, 32] batch through the same model; measured equal).
    let folder = ImageFolder::new(data.join("test")).unwrap();
    let images: Vec<String> = folder.samples().iter().map(|(p, _)| s(p)).collect();
    let classes = folder.classes().len().to_string();
    let mut args = vec!["predict", "--checkpoint", &run_s, "--device", "cpu", "--tta", "hflip"];
    args.extend(images.iter().map(String::as_str));
    let p = json(&ok(&[&args[..], &["--json", "--top-k", &classes]].concat()));
    let results = p.as_array().unwrap();
    assert_eq!(results.len(), images.len());
    for (r, m) in results.iter().zip(&mean) {
        assert_eq!(r["tta"]["mode"], "hflip", "{r}");
        assert_eq!(r["tta"]["views"], serde_json::json!(["eval", "hflip"]), "{r}");
        for top in r["top"].as_array().unwrap() {
            let c = folder.classes().iter().position(|c| top["class"] == c.as_str()).unwrap();
            let want = m.double_value(&[c as i64]);
            let got = top["probability"].as_f64().unwrap();
            assert!((got - want).abs() < 1e-6, "{}: {got} vs the mean softmax {want}", r["image"]);
        }
    }
    // An exported TorchScript module takes the views one at a time: the same probabilities
    // within 1e-6 (one image per forward instead of two; measured 9e-8).
    let pt = dir.join("model.pt");
    ok(&["export", "--checkpoint", &run_s, "--format", "torchscript", "--out", &s(&pt)]);
    let pt_s = s(&pt);
    let mut script_args = vec!["predict", "--checkpoint", &pt_s];
    script_args.extend(["--device", "cpu", "--tta", "hflip", "--json", "--top-k", &classes]);
    script_args.extend(images.iter().map(String::as_str));
    let from_script = json(&ok(&script_args));
    let mut worst = 0f64;
    for (a, b) in results.iter().zip(from_script.as_array().unwrap()) {
        assert_eq!(a["top"].as_array().unwrap().len(), b["top"].as_array().unwrap().len());
        for top in b["top"].as_array().unwrap() {
            let same = a["top"].as_array().unwrap().iter().find(|t| t["class"] == top["class"]).unwrap();
            worst = worst
                .max((same["probability"].as_f64().unwrap() - top["probability"].as_f64().unwrap()).abs());
        }
    }
    assert!(worst < 1e-6, "the exported module's mean softmax differs by {worst}");
    let out = torchlight_out(&args);
    assert_eq!(out.0.lines().count(), images.len(), "one line per image: {}", out.0);
    assert!(out
        .1
        .contains("test-time augmentation hflip: softmax probabilities averaged over 2 views (eval, hflip)"));

    // export --tta hflip puts the flip-average into the graph. The TorchScript module outputs
    // the probabilities predict --tta computes (1e-6), which predict does not pass through
    // softmax again (the sidecar says `output` = probabilities) and will not average twice.
    let tta_pt = dir.join("tta.pt");
    let tta_pt_s = s(&tta_pt);
    ok(&["export", "--checkpoint", &run_s, "--format", "torchscript", "--tta", "hflip", "--out", &tta_pt_s]);
    let sidecar = json(&std::fs::read_to_string(dir.join("tta.json")).unwrap());
    assert_eq!((sidecar["tta"].as_str(), sidecar["output"].as_str()), (Some("hflip"), Some("probabilities")));
    let mut graph_args =
        vec!["predict", "--checkpoint", &tta_pt_s, "--device", "cpu", "--json", "--top-k", &classes];
    graph_args.extend(images.iter().map(String::as_str));
    let in_graph = json(&ok(&graph_args));
    let mut worst = 0f64;
    for (a, b) in results.iter().zip(in_graph.as_array().unwrap()) {
        for top in b["top"].as_array().unwrap() {
            let same = a["top"].as_array().unwrap().iter().find(|t| t["class"] == top["class"]).unwrap();
            worst = worst
                .max((same["probability"].as_f64().unwrap() - top["probability"].as_f64().unwrap()).abs());
        }
    }
    assert!(worst < 1e-6, "the flip-averaging module's probabilities differ from predict --tta's by {worst}");
    let err = fails(&[&graph_args[..], &["--tta", "hflip"]].concat());
    assert!(err.contains("already averages test-time views"), "{err}");
    // The ONNX graph in onnxruntime, on the inputs a deployer builds from its metadata alone
    // (deploy_onnx.py, which reads `output` = probabilities), against the mean of the softmax
    // of the input and its flip computed here (1e-5: onnxruntime's kernels).
    let onnx = dir.join("tta.onnx");
    ok(&["export", "--checkpoint", &run_s, "--format", "onnx", "--tta", "hflip", "--out", &s(&onnx)]);
    let mut deploy = vec![s(&onnx), s(&dir)];
    deploy.extend(images.iter().take(3).cloned());
    let deploy: Vec<&str> = deploy.iter().map(String::as_str).collect();
    let theirs =
        torchlight_testing::run_reference_script("crates/cli/tests/deploy_onnx.py", &deploy).unwrap();
    let inputs: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(dir.join("inputs.safetensors")).unwrap().into_iter().collect();
    let (_, model) = run_model(&run);
    let mut worst = 0f64;
    for (i, line) in theirs.lines().enumerate() {
        let got: Vec<f64> = line.split(' ').skip(1).map(|p| p.parse().unwrap()).collect();
        let x = inputs[&i.to_string()].unsqueeze(0);
        let p = |x: &Tensor| tch::no_grad(|| model.forward_t(x, false)).softmax(-1, Kind::Float);
        let want = (p(&x) + p(&x.flip([3]))) / 2.0;
        assert_eq!(got.len() as i64, want.size()[1], "{line}");
        for (c, g) in got.iter().enumerate() {
            worst = worst.max((g - want.double_value(&[0, c as i64])).abs());
        }
    }
    assert_eq!(theirs.lines().count(), 3, "{theirs}");
    assert!(worst < 1e-5, "onnxruntime's flip average differs by {worst}");
    let err = fails(&[
        "export",
        "--checkpoint",
        &run_s,
        "--format",
        "onnx",
        "--tta",
        "five_crop",
        "--out",
        &s(&onnx),
    ]);
    assert!(err.contains("only hflip") && err.contains("predict --tta five_crop"), "{err}");
    let out = s(&dir.join("w.safetensors"));
    let err = fails(&[
        "export",
        "--checkpoint",
        &run_s,
        "--format",
        "safetensors",
        "--tta",
        "hflip",
        "--out",
        &out,
    ]);
    assert!(err.contains("weights alone"), "{err}");

    // The other augmentations: their views, one of them the evaluation transform exactly.
    for (mode, n, first) in
        [("five_crop", 5, "top_left"), ("ten_crop", 10, "top_left"), ("multi_scale", 3, "resize_32")]
    {
        let e = json(&eval(&["--tta", mode, "--json"]));
        let views = e["tta"]["views"].as_array().unwrap();
        assert_eq!((views.len(), views[0]["name"].as_str().unwrap()), (n, first), "{mode}: {e}");
        let evals: Vec<_> = views.iter().filter(|v| v["is_eval_transform"] == true).collect();
        assert_eq!(evals.len(), 1, "{mode}");
        assert_eq!(evals[0]["accuracy"], plain["accuracy"], "{mode}: {}", evals[0]);
        assert_eq!(e["accuracy"], e["tta"]["averaged"]["accuracy"], "{mode}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// stdout and stderr of a successful run.
fn torchlight_out(args: &[&str]) -> (String, String) {
    let out = super::torchlight(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}
