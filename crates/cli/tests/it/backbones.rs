//! The backbones beyond ResNet from the command line: every architecture's summary freezes all
//! but its own head; one of each family trains an epoch on tiny generated data, starts from
//! weights saved with DDP's `module.` prefix or under other keys (`--key-rewrite`), and exports
//! ONNX and TorchScript that onnxruntime and torch.jit agree with.

use super::{fails, ok, s, temp};
use tch::{Device, Kind, Tensor};

#[test]
fn each_architecture_freezes_all_but_its_own_head() {
    // (name, trainable parameters of a 3-class head: in_features * 3 + 3)
    let heads = [
        ("mobilenet_v2", 1280),
        ("mobilenet_v3_small", 1024),
        ("mobilenet_v3_large", 1280),
        ("efficientnet_b0", 1280),
        ("efficientnet_b1", 1280),
        ("efficientnet_b2", 1408),
        ("efficientnet_b3", 1536),
        ("efficientnet_v2_s", 1280),
        ("convnext_tiny", 768),
        ("convnext_small", 768),
        ("vit_b_16", 768),
        ("vit_s_16", 384),
    ];
    for (name, features) in heads {
        let out = ok(&[
            "summary",
            "--model",
            name,
            "--num-classes",
            "3",
            "--image-size",
            "32",
            "--frozen-backbone",
        ]);
        let trainable = features * 3 + 3;
        assert!(
            out.contains(&format!("({trainable} trainable)")),
            "{name}: {}",
            out.lines().last().unwrap_or("")
        );
    }
    let err = fails(&["summary", "--model", "vit_b_16", "--image-size", "40"]);
    assert!(err.contains("vit_b_16") && err.contains("patch size 16"), "{err}");
}

#[test]
fn summary_prints_the_parameter_groups_of_the_optim_rules() {
    let out = ok(&["summary", "--model", "resnet18", "--num-classes", "3"]);
    assert!(out.contains("4 parameter groups:"), "{out}");
    assert!(out.contains("(prefix `fc.`, no weight decay): fc.bias"), "{out}");
    // From scratch every group starts at optim.lr (1e-3).
    assert!(out.contains("lr 1.0000e-3, weight decay 0.01, 20 tensors"), "{out}");
    // timm's resnet18 layers: the stem, eight blocks, the head; decay and no decay in each.
    let out = ok(&["summary", "--model", "resnet18", "--num-classes", "3", "--set", "optim.layer_decay=0.5"]);
    assert!(out.contains("20 parameter groups:"), "{out}");
    assert!(
        out.contains(
            "lr 1.9531e-6, weight decay 0.01, 1 tensors, 9408 values (layer 0, weight decay): conv1.weight"
        ),
        "{out}"
    );
    // model.freeze_bn: said, counted out of the trainable parameters and in the groups.
    let out = ok(&["summary", "--model", "resnet18", "--num-classes", "3", "--set", "model.freeze_bn=true"]);
    assert!(out.contains("model.freeze_bn: 20 BatchNorm layers frozen"), "{out}");
    assert!(out.contains("(no weight decay), 40 frozen: bn1.weight"), "{out}");
    assert!(out.contains("11178051 parameters (11168451 trainable)"), "{out}");
    let err = fails(&["summary", "--model", "resnet18", "--set", "optim.layer_decay=2"]);
    assert!(err.contains("optim.layer_decay") && err.contains("(0, 1]"), "{err}");
}

/// Writes `{name}-io.safetensors` for the export checker: the checkpoint's eval outputs at
/// batch 1 and 7, computed by the library the CLI runs.
fn write_io(dir: &std::path::Path, name: &str, run: &std::path::Path) {
    let checkpoint = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/best")).unwrap();
    let card = torchlight_recipes::ModelCard::from_checkpoint(&checkpoint).unwrap();
    let model = card.build_model(Device::Cpu).unwrap();
    checkpoint.restore_model(model.as_ref()).unwrap();
    let _g = torchlight_tensor::no_grad();
    let mut tensors = Vec::new();
    for b in [1, 7] {
        let x = Tensor::randn([b, 3, 32, 32], (Kind::Float, Device::Cpu));
        tensors.push((format!("y{b}"), model.forward_t(&x, false)));
        tensors.push((format!("x{b}"), x));
    }
    Tensor::write_safetensors(&tensors, dir.join(format!("{name}-io.safetensors"))).unwrap();
}

