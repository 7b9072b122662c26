use rand::Rng as _;
use tch::{Kind, Tensor};
use torchlight_tensor::seed::{self, with_global_rng};
use torchlight_tensor::{global_seed, seed_everything, set_deterministic};

fn draw() -> (Vec<f32>, u64) {
    let t = Tensor::randn([8], (Kind::Float, tch::Device::Cpu));
    let ours = with_global_rng(|r| r.random::<u64>());
    (Vec::<f32>::try_from(&t).unwrap(), ours)
}

#[test]
fn seed_everything_makes_torch_and_torchlight_draws_repeat() {
    let _lock = crate::torch_rng_lock();
    seed_everything(1234);
    assert_eq!(global_seed(), Some(1234));
    let first = draw();
    seed_everything(1234);
    assert_eq!(draw(), first, "same seed, same draws");
    seed_everything(1235);
    let other = draw();
    assert_ne!(other.0, first.0, "torch draws change with the seed");
    assert_ne!(other.1, first.1, "Torchlight draws change with the seed");
}

#[test]
fn derived_seeds_do_not_depend_on_the_global_seed() {
    // Workers derive their seeds from an explicit base, never from shared state.
    let before = seed::sample_seed(9, 2, 31);
    let _lock = crate::torch_rng_lock();
    seed_everything(77);
    assert_eq!(seed::sample_seed(9, 2, 31), before);
    let mut a = seed::rng_from_seed(seed::epoch_seed(9, 4));
    let mut b = seed::rng_from_seed(seed::epoch_seed(9, 4));
    assert_eq!(a.random::<u64>(), b.random::<u64>());
}

#[test]
fn deterministic_algorithms_can_be_switched_on_and_off() {
    set_deterministic(true, false).unwrap();
    set_deterministic(false, false).unwrap();
}

#[test]
fn the_torch_generator_state_round_trips() {
    let _lock = crate::torch_rng_lock();
    seed_everything(99);
    let _ = Tensor::randn([5], (Kind::Float, tch::Device::Cpu));
    let state = torchlight_tensor::torch_rng_state().unwrap();
    assert_eq!(state.cpu.kind(), Kind::Uint8);
    let first = Tensor::randn([16], (Kind::Float, tch::Device::Cpu));
    let _ = Tensor::randn([100], (Kind::Float, tch::Device::Cpu));
    torchlight_tensor::set_torch_rng_state(&state).unwrap();
    let again = Tensor::randn([16], (Kind::Float, tch::Device::Cpu));
    assert!(first.equal(&again), "restoring the state repeats the draws");
    let bad = torchlight_tensor::TorchRngState {
        cpu: Tensor::zeros([3], (Kind::Uint8, tch::Device::Cpu)),
        cuda: vec![],
    };
    let err = torchlight_tensor::set_torch_rng_state(&bad).unwrap_err();
    assert!(err.to_string().contains("set_rng_state"), "{err}");
}

#[test]
fn a_forked_seed_draws_as_manual_seed_and_leaves_the_generator_alone() {
    let _lock = crate::torch_rng_lock();
    let cpu = (Kind::Float, tch::Device::Cpu);
    tch::manual_seed(5);
    let expected_inside = Tensor::rand([8], cpu);
    seed_everything(99);
    let _ = Tensor::randn([3], cpu);
    let state = torchlight_tensor::torch_rng_state().unwrap();
    let expected_after = Tensor::randn([8], cpu);
    torchlight_tensor::set_torch_rng_state(&state).unwrap();
    let inside = torchlight_tensor::with_torch_seed(5, || Tensor::rand([8], cpu)).unwrap();
    assert!(inside.equal(&expected_inside), "inside, the draws are manual_seed(5)'s");
    let after = Tensor::randn([8], cpu);
    assert!(after.equal(&expected_after), "outside, the stream goes on as if nothing was drawn");
    let before_panic = torchlight_tensor::torch_rng_state().unwrap();
    let expected = Tensor::randn([8], cpu);
    torchlight_tensor::set_torch_rng_state(&before_panic).unwrap();
    let caught = std::panic::catch_unwind(|| {
        torchlight_tensor::with_torch_seed(5, || -> () { panic!("a failing transform") })
    });
    assert!(caught.is_err(), "the panic goes on to the caller");
    assert!(Tensor::randn([8], cpu).equal(&expected), "and the generator was restored first");
}
