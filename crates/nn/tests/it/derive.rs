//! `#[derive(Module)]`'s expansions (names, order, roles, optional and repeated children,
//! renames, skipped data, kinds, mutable children, downcasts) and the containers with names
//! chosen at run time (`Sequential`, `ModuleList`, `ModuleDict`).

use tch::{Device, Kind, Tensor};
use torchlight_nn::*;

/// A block with every kind of field the derive knows.
#[derive(Debug, Module)]
#[module(kind = "GatedBlock")]
struct Block {
    conv: Conv2d,
    #[buffer]
    steps: Tensor,
    #[param]
    gate: Tensor,
    norm: Option<BatchNorm2d>,
    #[param]
    #[module(name = "bias")]
    shift: Option<Tensor>,
    #[module(skip)]
    width: i64,
}

impl ModuleT for Block {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.conv.forward_t(xs, train) * &self.gate;
        let x = match &self.norm {
            Some(norm) => norm.forward_t(&x, train),
            None => x,
        };
        match &self.shift {
            Some(b) => x + b,
            None => x,
        }
    }
}

fn block(width: i64, with_norm: bool) -> Block {
    let opts = (Kind::Float, Device::Cpu);
    Block {
        conv: Conv2d::new(width, width, 3, Conv2dConfig::default().with_padding(1)),
        steps: Tensor::zeros([], (Kind::Int64, Device::Cpu)),
        gate: Tensor::ones([1], opts).set_requires_grad(true),
        norm: with_norm.then(|| BatchNorm2d::new(width, BatchNormConfig::default())),
        shift: with_norm.then(|| Tensor::zeros([width, 1, 1], opts).set_requires_grad(true)),
        width,
    }
}

/// A generic container of blocks: `Vec` children, a `r#`-named field and a unit-like stem.
#[derive(Debug, Module)]
struct Tower<B: Module> {
    stem: Identity,
    blocks: Vec<B>,
    r#final: Linear,
}

impl<B: Module> ModuleT for Tower<B> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.blocks.iter().fold(self.stem.forward_t(xs, train), |x, b| b.forward_t(&x, train));
        self.r#final.forward_t(&x.mean_dim([2, 3].as_slice(), false, Kind::Float), train)
    }
}

fn keys(m: &dyn Module) -> Vec<String> {
    named_tensors(m).into_iter().map(|(k, _, _)| k).collect()
}

#[test]
fn fields_become_pytorch_keys_parameters_then_buffers_then_children() {
    let _rng = crate::torch_rng_lock();
    let b = block(2, true);
    assert_eq!(b.kind(), "GatedBlock");
    assert_eq!(
        keys(&b),
        [
            "gate",
            "bias",
            "steps",
            "conv.weight",
            "conv.bias",
            "norm.weight",
            "norm.bias",
            "norm.running_mean",
            "norm.running_var",
            "norm.num_batches_tracked",
        ],
        "own parameters, own buffers, then children, as PyTorch's state_dict"
    );
    let roles: Vec<Role> = b.own_tensors().iter().map(|t| t.role).collect();
    assert_eq!(roles, [Role::Parameter, Role::Parameter, Role::Buffer]);
    assert_eq!(b.width, 2, "skipped data stays a plain field");

    let bare = block(2, false);
    assert_eq!(
        keys(&bare),
        ["gate", "steps", "conv.weight", "conv.bias"],
        "a None child or tensor is absent"
    );
    assert_eq!(named_parameters(&bare).len(), 3);
    assert_eq!(named_buffers(&bare).len(), 1);
}

#[test]
fn vec_children_are_numbered_and_generic_structs_derive() {
    let _rng = crate::torch_rng_lock();
    let mut tower = Tower {
        stem: Identity,
        blocks: vec![block(3, false), block(3, true)],
        r#final: Linear::new(3, 2, true),
    };
    let k = keys(&tower);
    assert_eq!(&k[..4], ["blocks.0.gate", "blocks.0.steps", "blocks.0.conv.weight", "blocks.0.conv.bias"]);
    assert_eq!(k[4..6], ["blocks.1.gate", "blocks.1.bias"]);
    assert_eq!(k[k.len() - 2..], ["final.weight", "final.bias"], "a raw identifier keeps its plain name");
    let mut paths = Vec::new();
    visit_modules(&tower, &mut |path, m| paths.push(format!("{path}:{}", m.kind())));
    assert_eq!(&paths[..3], [":Tower", "stem:Identity", "blocks.0:GatedBlock"]);
    let y = tower.forward_t(&Tensor::ones([1, 3, 4, 4], (Kind::Float, Device::Cpu)), false);
    assert_eq!(y.size(), [1, 2]);

    // Children can be replaced through children_mut, and downcast through as_any.
    for (name, child) in tower.children_mut() {
        if name == "blocks.1" {
            let block: &dyn Module = child;
            assert!(block.as_any().downcast_ref::<Block>().is_some_and(|b| b.norm.is_some()));
        }
    }
    tower.blocks[1].norm = None;
    assert!(!keys(&tower).iter().any(|k| k.starts_with("blocks.1.norm.")));
    let count = tower.children_mut().len();
    assert_eq!(count, 4, "stem, two blocks, final");
}

