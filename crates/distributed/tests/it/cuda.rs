//! GPU tests (the `cuda-tests` feature, which brings `nccl`): NCCL with one rank runs the
//! collectives and the DDP training of the CPU tests; Gloo takes CUDA tensors too.

use crate::common::{conv_mlp, data, init_deterministic, max_diff, state};
use std::time::Duration;
use tch::{Device, Kind, Tensor};
use torchlight_distributed::{
    Backend, DdpConfig, DistributedDataParallel, InitOptions, ProcessGroup, ReduceOp, TcpStore,
};
use torchlight_nn::{named_parameters, to_device, Module};
use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};

fn cuda() -> Device {
    let status = torchlight_tensor::cuda_status();
    assert!(status.available, "CUDA not available: {:?}", status.reason);
    Device::Cuda(0)
}

fn group(backend: Backend) -> ProcessGroup {
    let options = InitOptions::default().with_backend(backend).with_timeout(Duration::from_secs(120));
    let store = TcpStore::host(0, 1, options.timeout).unwrap();
    ProcessGroup::with_store(&store, 0, 1, &options).unwrap()
}

#[test]
fn nccl_and_gloo_reduce_cuda_tensors() {
    let device = cuda();
    for backend in [Backend::Nccl, Backend::Gloo] {
        let pg = group(backend);
        let t = Tensor::from_slice(&[1.0f32, -2.0, 3.0]).to_device(device);
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            pg.all_reduce(&t, op).unwrap();
        }
        assert_eq!(Vec::<f32>::try_from(&t.to_device(Device::Cpu)).unwrap(), [1.0, -2.0, 3.0], "{backend:?}");
        pg.broadcast(&t, 0).unwrap();
        let gathered = pg.all_gather(&t).unwrap();
        assert!(gathered[0].equal(&t), "{backend:?}");
        pg.barrier().unwrap();
    }
    // NCCL refuses host tensors with a clear error instead of a crash.
    let err = group(Backend::Nccl).all_reduce(&Tensor::ones([2], (Kind::Float, Device::Cpu)), ReduceOp::Sum);
    assert!(err.unwrap_err().to_string().contains("NCCL needs CUDA tensors"));
}

fn train(model: &dyn Module, ddp: Option<&mut DistributedDataParallel>, device: Device) {
    let (xs, ys) = data(99, 16, [2, 4, 4], 3);
    let (xs, ys) = (xs.to_device(device), ys.to_device(device));
    let mut sgd =
        Sgd::new(vec![ParamGroup::new(named_parameters(model), SgdConfig::new(0.1).with_momentum(0.9))])
            .unwrap();
    let mut ddp = ddp;
    for step in 0..4 {
        let idx = Tensor::arange_start(step * 4, step * 4 + 4, (Kind::Int64, device));
        model
            .forward_t(&xs.index_select(0, &idx), true)
            .cross_entropy_for_logits(&ys.index_select(0, &idx))
            .backward();
        if let Some(ddp) = ddp.as_deref_mut() {
            ddp.sync_gradients().unwrap();
        }
        sgd.step().unwrap();
        sgd.zero_grad().unwrap();
    }
}

#[test]
fn nccl_ddp_with_one_rank_trains_like_plain_training() {
    let device = cuda();
    let (with_ddp, plain) = (conv_mlp(), conv_mlp());
    for m in [&with_ddp, &plain] {
        init_deterministic(m, 10);
        to_device(m, device);
    }
    let pg = group(Backend::Nccl);
    let mut ddp = DistributedDataParallel::new(&with_ddp, &pg, DdpConfig::default()).unwrap();
    train(&with_ddp, Some(&mut ddp), device);
    train(&plain, None, device);
    // A world of one averages over one rank: the same arithmetic, within float32 rounding.
    let diff = max_diff(&state(&with_ddp), &state(&plain));
    assert!(diff < 1e-6, "max |DDP - plain| = {diff}");
}
