//! `VarStoreModule`: a model built with tch's `nn` seen as a Torchlight module (keys from
//! the VarStore's paths, parameters and buffers, freezing and loading on the store's own
//! variables). Training, checkpoints and TorchScript through it are tested in the facade.

use tch::nn::{self, VarStore};
use tch::{Device, Kind, Tensor};
use torchlight_nn::*;

fn mlp() -> VarStoreModule<nn::SequentialT> {
    let vs = VarStore::new(Device::Cpu);
    let root = vs.root();
    let net = nn::seq_t()
        .add(nn::linear(&root / "fc1", 3, 5, Default::default()))
        .add(nn::batch_norm1d(&root / "norm", 5, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(&root / "layers" / 10, 5, 4, Default::default()))
        .add(nn::linear(&root / "layers" / 2, 4, 2, Default::default()));
    VarStoreModule::new(vs, net)
}

#[test]
fn varstore_paths_become_keys_with_parameters_and_buffers() {
    let _rng = crate::torch_rng_lock();
    let model = mlp();
    let tensors: Vec<(String, Role)> = named_tensors(&model).into_iter().map(|(k, _, r)| (k, r)).collect();
    let (p, b) = (Role::Parameter, Role::Buffer);
    let expected = [
        ("fc1.bias", p),
        ("fc1.weight", p),
        ("layers.2.bias", p),
        ("layers.2.weight", p),
        ("layers.10.bias", p),
        ("layers.10.weight", p),
        ("norm.bias", p),
        ("norm.running_mean", b),
        ("norm.running_var", b),
        ("norm.weight", p),
    ];
    assert_eq!(tensors, expected.map(|(k, r)| (k.to_string(), r)));
    assert_eq!(model.kind(), "VarStoreModule");
    assert_eq!(count_parameters(&model).total, 3 * 5 + 5 + 5 * 2 + 5 * 4 + 4 + 4 * 2 + 2);

    // Freezing acts on the store's own variables.
    assert_eq!(freeze_all_but(&model, "layers."), 4);
    let trainable: Vec<bool> =
        model.var_store().trainable_variables().iter().map(|t| t.requires_grad()).collect();
    assert_eq!(trainable.iter().filter(|t| **t).count(), 4);
}

#[test]
fn loading_a_state_dict_changes_what_the_tch_model_computes() {
    let _rng = crate::torch_rng_lock();
    let (a, b) = (mlp(), mlp());
    let x = Tensor::randn([6, 3], (Kind::Float, Device::Cpu));
    {
        let _g = torchlight_tensor::no_grad();
        let _ = a.forward_t(&x, true); // moves a's running statistics
    }
    assert!(!a.model().forward_t(&x, false).equal(&b.model().forward_t(&x, false)));
    load_state_dict(&b, state_dict(&a), &LoadOptions::strict()).unwrap();
    assert!(
        a.forward_t(&x, false).equal(&b.model().forward_t(&x, false)),
        "b's tch layers now compute a's function"
    );
    let err = load_state_dict(&b, state_dict(&resnet18(2)), &LoadOptions::strict()).unwrap_err();
    assert!(err.to_string().contains("missing key(s): fc1.bias"), "{err}");
}
