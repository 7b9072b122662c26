//! Weight files in the layouts users have, made by `tests/fixtures/make_checkpoints.py` with
//! real PyTorch (and PyTorch Lightning 2.6): a Lightning `.ckpt`, a DDP `module.` state_dict
//! and a torchvision reference-script checkpoint all load into the same model through the safe
//! reader, with wrapper prefixes stripped or keys rewritten, and give PyTorch's output.

use crate::{assert_close, fixture, load};
use tch::Tensor;
use torchlight_nn::*;

/// The fixtures' TinyNet: conv 3->4 3x3, BatchNorm, ReLU, global average pool, Linear 4->3.
#[derive(Debug, Module)]
struct TinyNet {
    conv: Conv2d,
    bn: BatchNorm2d,
    fc: Linear,
}

impl ModuleT for TinyNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.bn.forward_t(&self.conv.forward_t(xs, train), train).relu();
        self.fc.forward_t(&x.mean_dim([2, 3].as_slice(), false, tch::Kind::Float), train)
    }
}

fn tiny() -> TinyNet {
    let o = LayerOptions::default().skip_init();
    TinyNet {
        conv: Conv2d::new_on(3, 4, 3, Conv2dConfig::default().with_padding(1), o),
        bn: BatchNorm2d::new_on(4, BatchNormConfig::default(), o),
        fc: Linear::new_on(4, 3, true, o),
    }
}

fn path(name: &str) -> std::path::PathBuf {
    fixture(&format!("checkpoints/{name}"))
}

/// The model gives PyTorch's eval output (same kernels: 1e-6; measured 1.5e-8 at the SSE
/// level, 0 at the others) and holds its exact weights.
fn assert_is_the_trained_net(net: &TinyNet) {
    let f = load(path("expected.safetensors"));
    for (key, t) in state_dict(net) {
        assert!(t.equal(&f[&key]), "{key} equals PyTorch's (tolerance: exact)");
    }
    let _g = torchlight_tensor::no_grad();
    assert_close("TinyNet eval output", &net.forward_t(&f["x"], false), &f["y"], 1e-6, 1e-6);
}

#[test]
fn a_lightning_checkpoint_loads_its_state_dict_with_the_model_prefix_stripped() {
    let (tensors, entry) = read_pth_checkpoint(path("lightning.ckpt")).unwrap();
    assert_eq!(entry.as_deref(), Some("state_dict"));
    assert!(tensors.iter().all(|(k, _)| k.starts_with("model.")), "Lightning keeps `self.model`'s prefix");
    let net = tiny();
    let report = load_weights(&net, path("lightning.ckpt"), &LoadOptions::strict().strip_wrappers()).unwrap();
    assert_eq!(report.loaded.len(), 9);
    assert_eq!(report.rewrites.len(), 1);
    assert!(report.rewrites[0].starts_with("model.= (a PyTorch Lightning"), "{:?}", report.rewrites);
    assert_is_the_trained_net(&net);

    // Without stripping, the strict error lists the keys and names the rewrite that fits.
    let err = load_weights(&tiny(), path("lightning.ckpt"), &LoadOptions::strict()).unwrap_err().to_string();
    assert!(err.contains("9 missing key(s): conv.weight"), "{err}");
    assert!(err.contains("9 unexpected key(s): model.bn.bias"), "{err}");
    assert!(err.contains("the key rewrite `model.=` would match 9 of the 9 unexpected keys"), "{err}");

    // The same load through an explicit rewrite, as `--key-rewrite model.=` gives it.
    let net = tiny();
    let rewrite = KeyRewrite::parse("model.=").unwrap();
    let report = load_weights(&net, path("lightning.ckpt"), &LoadOptions::strict().rewrite(rewrite)).unwrap();
    assert_eq!(report.rewrites, ["model.= (given, 9 keys)"]);
    assert_is_the_trained_net(&net);
}

#[test]
fn the_plain_state_dict_reader_refuses_a_checkpoints_other_objects() {
    let err = read_pth(path("lightning.ckpt")).unwrap_err().to_string();
    assert!(err.contains("lightning.ckpt") && err.contains("value of `epoch` is not a tensor"), "{err}");
    let err = read_pth(path("reference.pth")).unwrap_err().to_string();
    assert!(err.contains("refusing pickle global `argparse.Namespace`"), "{err}");
}