#[test]
fn one_of_each_family_trains_starts_from_wrapped_weights_and_exports_what_onnxruntime_runs() {
    let dir = temp("backbones");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "12"]);
    let data = dir.join("data/target");
    let checks = dir.join("exports");
    std::fs::create_dir_all(&checks).unwrap();
    let train = |arch: &str, out: &str, extra: &[&str]| -> std::path::PathBuf {
        let runs = dir.join(out);
        let (data, runs_s) = (s(&data), s(&runs));
        let mut args = vec!["train", "--data", &data, "--model", arch, "--epochs", "1", "--image-size", "32"];
        args.extend(["--batch-size", "4", "--workers", "0", "--device", "cpu", "--out", &runs_s]);
        args.extend(extra);
        let printed = ok(&args);
        assert!(printed.contains("test acc:"), "{arch}: {printed}");
        runs.join("exp_001")
    };
    for arch in ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "vit_s_16"] {
        let run = train(arch, arch, &[]);
        let ckpt = s(&run);
        let onnx = s(&checks.join(format!("{arch}__cli.onnx")));
        ok(&["export", "--checkpoint", &ckpt, "--format", "onnx", "--out", &onnx]);
        let pt = s(&checks.join(format!("{arch}__cli.pt")));
        ok(&["export", "--checkpoint", &ckpt, "--format", "torchscript", "--out", &pt]);
        write_io(&checks, arch, &run);
        let json = ok(&["eval", "--checkpoint", &ckpt, "--data", &s(&data), "--json"]);
        assert!(json.contains("\"accuracy\""), "{arch}: {json}");

        if arch == "mobilenet_v3_small" {
            // Its weights saved as DDP does (`module.`) load as pretrained weights; under another
            // prefix they need --key-rewrite, and without it the error names the rewrite.
            let weights = Tensor::read_safetensors(run.join("checkpoints/best/model.safetensors")).unwrap();
            for (prefix, file) in [("module.", "ddp.safetensors"), ("net.", "net.safetensors")] {
                let renamed: Vec<(String, Tensor)> =
                    weights.iter().map(|(k, t)| (format!("{prefix}{k}"), t.shallow_clone())).collect();
                Tensor::write_safetensors(&renamed, dir.join(file)).unwrap();
            }
            let ddp = s(&dir.join("ddp.safetensors"));
            train(arch, "from_ddp", &["--weights", &ddp, "--freeze-epochs", "1"]);
            let net = s(&dir.join("net.safetensors"));
            train(arch, "from_net", &["--weights", &net, "--key-rewrite", "net.="]);
            let runs = s(&dir.join("unmatched"));
            let err = fails(&[
                "train",
                "--data",
                &s(&data),
                "--model",
                arch,
                "--epochs",
                "1",
                "--image-size",
                "32",
                "--device",
                "cpu",
                "--weights",
                &net,
                "--out",
                &runs,
            ]);
            assert!(err.contains("missing key(s)") && err.contains("key rewrite `net.=`"), "{err}");
        }
    }
    let out =
        torchlight_testing::run_reference_script("crates/export/tests/check_exports.py", &[&s(&checks)])
            .unwrap_or_else(|e| panic!("{e}"));
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with("meta ")).collect();
    assert_eq!(rows.len(), 5 * 2 * 2, "{out}");
    for row in rows {
        let parts: Vec<&str> = row.split(' ').collect();
        let (diff, scale): (f64, f64) = (parts[3].parse().unwrap(), parts[4].parse().unwrap());
        // Tolerance 1e-4 of the output's scale, as the export crate's tests.
        assert!(diff <= 1e-4 * scale.max(1.0), "{row}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
