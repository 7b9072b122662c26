//! The facade end to end with models of one's own: a model written in a few lines with
//! `#[derive(Module)]`, and a tch `nn` model on a `VarStore` wrapped as a module, each trained
//! with AdamW, checkpointed with torchlight-checkpoint and resumed exactly, and exported to
//! TorchScript.

use std::path::PathBuf;
use tch::nn::{self as tch_nn, VarStore};
use torchlight::checkpoint::{save, Checkpoint, Progress, Snapshot};
use torchlight::export::{export_torchscript, load_torchscript};
use torchlight::nn::named_parameters_with_kind;
use torchlight::nn::{
    named_tensors, state_dict, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Linear, VarStoreModule,
};
use torchlight::optim::ParamGroupBuilder;
use torchlight::prelude::*;

/// A user's model: the structure is derived, the forward pass written by hand.
#[derive(Debug, Module)]
struct TinyNet {
    conv: Conv2d,
    bn: BatchNorm2d,
    head: Linear,
}

impl ModuleT for TinyNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.bn.forward_t(&self.conv.forward_t(xs, train), train).relu();
        self.head.forward_t(&x.adaptive_avg_pool2d([1, 1]).flatten(1, -1), train)
    }
}

fn tiny_net() -> TinyNet {
    TinyNet {
        conv: Conv2d::new(3, 8, 3, Conv2dConfig::default().with_padding(1)),
        bn: BatchNorm2d::new(8, BatchNormConfig::default()),
        head: Linear::new(8, 2, true),
    }
}

/// A tch `nn` model on its own `VarStore`.
fn tch_mlp() -> VarStoreModule<tch_nn::SequentialT> {
    let vs = VarStore::new(Device::Cpu);
    let root = vs.root();
    let net = tch_nn::seq_t()
        .add(tch_nn::linear(&root / "fc1", 6, 16, Default::default()))
        .add_fn(|x| x.relu())
        .add(tch_nn::linear(&root / "fc2", 16, 2, Default::default()));
    VarStoreModule::new(vs, net)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tl-facade-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// AdamW over the model's named parameters, decay and no-decay groups as in a real run.
fn adamw(model: &dyn Module) -> AdamW {
    let groups = ParamGroupBuilder::new(2e-2)
        .with_weight_decay(0.01)
        .with_no_weight_decay_1d()
        .build(named_parameters_with_kind(model))
        .unwrap();
    AdamW::new(groups.into_param_groups(|lr, wd| AdamConfig::adamw().with_lr(lr).with_weight_decay(wd)))
        .unwrap()
}

fn train_step(model: &dyn Module, opt: &mut AdamW, x: &Tensor, y: &Tensor) -> f64 {
    opt.zero_grad().unwrap();
    let loss = CrossEntropyLoss::new().forward(&model.forward_t(x, true), y).unwrap();
    loss.backward();
    opt.step().unwrap();
    loss.double_value(&[])
}

fn assert_same_state(a: &dyn Module, b: &dyn Module, what: &str) {
    let (sa, sb) = (state_dict(a), state_dict(b));
    assert_eq!(sa.len(), sb.len());
    for ((k, ta), (kb, tb)) in sa.iter().zip(&sb) {
        assert_eq!(k, kb);
        assert!(ta.equal(tb), "{what}: `{k}` differs (tolerance: exact)");
    }
}

/// Trains `make()`'s model eight AdamW steps, checkpoints it, resumes into a fresh model and
/// optimizer (another random init), checks that both continue identically, and exports it to
/// TorchScript, comparing the traced model's outputs at another batch size.
fn train_checkpoint_resume_export<M: Module>(name: &str, make: impl Fn() -> M, x: &Tensor, y: &Tensor) {
    let dir = temp_dir(name);
    let model = make();
    let mut opt = adamw(&model);
    let losses: Vec<f64> = (0..8).map(|_| train_step(&model, &mut opt, x, y)).collect();
    assert!(losses[7] < 0.8 * losses[0], "{name}: the loss must fall when training: {losses:?}");

    let snapshot = Snapshot {
        optimizer: Some(&opt),
        progress: Progress { epoch: 1, global_step: 8, batch: 0 },
        ..Snapshot::model(&model)
    };
    save(dir.join("last"), &snapshot).unwrap();
    let resumed = make();
    let mut resumed_opt = adamw(&resumed);
    let mut checkpoint = Checkpoint::load(dir.join("last")).unwrap();
    assert_eq!(checkpoint.meta.model_kind, model.kind());
    let progress = checkpoint.restore(&resumed, Some(&mut resumed_opt), None, None).unwrap();
    assert_eq!(progress.global_step, 8);
    assert_same_state(&model, &resumed, name);
    for _ in 0..2 {
        train_step(&model, &mut opt, x, y);
        train_step(&resumed, &mut resumed_opt, x, y);
    }
    assert_same_state(&model, &resumed, &format!("{name} after resuming"));

    let path = dir.join("model.pt");
    export_torchscript(&model, &x.narrow(0, 0, 3), &path).unwrap();
    let traced = load_torchscript(&path).unwrap();
    let _guard = no_grad();
    let ours = model.forward_t(x, false);
    let theirs = traced.forward_ts(&[x.shallow_clone()]).unwrap();
    assert!(
        ours.allclose(&theirs, 1e-5, 1e-6, false),
        "{name}: TorchScript traced at batch 3, run at {}",
        x.size()[0]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_derived_user_model_trains_checkpoints_resumes_and_exports() {
    let x = Tensor::randn([16, 3, 6, 6], (Kind::Float, Device::Cpu));
    // Class 1 where the first channel is bright on average.
    let y = x.select(1, 0).mean_dim([1, 2].as_slice(), false, Kind::Float).gt(0.0).to_kind(Kind::Int64);
    let keys: Vec<String> = named_tensors(&tiny_net()).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys[..3], ["conv.weight", "conv.bias", "bn.weight"]);
    train_checkpoint_resume_export("derived", tiny_net, &x, &y);
}

#[test]
fn a_tch_varstore_model_trains_checkpoints_resumes_and_exports_through_the_adapter() {
    let x = Tensor::randn([20, 6], (Kind::Float, Device::Cpu));
    let y = x.sum_dim_intlist([1].as_slice(), false, Kind::Float).gt(0.0).to_kind(Kind::Int64);
    let model = tch_mlp();
    let keys: Vec<String> = named_parameters(&model).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]);
    train_checkpoint_resume_export("varstore", tch_mlp, &x, &y);
}

/// `#[module(crate = "...")]` names the nn crate by another path, here the facade's.
#[test]
fn the_crate_attribute_reaches_nn_through_the_facade() {
    #[derive(Debug, Module)]
    #[module(crate = "torchlight::nn", kind = "Wrapped")]
    struct Wrapper {
        inner: TinyNet,
    }
    impl ModuleT for Wrapper {
        fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
            self.inner.forward_t(xs, train)
        }
    }
    let w = Wrapper { inner: tiny_net() };
    assert_eq!(w.kind(), "Wrapped");
    assert_eq!(named_parameters(&w)[0].0, "inner.conv.weight");
}
