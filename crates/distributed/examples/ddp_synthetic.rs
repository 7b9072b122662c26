//! Data-parallel training end to end on a synthetic task: DistributedSampler shards, DDP
//! gradient averaging, metrics reduced across ranks, rank 0 alone printing.
//!
//! ```sh
//! cargo run --release -p torchlight-distributed --example ddp_synthetic -- --nproc 2
//! torchrun --standalone --nproc-per-node=2 --no-python target/release/examples/ddp_synthetic
//! ```
//!
//! With `--nproc N` and no launcher around it, the program starts N ranks of itself through
//! `Launcher` (what `torchlight train --nproc N` will do); under torchrun, srun or a PyTorchJob
//! it reads its place from the environment.

use anyhow::{Context, Result};
use std::time::Duration;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_data::{DistributedSampler, Sampler};
use torchlight_distributed::{
    DdpConfig, DistEnv, DistributedDataParallel, InitOptions, Launcher, ProcessGroup, ReduceOp,
};
use torchlight_nn::{Conv2d, Conv2dConfig, Flatten, Linear, ReLU, Sequential};
use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};

const SAMPLES: usize = 512;
const BATCH_PER_RANK: usize = 32;
const EPOCHS: u64 = 3;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if DistEnv::detect()?.is_none() {
        let nproc = match args.iter().position(|a| a == "--nproc") {
            Some(i) => args.get(i + 1).context("--nproc needs a number")?.parse().context("--nproc")?,
            None => 1,
        };
        let exe = std::env::current_exe()?;
        return Launcher::new(exe, nproc).run()?.into_result().map(|_| ()).map_err(Into::into);
    }
    train()
}

/// A deterministic task: the class is the quadrant holding the brightest pixel of an 8x8 image.
fn dataset() -> (Tensor, Tensor) {
    tch::manual_seed(0);
    let xs = Tensor::rand([SAMPLES as i64, 1, 8, 8], (Kind::Float, Device::Cpu));
    let flat = xs.view([SAMPLES as i64, 64]).argmax(1, false);
    let (row, col) = (flat.divide_scalar_mode(8, "floor"), flat.remainder(8));
    let ys = row.ge(4).to_kind(Kind::Int64) * 2 + col.ge(4).to_kind(Kind::Int64);
    (xs, ys)
}

fn train() -> Result<()> {
    let pg = ProcessGroup::init_from_env(&InitOptions::default().with_timeout(Duration::from_secs(120)))?;
    let (xs, ys) = dataset();
    tch::manual_seed(100 + pg.rank() as i64); // different on purpose: DDP broadcasts rank 0's
    let model = Sequential::new()
        .add(Conv2d::new(1, 8, 3, Conv2dConfig::default().with_padding(1)))
        .add(ReLU)
        .add(Flatten::default())
        .add(Linear::new(8 * 64, 4, true));
    let mut ddp = DistributedDataParallel::new(&model, &pg, DdpConfig::default())?;
    let params = torchlight_nn::named_parameters(&model);
    let mut sgd = Sgd::new(vec![ParamGroup::new(params, SgdConfig::new(0.05).with_momentum(0.9))])?;
    let sampler = DistributedSampler::new(SAMPLES, pg.world_size(), pg.rank())?.with_seed(7);
    if pg.is_main() {
        println!(
            "{} ranks, {} samples each per epoch, batch {} per rank ({} global)",
            pg.world_size(),
            sampler.len(),
            BATCH_PER_RANK,
            BATCH_PER_RANK * pg.world_size()
        );
    }
    for epoch in 0..EPOCHS {
        // [loss sum, correct, seen], summed over the ranks at the end of the epoch.
        let totals = Tensor::zeros([3], (Kind::Double, Device::Cpu));
        for batch in sampler.indices(epoch).chunks(BATCH_PER_RANK) {
            let idx = Tensor::from_slice(&batch.iter().map(|&i| i as i64).collect::<Vec<_>>());
            let (x, y) = (xs.index_select(0, &idx), ys.index_select(0, &idx));
            let logits = model.forward_t(&x, true);
            let loss = logits.cross_entropy_for_logits(&y);
            loss.backward();
            ddp.sync_gradients()?;
            sgd.step()?;
            sgd.zero_grad()?;
            let n = batch.len() as f64;
            let correct = logits.argmax(1, false).eq_tensor(&y).sum(Kind::Double);
            let step = Tensor::stack(&[loss.detach().to_kind(Kind::Double) * n, correct, Tensor::from(n)], 0);
            let _ = totals.shallow_clone().f_add_(&step)?;
        }
        pg.all_reduce(&totals, ReduceOp::Sum)?;
        let t = Vec::<f64>::try_from(&totals)?;
        if pg.is_main() {
            println!(
                "epoch {epoch}: loss {:.4}, accuracy {:.1}% over {} samples",
                t[0] / t[2],
                100.0 * t[1] / t[2],
                t[2]
            );
        }
    }
    Ok(())
}