#[test]
fn a_ddp_state_dict_loads_with_module_stripped() {
    let tensors = read_weights(path("ddp.pth")).unwrap();
    assert!(tensors.iter().all(|(k, _)| k.starts_with("module.")));
    let net = tiny();
    let report = load_weights(&net, path("ddp.pth"), &LoadOptions::strict().strip_wrappers()).unwrap();
    assert!(report.rewrites[0].starts_with("module.= (DistributedDataParallel"), "{:?}", report.rewrites);
    assert_is_the_trained_net(&net);
}

#[test]
fn a_reference_script_checkpoint_loads_from_its_model_entry() {
    let (_, entry) = read_pth_checkpoint(path("reference.pth")).unwrap();
    assert_eq!(entry.as_deref(), Some("model"), "beside optimizer, lr_scheduler, epoch and argparse args");
    let net = tiny();
    let report = load_weights(&net, path("reference.pth"), &LoadOptions::strict().strip_wrappers()).unwrap();
    assert!(report.rewrites.is_empty(), "nothing to strip: {:?}", report.rewrites);
    assert_is_the_trained_net(&net);
}

#[test]
fn rewrites_move_keys_and_bad_ones_are_errors_naming_them() {
    // Keys saved under another name: `fc.` as `head.`, and a prefix a rewrite must strip.
    let f = load(path("expected.safetensors"));
    let renamed: Vec<(String, Tensor)> = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
        .iter()
        .map(|k| (format!("net.{}", k.replace("fc.", "head.")), f[*k].shallow_clone()))
        .collect();
    let net = tiny();
    let options = LoadOptions::lenient()
        .rewrite(KeyRewrite::new("net.head.", "fc."))
        .rewrite(KeyRewrite::strip("net."));
    let report = load_state_dict(&net, renamed, &options).unwrap();
    assert_eq!(report.loaded, ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]);
    assert_eq!(report.rewrites, ["net.head.=fc. (given, 2 keys)", "net.= (given, 2 keys)"]);
    assert!(net.fc.weight.equal(&f["fc.weight"]));

    // The suggested rewrite fits shapes as well as names: a [5, 5] extra never goes into
    // conv.weight's [4, 3, 3, 3] slot; a stem of that shape does.
    let extra = |name: &str, t: Tensor| -> Vec<(String, Tensor)> {
        state_dict(&tiny())
            .into_iter()
            .filter(|(k, _)| k != "conv.weight")
            .chain([(name.to_string(), t)])
            .collect()
    };
    let err = load_state_dict(
        &tiny(),
        extra("criterion.weight", Tensor::zeros([5, 5], tch::kind::FLOAT_CPU)),
        &LoadOptions::strict(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing key(s): conv.weight") && !err.contains("key rewrite"), "{err}");
    let err = load_state_dict(
        &tiny(),
        extra("stem.weight", Tensor::zeros([4, 3, 3, 3], tch::kind::FLOAT_CPU)),
        &LoadOptions::strict(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("the key rewrite `stem.=conv.` would match 1 of the 1 unexpected keys"), "{err}");

    // Two keys rewritten onto one: an error naming both, not one silently kept.
    let both: Vec<(String, Tensor)> =
        [("backbone.conv.weight", "conv.weight"), ("conv.weight", "conv.weight")]
            .iter()
            .map(|(k, from)| (k.to_string(), f[*from].shallow_clone()))
            .collect();
    for strict in [true, false] {
        let options =
            LoadOptions { strict, ..LoadOptions::default() }.rewrite(KeyRewrite::strip("backbone."));
        let err = load_state_dict(
            &net,
            both.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect(),
            &options,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`backbone.=`")
                && err.contains("`backbone.conv.weight`")
                && err.contains("`conv.weight`"),
            "{err}"
        );
    }

    let err = KeyRewrite::parse("module.").unwrap_err().to_string();
    assert!(err.contains("`module.`") && err.contains("FROM=TO"), "{err}");
    assert!(KeyRewrite::parse("=x").unwrap_err().to_string().contains("empty"));
}

#[test]
fn an_object_in_a_checkpoints_state_dict_is_an_error_and_never_runs() {
    let err = read_weights(fixture("pth_cases/evil.pth")).unwrap_err().to_string();
    assert!(
        err.contains("evil.pth") && err.contains("`posix.system`") && err.contains("only tensors load"),
        "{err}"
    );
    assert!(!std::path::Path::new("/tmp/torchlight-pth-evil").exists());
}