#[test]
fn a_derived_model_loads_a_state_dict_and_freezes_by_prefix() {
    let _rng = crate::torch_rng_lock();
    let src = Tower {
        stem: Identity,
        blocks: vec![block(2, true), block(2, true)],
        r#final: Linear::new(2, 2, true),
    };
    let dst = Tower {
        stem: Identity,
        blocks: vec![block(2, true), block(2, true)],
        r#final: Linear::new(2, 2, true),
    };
    let report = load_state_dict(&dst, state_dict(&src), &LoadOptions::strict()).unwrap();
    assert_eq!(report.loaded.len(), 2 * 10 + 2);
    for ((k, a), (_, b)) in state_dict(&src).into_iter().zip(state_dict(&dst)) {
        assert!(a.equal(&b), "{k}");
    }
    assert_eq!(freeze(&dst, "blocks.0."), 6);
    assert!(!dst.blocks[0].gate.requires_grad() && dst.blocks[1].gate.requires_grad());
}

#[test]
fn containers_take_names_chosen_at_run_time() {
    let _rng = crate::torch_rng_lock();
    // ModuleList: numbered, typed items.
    let mut list: ModuleList<Linear> = (0..2).map(|i| Linear::new(2 + i, 3, i == 0)).collect();
    list.push(Linear::new(3, 3, false));
    assert_eq!(keys(&list), ["0.weight", "0.bias", "1.weight", "2.weight"]);
    assert_eq!(list[1].in_features(), 3);
    assert_eq!(list.kind(), "ModuleList");

    // ModuleDict: insertion order, replacement in place, bad names refused.
    let mut dict: ModuleDict = ModuleDict::new();
    for name in ["cats", "dogs", "birds"] {
        assert!(dict.insert(name, Box::new(Linear::new(4, 1, false))).unwrap().is_none());
    }
    let old = dict.insert("dogs", Box::new(Sequential::new().add(Linear::new(4, 2, true)))).unwrap();
    assert!(old.is_some_and(|m| m.as_any().is::<Linear>()), "the replaced module comes back");
    assert_eq!(keys(&dict), ["cats.weight", "dogs.0.weight", "dogs.0.bias", "birds.weight"]);
    assert!(dict.get("dogs").is_some_and(|m| m.as_any().is::<Sequential>()), "downcasts see the boxed type");
    assert!(dict.remove("cats").is_some());
    assert_eq!(dict.keys().collect::<Vec<_>>(), ["dogs", "birds"]);
    for bad in ["", "a.b"] {
        let err = dict.insert(bad, Box::new(Identity)).unwrap_err();
        assert!(matches!(&err, NnError::ModuleName { name, .. } if name == bad), "{err}");
    }

    // Sequential with names built at run time; a name given twice is an error.
    let mut seq = Sequential::new();
    for stage in 0..3 {
        seq.push_named(format!("stage{stage}"), Linear::new(2, 2, false)).unwrap();
    }
    let err = seq.push_named("stage1", Identity).unwrap_err();
    assert!(err.to_string().contains("\"stage1\" is already taken"), "{err}");
    assert_eq!(keys(&seq), ["stage0.weight", "stage1.weight", "stage2.weight"]);
    assert!(seq.get_named("stage2").is_some());

    // All three nest in a derived model.
    #[derive(Debug, Module)]
    struct Heads {
        trunk: Sequential,
        heads: ModuleDict<Linear>,
        extras: ModuleList,
    }
    impl ModuleT for Heads {
        fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
            let x = self.extras.forward_t(&self.trunk.forward_t(xs, train), train);
            Tensor::cat(&self.heads.iter().map(|(_, h)| h.forward_t(&x, train)).collect::<Vec<_>>(), 1)
        }
    }
    let mut heads = ModuleDict::new();
    heads.insert("a", Linear::new(2, 1, true)).unwrap();
    heads.insert("b", Linear::new(2, 2, false)).unwrap();
    let mut extras = ModuleList::new();
    extras.push(Box::new(ReLU) as Box<dyn Module>);
    let model = Heads { trunk: seq, heads, extras };
    assert_eq!(&keys(&model)[3..], ["heads.a.weight", "heads.a.bias", "heads.b.weight"]);
    let y = model.forward_t(&Tensor::ones([5, 2], (Kind::Float, Device::Cpu)), false);
    assert_eq!(y.size(), [5, 3]);
    let mut paths = Vec::new();
    visit_modules(&model, &mut |path, m| paths.push(format!("{path}:{}", m.kind())));
    assert!(paths.contains(&"extras:ModuleList".to_string()) && paths.contains(&"extras.0:ReLU".to_string()));
}
