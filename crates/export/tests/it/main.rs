//! Integration tests of torchlight-export (one binary: each test binary links libtorch).
//! Exported files are checked by real runtimes: onnx.checker, onnxruntime and torch.jit,
//! through `tests/check_exports.py` (and `tests/check_text_exports.py` for the text
//! classifiers, `text.rs`) run by the reference Python.

mod text;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tch::{Device, Kind, Tensor};
use torchlight_export::*;
use torchlight_nn::*;

/// Tests that seed or draw from torch's process-wide generator for fixed values hold this
/// lock, so that the test harness's threads do not interleave their draws.
fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tl-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three training-mode forwards so BatchNorm's running statistics are not the trivial 0/1.
fn warm_up(model: &dyn Module, shape: &[i64]) {
    let _g = torchlight_tensor::no_grad();
    for i in 0..3 {
        let _ = model.forward_t(&(Tensor::randn(shape, (Kind::Float, Device::Cpu)) * (i + 1) as f64), true);
    }
}

/// Writes the Rust model's eval outputs at batch 1 and 7 for the checker.
fn write_io(dir: &Path, name: &str, model: &dyn Module, item_shape: &[i64]) {
    let _g = torchlight_tensor::no_grad();
    let mut tensors = Vec::new();
    for (b, tag) in [(1, "1"), (7, "7")] {
        let mut shape = vec![b];
        shape.extend(item_shape);
        let x = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu));
        let y = model.forward_t(&x, false);
        tensors.push((format!("x{tag}"), x));
        tensors.push((format!("y{tag}"), y));
    }
    Tensor::write_safetensors(&tensors, dir.join(format!("{name}-io.safetensors"))).unwrap();
}

