//! GPU tests (the `cuda-tests` feature): synchronised BatchNorm on CUDA tensors (ATen's sync-BN
//! kernels) over 2 Gloo ranks against one process on the concatenated batch; the distributed
//! lr range test on CUDA over 2 Gloo ranks against one process. With the `nccl`
//! feature too (`cargo xtask test --cuda`; the GPU kit is built without NCCL's headers): NCCL
//! with one rank runs the collectives and the DDP training of the CPU tests, Gloo takes CUDA
//! tensors too, and synchronised BatchNorm runs over NCCL (2 ranks on 2 GPUs; a world of one
//! against plain BatchNorm on one GPU, since NCCL refuses two ranks on one device).

use tch::Device;

fn cuda() -> Device {
    let status = torchlight_tensor::cuda_status();
    assert!(status.available, "CUDA not available: {:?}", status.reason);
    Device::Cuda(0)
}

/// 2 Gloo ranks holding CUDA tensors (both on the one GPU there may be): ATen's sync-BN kernels
/// against one process's plain BatchNorm on the concatenated batch, with uneven and empty
/// per-rank batches (`sync_bn.rs`).
#[test]
fn sync_batch_norm_on_cuda_over_two_gloo_ranks_matches_one_process() {
    let device = cuda();
    let worst = crate::sync_bn::two_ranks_match_one_process("gloo", "cuda", device);
    eprintln!("sync_bn on CUDA over Gloo: worst max difference {worst:e}");
}

/// The lr range test of a distributed Trainer on CUDA (2 Gloo ranks, the one GPU there may be
/// shared): each step's loss all-reduced as a CUDA tensor; both ranks draw the same curve, that
/// of one process on the GPU on both ranks' batches (1e-4: the GPU's float sums in another
/// order), and get their own weights back.
#[test]
fn lr_find_on_cuda_over_two_gloo_ranks_matches_one_process() {
    let device = cuda();
    let out = tempfile::tempdir().unwrap();
    let outcome = crate::common::launcher("lr_find", 2, out.path())
        .env(crate::trainer::LR_FIND_DEVICE, "cuda")
        .run()
        .expect("launch");
    assert!(outcome.success(), "{}", crate::common::describe(&outcome));
    let read = |r: usize| std::fs::read_to_string(out.path().join(format!("rank{r}_curve.txt"))).unwrap();
    let curve = read(0);
    assert_eq!(curve, read(1), "the ranks' curves differ");
    let want = crate::trainer::one_process_sweep(device).unwrap();
    crate::trainer::assert_curve_matches(&curve, &want, 1e-4);
}

/// The tests that need the `nccl` feature.
#[cfg(feature = "nccl")]
mod nccl {
    use super::cuda;
    use crate::common::{conv_mlp, data, init_deterministic, max_diff, state};
    use std::time::Duration;
    use tch::{Device, Kind, Tensor};
    use torchlight_distributed::{
        Backend, DdpConfig, DistributedDataParallel, InitOptions, ProcessGroup, ReduceOp, TcpStore,
    };
    use torchlight_nn::{named_parameters, to_device, Module};
    use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};

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
            assert_eq!(
                Vec::<f32>::try_from(&t.to_device(Device::Cpu)).unwrap(),
                [1.0, -2.0, 3.0],
                "{backend:?}"
            );
            pg.broadcast(&t, 0).unwrap();
            let gathered = pg.all_gather(&t).unwrap();
            assert!(gathered[0].equal(&t), "{backend:?}");
            pg.barrier().unwrap();
        }
        // NCCL refuses host tensors with a clear error instead of a crash.
        let err =
            group(Backend::Nccl).all_reduce(&Tensor::ones([2], (Kind::Float, Device::Cpu)), ReduceOp::Sum);
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

    /// NCCL: 2 ranks on 2 GPUs, as above; with one GPU, a world of one against plain BatchNorm.
    #[test]
    fn sync_batch_norm_over_nccl_matches_one_process() {
        let device = cuda();
        if tch::Cuda::device_count() >= 2 {
            let worst = crate::sync_bn::two_ranks_match_one_process("nccl", "cuda", device);
            eprintln!("sync_bn over NCCL, 2 GPUs: worst max difference {worst:e}");
        } else {
            eprintln!("sync_bn over NCCL: one GPU, so a world of one against plain BatchNorm");
            crate::sync_bn::world_of_one_matches_plain(&group(Backend::Nccl), device);
        }
    }
}
