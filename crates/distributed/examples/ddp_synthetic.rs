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

/// A deterministic task: noise with one brighter quadrant of an 8x8 image, the class.
fn dataset() -> (Tensor, Tensor) {
    tch::manual_seed(0);
    let n = SAMPLES as i64;
    let ys = Tensor::randint(4, [n], (Kind::Int64, Device::Cpu));
    let (row, col) = (ys.divide_scalar_mode(2, "floor"), ys.remainder(2));
    let pixel = Tensor::arange(8, (Kind::Int64, Device::Cpu)).divide_scalar_mode(4, "floor");
    // [n, 8, 8]: 1 where the pixel's quadrant is the sample's.
    let in_row = pixel.view([1, 8, 1]).eq_tensor(&row.view([n, 1, 1]));
    let in_col = pixel.view([1, 1, 8]).eq_tensor(&col.view([n, 1, 1]));
    let bright = in_row.logical_and(&in_col).to_kind(Kind::Float);
    let xs = Tensor::rand([n, 8, 8], (Kind::Float, Device::Cpu)) + bright * 0.5;
    (xs.unsqueeze(1), ys)
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