/// Runs the checker over `dir`; returns (runtime, file, batch, max diff, scale) rows and
/// (file, key, value) metadata rows.
#[allow(clippy::type_complexity)]
fn check(dir: &Path) -> (Vec<(String, String, String, f64, f64)>, Vec<(String, String, String)>) {
    let out = torchlight_testing::run_reference_script(
        "crates/export/tests/check_exports.py",
        &[dir.to_str().unwrap()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut rows = Vec::new();
    let mut meta = Vec::new();
    for line in out.lines() {
        let parts: Vec<&str> = line.splitn(5, ' ').collect();
        if parts[0] == "meta" {
            let rest: Vec<&str> = line.splitn(4, ' ').collect();
            meta.push((rest[1].to_string(), rest[2].to_string(), rest[3].to_string()));
        } else {
            rows.push((
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].to_string(),
                parts[3].parse().unwrap(),
                parts[4].parse().unwrap(),
            ));
        }
    }
    (rows, meta)
}

fn assert_rows(rows: &[(String, String, String, f64, f64)], expected_rows: usize) {
    assert_eq!(rows.len(), expected_rows, "{rows:?}");
    for (runtime, file, batch, diff, scale) in rows {
        // Tolerance 1e-4 of the output's scale: float32 through up to 50 layers, different
        // kernels (onnxruntime's) or the same kernels in another thread layout (torch.jit).
        // Measured at most 0.03 of it (4.4e-6 at scale 1.5) under ATEN_CPU_CAPABILITY default,
        // avx2 and avx512, which onnxruntime does not follow (its own dispatch is the CPU's).
        let tol = 1e-4 * scale.max(1.0);
        eprintln!("{runtime:12} {file:28} {batch}: max |diff| {diff:.2e} (scale {scale:.2})");
        assert!(diff <= &tol, "{runtime} {file} at {batch}: max |diff| {diff:e} > {tol:e}");
    }
}

#[test]
fn resnets_export_to_onnx_and_torchscript_that_real_runtimes_agree_with() {
    let dir = out_dir("resnet");
    let classes: Vec<String> = (0..10).map(|i| format!("class \"{i}\"")).collect();
    // resnet18d: timm's deep stem (its `bn1` follows a Sequential, so it stays a
    // BatchNormalization node when folding) and average-pool shortcuts (ceil_mode,
    // count_include_pad=False).
    for arch in ["resnet18", "resnet34", "resnet50", "resnet18d"] {
        let model = resnet_by_name(arch, 10).unwrap();
        // timm's zero_init_last leaves the d variant's residual branches at 0: made live.
        visit_modules(&model, &mut |_, m| {
            if let Some(bn) = m.as_any().downcast_ref::<BatchNorm2d>() {
                let _g = torchlight_tensor::no_grad();
                bn.weight.iter().for_each(|w| {
                    let _ = w.shallow_clone().fill_(1.0);
                });
            }
        });
        warm_up(&model, &[4, 3, 64, 64]);
        // torchvision's preset at 64: Resize(73), CenterCrop(64), ImageNet's mean and std.
        let preprocessing = EvalPreprocessing::classification(64);
        let options =
            OnnxOptions::new(&[3, 64, 64]).with_class_names(&classes).with_preprocessing(&preprocessing);
        export_onnx(&model, &options, dir.join(format!("{arch}__bn.onnx"))).unwrap();
        if arch == "resnet18" || arch == "resnet18d" {
            let folded = options.clone().with_fold_batch_norm(true);
            let count_bn = |o: &OnnxOptions| {
                let graph = onnx_model(&model, o).unwrap().graph.unwrap();
                graph.node.iter().filter(|n| n.op_type == "BatchNormalization").count()
            };
            let expected = if arch == "resnet18" { (20, 0) } else { (22, 1) };
            assert_eq!(
                (count_bn(&options), count_bn(&folded)),
                expected,
                "{arch}: every BatchNorm folds into its conv (but a deep stem's bn1)"
            );
            export_onnx(&model, &folded, dir.join(format!("{arch}__folded.onnx"))).unwrap();
        }
        // Traced at batch 2, checked at batches 1 and 7.
        let example = Tensor::randn([2, 3, 64, 64], (Kind::Float, Device::Cpu));
        export_torchscript(&model, &example, dir.join(format!("{arch}__traced.pt"))).unwrap();
        assert!(model.fc.weight.requires_grad(), "tracing restores requires_grad");
        write_io(&dir, arch, &model, &[3, 64, 64]);
    }
    let (rows, meta) = check(&dir);
    assert_rows(&rows, 2 * (4 + 2 + 4));
    let classes_json = meta.iter().find(|(f, k, _)| f == "resnet18__bn.onnx" && k == "class_names").unwrap();
    assert!(classes_json.2.starts_with("[\"class \\\"0\\\"\", "), "{}", classes_json.2);
    assert!(meta.iter().any(|(_, k, v)| k == "input_size" && v == "[3, 64, 64]"));
    assert!(meta.iter().any(|(_, k, v)| k == "mean" && v == "[0.485, 0.456, 0.406]"));
    // What onnx.load sees of the preprocessing: every step a deployer needs.
    let of =
        |key: &str| meta.iter().find(|(f, k, _)| f == "resnet18__bn.onnx" && k == key).map(|m| m.2.as_str());
    assert_eq!(of("resize_shorter_side"), Some("73"));
    assert_eq!(of("resize_interpolation"), Some("bilinear"));
    assert_eq!(of("center_crop"), Some("[64, 64]"));
    assert_eq!(of("color_order"), Some("RGB"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_supported_layer_exports_in_a_sequential() {
    let dir = out_dir("layers");
    let model = Sequential::new()
        .add(Conv2d::new(3, 8, 3, Conv2dConfig::default().with_padding(1)))
        .add(BatchNorm2d::new(8, BatchNormConfig::default()))
        .add(LeakyReLU { negative_slope: 0.1 })
        .add(MaxPool2d { ceil_mode: true, ..MaxPool2d::new(2, 2, 0) })
        .add(Conv2d::new(
            8,
            8,
            3,
            Conv2dConfig::default().with_groups(2).with_dilation(2).with_padding(2).with_bias(false),
        ))
        .add(GELU)
        .add(AvgPool2d { count_include_pad: false, ..AvgPool2d::new(3, 2, 1) })
        .add(SiLU)
        .add(Dropout { p: 0.3 })
        .add(Identity)
        .add(Sigmoid)
        .add(AdaptiveAvgPool2d { output_size: [1, 1] })
        .add(Flatten::default())
        .add(Linear::new(8, 6, true))
        .add(Tanh)
        .add(Linear::new(6, 4, false))
        .add(ReLU);
    warm_up(&model, &[4, 3, 15, 15]);
    let options = OnnxOptions::new(&[3, 15, 15]);
    export_onnx(&model, &options, dir.join("seq__bn.onnx")).unwrap();
    export_onnx(&model, &options.clone().with_fold_batch_norm(true), dir.join("seq__folded.onnx")).unwrap();
    export_torchscript(
        &model,
        &Tensor::randn([3, 3, 15, 15], (Kind::Float, Device::Cpu)),
        dir.join("seq__traced.pt"),
    )
    .unwrap();
    write_io(&dir, "seq", &model, &[3, 15, 15]);
    let (rows, _) = check(&dir);
    assert_rows(&rows, 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A layer the exporter has no rule for.
#[derive(Debug)]
struct Swish2;

impl ModuleT for Swish2 {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs * xs.sigmoid() * 2.0
    }
}

impl Module for Swish2 {
    fn kind(&self) -> &'static str {
        "Swish2"
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

#[test]
fn an_unsupported_layer_is_an_error_naming_its_path_and_nothing_is_written() {
    let dir = out_dir("unsupported");
    let model = Sequential::new()
        .add(Conv2d::new(3, 4, 3, Conv2dConfig::default()))
        .add_named("act", Swish2)
        .add(AdaptiveAvgPool2d { output_size: [1, 1] });
    let path = dir.join("bad.onnx");
    let err = export_onnx(&model, &OnnxOptions::new(&[3, 8, 8]), &path).unwrap_err().to_string();
    assert!(err.contains("`act` (Swish2)"), "{err}");
    assert!(!path.exists());
    let model = Sequential::new()
        .add(Conv2d::new(3, 4, 3, Conv2dConfig::default()))
        .add(AdaptiveAvgPool2d { output_size: [2, 2] });
    let err = export_onnx(&model, &OnnxOptions::new(&[3, 8, 8]), &path).unwrap_err().to_string();
    assert!(err.contains("`1` (AdaptiveAvgPool2d)") && err.contains("[2, 2]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--tta hflip` in the graph: onnxruntime and torch.jit give the mean of the softmax of the
/// (temperature-divided) logits of the image and of its mirror image, computed here from two
/// separate Rust forwards, at batches 1 and 7 (tolerance 1e-4, as every export: probabilities
/// are at most 1); the ONNX metadata says so. A model whose output is not `[N, classes]` is
/// refused by both formats with the reason.
#[test]
fn the_hflip_average_exports_into_onnx_and_torchscript_graphs() {
    let dir = out_dir("tta");
    let _rng = torch_rng_lock();
    tch::manual_seed(7);
    let model = resnet18(5);
    warm_up(&model, &[4, 3, 32, 32]);
    // A temperature below 1 spreads the untrained logits, so the two views differ clearly.
    let t = 0.05;
    {
        let _g = torchlight_tensor::no_grad();
        let mut tensors = Vec::new();
        for (b, tag) in [(1, "1"), (7, "7")] {
            let x = Tensor::randn([b, 3, 32, 32], (Kind::Float, Device::Cpu));
            let p = |x: &Tensor| (model.forward_t(x, false) / t).softmax(1, Kind::Float);
            let y = (p(&x) + p(&x.flip([3]))) / 2.0;
            tensors.push((format!("x{tag}"), x));
            tensors.push((format!("y{tag}"), y));
        }
        Tensor::write_safetensors(&tensors, dir.join("resnet18tta-io.safetensors")).unwrap();
    }
    let options = OnnxOptions::new(&[3, 32, 32]).with_temperature(t).with_hflip_tta(true);
    export_onnx(&model, &options, dir.join("resnet18tta__hflip.onnx")).unwrap();
    let example = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    export_torchscript_hflip_tta(&model, &example, Some(t), dir.join("resnet18tta__hflip.pt")).unwrap();
    let (rows, meta) = check(&dir);
    assert_rows(&rows, 4);
    let of = |key: &str| meta.iter().find(|(_, k, _)| k == key).map(|m| m.2.as_str());
    assert_eq!(
        (of("tta"), of("output"), of("temperature")),
        (Some("hflip"), Some("probabilities"), Some("0.05"))
    );

    let features = Sequential::new().add(Conv2d::new(3, 4, 3, Conv2dConfig::default()));
    let err = export_onnx(&features, &OnnxOptions::new(&[3, 8, 8]).with_hflip_tta(true), dir.join("f.onnx"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("hflip") && err.contains("[1, 4, 6, 6]"), "{err}");
    let example = Tensor::zeros([2, 3, 8, 8], (Kind::Float, Device::Cpu));
    let err =
        export_torchscript_hflip_tta(&features, &example, None, dir.join("f.pt")).unwrap_err().to_string();
    assert!(err.contains("hflip") && err.contains("[1, 4, 6, 6]"), "{err}");
    assert!(!dir.join("f.onnx").exists() && !dir.join("f.pt").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn torchscript_written_here_loads_back_in_rust() {
    let dir = out_dir("jit-rust");
    let model = resnet18(3);
    let path = dir.join("m.pt");
    export_torchscript(&model, &Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu)), &path).unwrap();
    let loaded = load_torchscript(&path).unwrap();
    let x = Tensor::randn([5, 3, 32, 32], (Kind::Float, Device::Cpu));
    let _g = torchlight_tensor::no_grad();
    let ours = model.forward_t(&x, false);
    let theirs = loaded.forward_ts(&[x]).unwrap();
    assert!(ours.allclose(&theirs, 1e-5, 1e-5, false), "traced at batch 2, run at batch 5");
    let err = load_torchscript(dir.join("absent.pt")).unwrap_err().to_string();
    assert!(err.contains("absent.pt"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writing into a folder that does not exist is an error naming the file asked for (not an
/// internal temporary file), for both formats, and nothing is left behind.
#[test]
fn exporting_into_a_missing_folder_names_the_file_asked_for() {
    let dir = out_dir("missing");
    let model = Linear::new(4, 2, true);
    let onnx = dir.join("no/such/model.onnx");
    let err = export_onnx(&model, &OnnxOptions::new(&[4]), &onnx).unwrap_err().to_string();
    assert!(err.contains(&onnx.display().to_string()) && err.contains("does not exist"), "{err}");
    assert!(!err.contains(".tmp"), "{err}");
    let pt = dir.join("no/such/model.pt");
    let err =
        export_torchscript(&model, &Tensor::zeros([2, 4], (Kind::Float, Device::Cpu)), &pt).unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains(&pt.display().to_string()) && err.contains("does not exist") && !err.contains(".tmp"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `.pt` that is not TorchScript (a state_dict from torch.save, a text file) is one line
/// saying so, without libtorch's C++ stack.
#[test]
fn a_file_that_is_not_torchscript_is_one_clear_line() {
    let dir = out_dir("not-jit");
    let state_dict =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/fixtures/pth_cases/linear.pth");
    let text = dir.join("notes.pt");
    std::fs::write(&text, "not a model").unwrap();
    for (path, what) in
        [(state_dict.as_path(), "saved with torch.save"), (text.as_path(), "not a zip archive")]
    {
        let err = load_torchscript(path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("not a TorchScript module"),
            "{err}"
        );
        assert!(err.contains(what), "{err}");
        assert!(!err.contains("frame #") && !err.contains('\n') && !err.contains("export failed"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Gives a model's near-zero initial parameters values, so an export check sees every path and
/// outputs of order 1: ConvNeXt's layer scale (1e-6), a ViT's zero class token and head, the
/// classifiers' N(0, 0.01) Linears.
fn wake_up(model: &dyn Module) {
    let _g = torchlight_tensor::no_grad();
    for (name, p) in named_parameters(model) {
        let near_zero = ["layer_scale", "class_token", "heads.", "classifier."];
        if near_zero.iter().any(|k| name.starts_with(k) || name.ends_with(k)) {
            p.shallow_clone().copy_(&(Tensor::randn(p.size(), (Kind::Float, Device::Cpu)) * 0.5));
        }
    }
}

#[test]
fn backbones_export_to_onnx_and_torchscript_that_real_runtimes_agree_with() {
    let dir = out_dir("backbones");
    // One of each block kind: InvertedResidual (ReLU6; Hardswish, SE with Hardsigmoid), MBConv
    // (SiLU, SE with Sigmoid, stochastic depth), FusedMBConv, CNBlock (LayerNorm2d, Permute,
    // LayerNorm, GELU, layer scale), the ViT encoder (attention, class token).
    let archs = [
        "mobilenet_v2",
        "mobilenet_v3_large",
        "efficientnet_b0",
        "efficientnet_v2_s",
        "convnext_tiny",
        "vit_s_16",
    ];
    for arch in archs {
        let model =
            architecture(arch).unwrap().build(ModelSpec::new(5, 32), LayerOptions::default()).unwrap();
        wake_up(model.as_ref());
        warm_up(model.as_ref(), &[4, 3, 32, 32]);
        let options = OnnxOptions::new(&[3, 32, 32]);
        export_onnx(model.as_ref(), &options, dir.join(format!("{arch}__onnx.onnx"))).unwrap();
        if arch == "mobilenet_v3_large" {
            let folded = options.clone().with_fold_batch_norm(true);
            let graph = onnx_model(model.as_ref(), &folded).unwrap().graph.unwrap();
            assert_eq!(graph.node.iter().filter(|n| n.op_type == "BatchNormalization").count(), 0);
            export_onnx(model.as_ref(), &folded, dir.join(format!("{arch}__folded.onnx"))).unwrap();
        }
        let example = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
        export_torchscript(model.as_ref(), &example, dir.join(format!("{arch}__traced.pt"))).unwrap();
        write_io(&dir, arch, model.as_ref(), &[3, 32, 32]);
    }
    let (rows, _) = check(&dir);
    assert_rows(&rows, 2 * (2 * archs.len() + 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A layer of a user's own, with its hand-written ONNX rule: `x * sigmoid(x) * alpha`, alpha a
/// learned per-channel parameter (an initializer).
#[derive(Debug, Module)]
struct ScaledSwish {
    #[param]
    alpha: Tensor,
}

impl tch::nn::ModuleT for ScaledSwish {
    fn forward_t(&self, x: &Tensor, _train: bool) -> Tensor {
        x * x.sigmoid() * self.alpha.view([1, -1, 1, 1])
    }
}

impl OnnxExport for ScaledSwish {
    fn export_onnx(
        &self,
        graph: &mut OnnxGraph,
        path: &str,
        x: OnnxValue,
    ) -> torchlight_export::Result<OnnxValue> {
        let s = graph.node("Sigmoid", path, vec![x.name.clone()], vec![]);
        let xs = graph.node("Mul", path, vec![x.name, s], vec![]);
        let alpha = graph.initializer(format!("{path}.alpha"), &self.alpha.view([1, -1, 1, 1]));
        let y = graph.node("Mul", path, vec![xs, alpha], vec![]);
        Ok(OnnxValue { name: y, rank: x.rank })
    }
}

/// A user's model with its own forward: conv, the user's layer, a residual add, pooling, head.
/// Its rule hands the known children back to the exporter.
#[derive(Debug, Module)]
struct UserNet {
    conv: Conv2d,
    act: ScaledSwish,
    head: Linear,
}

impl tch::nn::ModuleT for UserNet {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let y = self.act.forward_t(&self.conv.forward_t(x, train), train) + x;
        self.head.forward_t(&y.mean_dim(&[2i64, 3][..], false, Kind::Float), train)
    }
}

impl OnnxExport for UserNet {
    fn export_onnx(
        &self,
        graph: &mut OnnxGraph,
        path: &str,
        x: OnnxValue,
    ) -> torchlight_export::Result<OnnxValue> {
        let y = graph.module("conv", &self.conv, x.clone())?;
        let y = graph.module("act", &self.act, y)?;
        let y = graph.node("Add", path, vec![y.name, x.name], vec![]);
        let pooled = graph.node(
            "ReduceMean",
            path,
            vec![y],
            vec![onnx_attr::ints("axes", &[2, 3]), onnx_attr::int("keepdims", 0)],
        );
        graph.module("head", &self.head, OnnxValue { name: pooled, rank: Some(2) })
    }
}

/// A model and a layer of the user's own export through their `OnnxExport` rules, and
/// onnxruntime agrees with the Rust forward; without the rule the error says how to add one.
#[test]
fn a_users_own_layers_export_through_their_onnx_rules() {
    let dir = out_dir("user-rule");
    let net = UserNet {
        conv: Conv2d::new(3, 3, 3, Conv2dConfig::default().with_padding(1)),
        act: ScaledSwish { alpha: Tensor::from_slice(&[0.5f32, 1.5, -2.0]).set_requires_grad(true) },
        head: Linear::new(3, 4, true),
    };
    let options = OnnxOptions::new(&[3, 8, 8]);
    let err = export_onnx(&net, &options, dir.join("usernet__onnx.onnx")).unwrap_err().to_string();
    assert!(err.contains("OnnxExport") && err.contains("register_onnx_rule"), "{err}");
    register_onnx_rule::<UserNet>();
    register_onnx_rule::<ScaledSwish>();
    export_onnx(&net, &options, dir.join("usernet__onnx.onnx")).unwrap();
    write_io(&dir, "usernet", &net, &[3, 8, 8]);
    let (rows, _) = check(&dir);
    assert_rows(&rows, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
