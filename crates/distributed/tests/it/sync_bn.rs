//! Synchronised BatchNorm: 2 Gloo ranks with uneven (and empty) batches give the forward
//! outputs, input gradients, parameter gradients (summed over the ranks) and running
//! statistics of one process running plain BatchNorm on the concatenated batch; eval mode and
//! frozen layers stay plain. `cuda.rs` runs the same comparison on CUDA tensors (ATen's
//! sync-BN kernels), over Gloo and NCCL.

use crate::common::{
    conv_bn, data, describe, init_deterministic, launch, launcher, max_diff, state, world_of_one,
};
use anyhow::{Context, Result};
use std::path::Path;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_distributed::{
    convert_sync_batchnorm, revert_sync_batchnorm, Backend, DdpConfig, DistributedDataParallel, InitOptions,
    ProcessGroup,
};
use torchlight_nn::Sequential;
use torchlight_nn::{freeze_batch_norm, named_tensors, to_device, BatchNorm2d, BatchNormConfig};
use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};

/// The backend the ranks synchronise over: `gloo` (the default) or `nccl`.
const BACKEND: &str = "TL_SYNC_BN_BACKEND";
/// The ranks' device: `cpu` (the default) or `cuda` (rank r on `cuda:r`, modulo the GPUs).
const DEVICE: &str = "TL_SYNC_BN_DEVICE";

/// One comparison: the per-rank batch sizes, the shape of a sample (`[C, H, W]`, or `[C, L]`
/// as BatchNorm1d's 3-D input), the layer's options.
struct Case {
    name: &'static str,
    batches: [i64; 2],
    sample: &'static [i64],
    config: BatchNormConfig,
}

fn cases() -> Vec<Case> {
    vec![
        Case { name: "nchw_3_5", batches: [3, 5], sample: &[3, 4, 5], config: BatchNormConfig::default() },
        Case { name: "ncl_5_3", batches: [5, 3], sample: &[3, 7], config: BatchNormConfig::default() },
        // Cumulative average (momentum None) over two forwards, see `FORWARDS`.
        Case {
            name: "nchw_cumulative",
            batches: [2, 6],
            sample: &[4, 3, 3],
            config: BatchNormConfig { momentum: None, ..Default::default() },
        },
        Case {
            name: "no_affine_no_stats",
            batches: [4, 2],
            sample: &[3, 2, 2],
            config: BatchNormConfig { affine: false, track_running_stats: false, ..Default::default() },
        },
        // A rank with an empty batch still takes part in every collective (as PyTorch's).
        Case {
            name: "empty_rank_0",
            batches: [0, 4],
            sample: &[3, 3, 3],
            config: BatchNormConfig::default(),
        },
    ]
}

/// Training forwards per case: the running statistics are compared after all of them.
const FORWARDS: usize = 2;

/// The layer of a case on `device`, with seeded weights and running statistics.
fn layer(case: &Case, device: Device) -> BatchNorm2d {
    let bn = BatchNorm2d::new(case.sample[0], case.config);
    init_deterministic(&bn, 5);
    to_device(&bn, device);
    bn
}

/// The concatenated batch of forward `f`, `[N, ...]` with a non-zero mean, and the weights of
/// the loss `sum(y * g)`.
fn batch(case: &Case, f: usize) -> (Tensor, Tensor) {
    let n: i64 = case.batches.iter().sum();
    let numel: i64 = case.sample.iter().product();
    let mut shape = vec![n];
    shape.extend_from_slice(case.sample);
    let (x, _) = data(100 + f as u64, n as usize, [numel, 1, 1], 2);
    let (g, _) = data(200 + f as u64, n as usize, [numel, 1, 1], 2);
    (x.view(shape.as_slice()) * 3.0 + 0.7, g.view(shape.as_slice()))
}

/// Runs a case on `bn` (synchronised or not, on `device`) over rows `start..start + len` of
/// each forward's batch: per forward the output and the input gradient, then the parameter
/// gradients and the buffers, by name, on the CPU.
fn run_case(case: &Case, bn: &BatchNorm2d, start: i64, len: i64, device: Device) -> Vec<(String, Tensor)> {
    let cpu = |t: &Tensor| t.detach().to_device(Device::Cpu).copy();
    let mut out = Vec::new();
    for f in 0..FORWARDS {
        let (x, g) = batch(case, f);
        let x = x.narrow(0, start, len).to_device(device).set_requires_grad(true);
        let y = bn.forward_t(&x, true);
        (&y * g.narrow(0, start, len).to_device(device)).sum(Kind::Float).backward();
        out.push((format!("{}.y{f}", case.name), cpu(&y)));
        out.push((format!("{}.gx{f}", case.name), cpu(&x.grad())));
    }
    for (name, t, _) in named_tensors(bn) {
        let value = if t.requires_grad() { cpu(&t.grad()) } else { cpu(&t) };
        out.push((format!("{}.{name}", case.name), value));
    }
    out
}

/// The rank side: every case with a converted layer, written to `rank<r>.safetensors`; over
/// `pg` (Gloo) or, when `TL_SYNC_BN_BACKEND=nccl`, a NCCL group of the same job.
pub fn rank(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let nccl;
    let pg = match std::env::var(BACKEND).as_deref() {
        Ok("nccl") => {
            let options = InitOptions::default().with_backend(Backend::Nccl).with_timeout(pg.timeout());
            nccl = ProcessGroup::init_from_env(&options)?;
            &nccl
        }
        _ => pg,
    };
    let device = match std::env::var(DEVICE).as_deref() {
        Ok("cuda") => {
            // Loads libtorch's CUDA backend, which this binary does not link.
            let status = torchlight_tensor::cuda_status();
            anyhow::ensure!(status.available, "CUDA not available: {:?}", status.reason);
            Device::Cuda(pg.rank() % tch::Cuda::device_count().max(1) as usize)
        }
        _ => Device::Cpu,
    };
    let mut results = Vec::new();
    for case in cases() {
        let mut bn = layer(&case, device);
        anyhow::ensure!(convert_sync_batchnorm(&mut bn, pg) == 1);
        let start = if pg.rank() == 0 { 0 } else { case.batches[0] };
        results.extend(run_case(&case, &bn, start, case.batches[pg.rank()], device));
    }
    torchlight_nn::write_safetensors(&results, out.join(format!("rank{}.safetensors", pg.rank())))?;
    Ok(())
}

fn read(path: &Path) -> Result<Vec<(String, Tensor)>> {
    torchlight_nn::read_safetensors(path).with_context(|| path.display().to_string())
}

fn find<'a>(all: &'a [(String, Tensor)], key: &str) -> &'a Tensor {
    &all.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key}")).1
}

fn diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    if a.numel() == 0 {
        return 0.0;
    }
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// Launches 2 ranks synchronising over `backend` with tensors on `device` (`cpu` or `cuda`)
/// and holds their results to one process running plain BatchNorm on the concatenated batch
/// on `reference` (the first GPU for `cuda`). Returns the largest difference.
pub fn two_ranks_match_one_process(backend: &str, device: &str, reference: Device) -> f64 {
    let out = tempfile::tempdir().unwrap();
    let outcome =
        launcher("sync_bn", 2, out.path()).env(BACKEND, backend).env(DEVICE, device).run().expect("launch");
    assert!(outcome.success(), "{}", describe(&outcome));
    let ranks = [
        read(&out.path().join("rank0.safetensors")).unwrap(),
        read(&out.path().join("rank1.safetensors")).unwrap(),
    ];
    let mut worst = 0.0f64;
    for case in cases() {
        let n: i64 = case.batches.iter().sum();
        let reference = run_case(&case, &layer(&case, reference), 0, n, reference);
        for (key, want) in &reference {
            let got = if key.contains(".y") || key.contains(".gx") {
                // Each rank holds its rows of the batch.
                Tensor::cat(&[find(&ranks[0], key), find(&ranks[1], key)], 0)
            } else if key.ends_with("weight") || key.ends_with("bias") {
                // Each rank's share of the parameter gradients; DDP sums (averages) them.
                find(&ranks[0], key) + find(&ranks[1], key)
            } else {
                // Buffers: every rank holds the world's.
                let d = diff(find(&ranks[0], key), find(&ranks[1], key));
                assert_eq!(d, 0.0, "{key}: the ranks' buffers differ by {d}");
                find(&ranks[0], key).shallow_clone()
            };
            let d = diff(&got, want);
            worst = worst.max(d);
            // float32 sums in another order (per rank, then across ranks; float64 for the
            // combined statistics on the CPU) than one process's kernel: 1e-5 (measured 1.9e-6
            // on the CPU under ATEN_CPU_CAPABILITY default, avx2 and avx512).
            assert!(d < 1e-5, "{backend}/{device} {key}: max |2 ranks - one process| = {d}");
        }
        if case.config.track_running_stats {
            let start = layer(&case, Device::Cpu);
            let key = format!("{}.running_var", case.name);
            let moved = diff(start.running_var.as_ref().unwrap(), find(&reference, &key));
            assert!(moved > 1e-3, "{}: the running variance moved", case.name);
        }
    }
    worst
}

#[test]
fn two_ranks_with_uneven_batches_normalise_like_one_process_on_the_concatenated_batch() {
    let worst = two_ranks_match_one_process("gloo", "cpu", Device::Cpu);
    eprintln!("sync_bn: worst max difference over every case and tensor: {worst:e}");
}

/// Every case in a world of one on `device` against plain BatchNorm on the same batch.
pub fn world_of_one_matches_plain(pg: &ProcessGroup, device: Device) {
    for case in &cases() {
        let n: i64 = case.batches.iter().sum();
        let mut synced = layer(case, device);
        assert_eq!(convert_sync_batchnorm(&mut synced, pg), 1);
        let plain = run_case(case, &layer(case, device), 0, n, device);
        let got = run_case(case, &synced, 0, n, device);
        for ((key, a), (_, b)) in got.iter().zip(&plain) {
            let d = diff(a, b);
            assert!(d < 1e-5, "{device:?} {key}: max |synchronised - plain| = {d}");
        }
    }
}

/// In a world of one the synchronised layer is plain BatchNorm (its CPU path against ATen's
/// kernel); eval mode, frozen and reverted layers never reach the collectives.
#[test]
fn a_world_of_one_normalises_as_plain_batch_norm_and_eval_frozen_stay_plain() {
    let pg = world_of_one();
    world_of_one_matches_plain(&pg, Device::Cpu);
    let case = &cases()[0];
    let layer = |case: &Case| layer(case, Device::Cpu);
    let mut synced = layer(case);
    convert_sync_batchnorm(&mut synced, &pg);
    // Same keys and tensors as a plain layer: checkpoints do not change.
    let keys = |bn: &BatchNorm2d| named_tensors(bn).into_iter().map(|(k, _, _)| k).collect::<Vec<_>>();
    assert_eq!(keys(&synced), keys(&layer(case)));

    // Eval and frozen forwards use the running statistics, bit for bit as a plain layer's
    // (normalising with the batch's statistics would differ by far more).
    let x = batch(case, 0).0;
    let plain = layer(case);
    assert!(synced.forward_t(&x, false).equal(&plain.forward_t(&x, false)));
    freeze_batch_norm(&mut synced);
    let mut frozen_plain = layer(case);
    freeze_batch_norm(&mut frozen_plain);
    assert!(synced.forward_t(&x, true).equal(&frozen_plain.forward_t(&x, true)));
    assert_eq!(revert_sync_batchnorm(&mut synced), 1);
    assert!(synced.sync.is_none());
}

/// Samples per rank and step of the DDP equivalence, and steps.
const DDP_PER_RANK: i64 = 4;
const DDP_STEPS: i64 = 3;

/// Trains `conv_bn` (Conv -> BatchNorm -> ReLU -> pool -> Linear) with SGD and momentum for
/// `DDP_STEPS` steps: as one rank of `pg` with synchronised BatchNorm under DDP, or (`None`) as
/// one process with plain BatchNorm on both ranks' batches concatenated.
pub fn train_conv_bn(pg: Option<&ProcessGroup>) -> Result<Sequential> {
    let mut model = conv_bn();
    init_deterministic(&model, 21);
    let mut ddp = match pg {
        Some(pg) => {
            anyhow::ensure!(convert_sync_batchnorm(&mut model, pg) == 1);
            Some(DistributedDataParallel::new(&model, pg, DdpConfig::default())?)
        }
        None => None,
    };
    let mut sgd = Sgd::new(vec![ParamGroup::new(
        torchlight_nn::named_parameters(&model),
        SgdConfig::new(0.1).with_momentum(0.9),
    )])?;
    let (xs, ys) = data(31, (2 * DDP_PER_RANK * DDP_STEPS) as usize, [3, 6, 6], 3);
    for step in 0..DDP_STEPS {
        let (start, len) = match pg {
            Some(pg) => ((2 * step + pg.rank() as i64) * DDP_PER_RANK, DDP_PER_RANK),
            None => (2 * step * DDP_PER_RANK, 2 * DDP_PER_RANK),
        };
        let loss = model
            .forward_t(&xs.narrow(0, start, len), true)
            .cross_entropy_for_logits(&ys.narrow(0, start, len));
        loss.backward();
        if let Some(ddp) = &mut ddp {
            ddp.sync_gradients()?;
        }
        sgd.step()?;
        sgd.zero_grad()?;
    }
    Ok(model)
}

/// The rank side of the DDP equivalence: the trained state, written to `rank<r>.safetensors`.
pub fn ddp_rank(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let model = train_conv_bn(Some(pg))?;
    torchlight_nn::save_safetensors(&model, out.join(format!("rank{}.safetensors", pg.rank())))?;
    Ok(())
}

/// With synchronised BatchNorm, data-parallel training of a model with BatchNorm equals one
/// process on the concatenated batch (plain DDP does not: each rank normalises its own batch).
#[test]
fn ddp_with_sync_batch_norm_trains_a_batch_norm_model_like_one_process() {
    let out = tempfile::tempdir().unwrap();
    let outcome = launch("sync_bn_ddp", 2, out.path());
    assert!(outcome.success(), "{}", describe(&outcome));
    let rank0 = read(&out.path().join("rank0.safetensors")).unwrap();
    let rank1 = read(&out.path().join("rank1.safetensors")).unwrap();
    assert_eq!(max_diff(&rank0, &rank1), 0.0, "the replicas are identical");
    let reference = state(&train_conv_bn(None).unwrap());
    let d = max_diff(&rank0, &reference);
    eprintln!("sync_bn under DDP: max |2 ranks - one process| = {d:e}");
    // float32 over 3 SGD steps, sums in another order: 1e-5.
    assert!(d < 1e-5, "max |2 ranks with SyncBatchNorm - one process| = {d}");
    let start = conv_bn();
    init_deterministic(&start, 21);
    assert!(max_diff(&state(&start), &reference) > 1e-2, "training moved the weights");
}
