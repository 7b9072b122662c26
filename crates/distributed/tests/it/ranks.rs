//! The rank side of the multi-process tests: `entry` is what a launched rank runs (this test
//! binary filtered to `ranks::entry`, with `TL_DIST_SCENARIO` naming the scenario). A rank
//! whose scenario fails prints the error and exits with status 1; the launching test reads the
//! statuses, the output and the files the ranks write.
//!
//! Run as an ordinary test (no scenario set), `entry` runs the collectives scenario in a world
//! of one, which must hold for any world size.

use crate::common::{
    self, conv_bn, conv_mlp, data, init_deterministic, HANG_TIMEOUT_MS, OUT, SCENARIO, TIMEOUT_MS,
};
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_data::{DistributedSampler, Sampler};
use torchlight_distributed::{DdpConfig, DistributedDataParallel, InitOptions, ProcessGroup, ReduceOp};
use torchlight_nn::{freeze, save_safetensors, unfreeze, Linear, Module, Sequential};
use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};

#[test]
fn entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        collectives(&common::world_of_one()).expect("collectives in a world of one");
        return;
    };
    if let Err(e) = run(&scenario) {
        eprintln!("scenario {scenario} failed: {e:#}");
        std::process::exit(1);
    }
}

fn run(scenario: &str) -> Result<()> {
    let timeout = std::env::var(TIMEOUT_MS).ok().and_then(|v| v.parse().ok()).unwrap_or(60_000);
    let options = InitOptions::default().with_timeout(Duration::from_millis(timeout));
    let pg = ProcessGroup::init_from_env(&options)?;
    let out = PathBuf::from(std::env::var(OUT).context("TL_DIST_OUT")?);
    match scenario {
        "collectives" => collectives(&pg),
        "train_equivalence" => {
            let model = train_equivalence(Some(&pg))?;
            save_safetensors(&model, out.join(format!("rank{}.safetensors", pg.rank())))?;
            Ok(())
        }
        "ddp_vs_torch" => ddp_vs_torch(&pg, &out),
        "unused" => unused(&pg, &out),
        "mismatch" => mismatch(&pg),
        "dies" => dies(&pg),
        "hangs" => hangs(&pg),
        "trainer" => crate::trainer::rank(&pg, &out),
        "lr_find" => crate::trainer::lr_find_rank(&pg, &out),
        "sync_bn" => crate::sync_bn::rank(&pg, &out),
        "sync_bn_ddp" => crate::sync_bn::ddp_rank(&pg, &out),
        other => bail!("unknown scenario `{other}`"),
    }
}

/// Every collective against the values it must produce, for any world size.
pub fn collectives(pg: &ProcessGroup) -> Result<()> {
    let (rank, world) = (pg.rank() as f64, pg.world_size() as f64);
    let f = |v: &[f64]| Tensor::from_slice(v).to_kind(Kind::Float);
    let values = |t: &Tensor| Vec::<f64>::try_from(&t.to_kind(Kind::Double)).unwrap();
    // Rank r holds [r + 1, -(r + 1), 2].
    let mine = || f(&[rank + 1.0, -(rank + 1.0), 2.0]);
    let sum_1_to_w = world * (world + 1.0) / 2.0;
    let factorial: f64 = (1..=pg.world_size()).map(|r| r as f64).product();
    let cases = [
        (ReduceOp::Sum, [sum_1_to_w, -sum_1_to_w, 2.0 * world]),
        (ReduceOp::Avg, [sum_1_to_w / world, -sum_1_to_w / world, 2.0]),
        (ReduceOp::Max, [world, -1.0, 2.0]),
        (ReduceOp::Min, [1.0, -world, 2.0]),
        (ReduceOp::Product, [factorial, factorial * (-1f64).powf(world), 2f64.powf(world)]),
    ];
    for (op, want) in cases {
        let t = mine();
        pg.all_reduce(&t, op)?;
        let got = values(&t);
        ensure!(got == want, "{op:?}: got {got:?}, want {want:?}");
    }
    // Integers: a sum is exact; an average is refused before any communication.
    let ints = Tensor::from_slice(&[pg.rank() as i64, 10]);
    pg.all_reduce(&ints, ReduceOp::Sum)?;
    let n = pg.world_size() as i64;
    ensure!(Vec::<i64>::try_from(&ints)? == [n * (n - 1) / 2, 10 * n], "integer sum: {ints:?}");
    let err = pg.all_reduce(&ints, ReduceOp::Avg).unwrap_err().to_string();
    ensure!(err.contains("all_reduce") && err.contains("floating-point"), "{err}");
    // A view that is not contiguous is refused with advice.
    let wide = Tensor::zeros([3, 4], (Kind::Float, Device::Cpu));
    let err = pg.all_reduce(&wide.tr(), ReduceOp::Sum).unwrap_err().to_string();
    ensure!(err.contains(&format!("rank {}", pg.rank())) && err.contains("contiguous"), "{err}");
    // Broadcast from the last rank.
    let root = pg.world_size() - 1;
    let t = f(&[rank, rank * 10.0]);
    pg.broadcast(&t, root)?;
    ensure!(values(&t) == [root as f64, root as f64 * 10.0], "broadcast: {t:?}");
    // All-gather in rank order.
    let gathered = pg.all_gather(&f(&[rank, -rank]))?;
    ensure!(gathered.len() == pg.world_size());
    for (r, g) in gathered.iter().enumerate() {
        ensure!(values(g) == [r as f64, -(r as f64)], "all_gather slot {r}: {g:?}");
    }
    // Several tensors of several dtypes in one call.
    let (a, b, c) = (f(&[rank; 4]), Tensor::from_slice(&[1i64, 2]), f(&[1.0]));
    pg.all_reduce_many(&[&a, &b, &c.view([1, 1])], ReduceOp::Sum)?;
    let ranks_sum = world * (world - 1.0) / 2.0;
    ensure!(values(&a) == [ranks_sum; 4], "many: {a:?}");
    ensure!(Vec::<i64>::try_from(&b)? == [n, 2 * n], "many: {b:?}");
    ensure!(values(&c) == [world], "many: {c:?}");
    // The timeout can change between collectives (every rank alike).
    let before = pg.timeout();
    pg.set_timeout(Duration::from_secs(45))?;
    ensure!(pg.timeout() == Duration::from_secs(45));
    ensure!(pg.set_timeout(Duration::ZERO).is_err());
    pg.set_timeout(before)?;
    pg.barrier()?;
    Ok(())
}

/// The schedule of the equivalence test: 16 samples, 2 epochs, 4 samples per rank and step in
/// 2 micro-batches (gradient accumulation), the convolution frozen in epoch 0.
pub const EQ_SAMPLES: usize = 16;
/// Epochs of the equivalence test.
pub const EQ_EPOCHS: u64 = 2;
/// Samples per rank and optimizer step.
pub const EQ_PER_RANK: usize = 4;
/// Micro-batches per optimizer step.
pub const EQ_MICRO: usize = 2;

/// The model and optimizer both sides of the equivalence test start from. `init_seed` differs
/// per rank so that only DDP's broadcast can make the replicas equal.
pub fn equivalence_setup(init_seed: u64) -> Result<(Sequential, Sgd)> {
    let model = conv_mlp();
    init_deterministic(&model, init_seed);
    let params = torchlight_nn::named_parameters(&model);
    let sgd = Sgd::new(vec![ParamGroup::new(
        params,
        SgdConfig::new(0.1).with_momentum(0.9).with_weight_decay(1e-3),
    )])?;
    Ok((model, sgd))
}

/// Freezes the convolution in epoch 0 and trains everything from epoch 1.
pub fn equivalence_freeze(model: &Sequential, epoch: u64) {
    if epoch == 0 {
        freeze(model, "0.");
    } else {
        unfreeze(model, "0.");
    }
}

/// Trains the equivalence model as one rank of `pg`, or (with `None`) as one process on the
/// batches of every rank of a world of `reference_world` concatenated.
pub fn train_equivalence(pg: Option<&ProcessGroup>) -> Result<Sequential> {
    let rank = pg.map_or(0, |p| p.rank());
    let (model, mut sgd) = equivalence_setup(10 + rank as u64)?;
    let mut ddp = match pg {
        Some(pg) => {
            Some(DistributedDataParallel::new(&model, pg, DdpConfig::default().with_bucket_cap_mb(0.0005))?)
        }
        None => None,
    };
    let world = pg.map_or(2, |p| p.world_size());
    let (xs, ys) = data(99, EQ_SAMPLES, [2, 4, 4], 3);
    let samplers: Vec<DistributedSampler> = (0..world)
        .map(|r| DistributedSampler::new(EQ_SAMPLES, world, r).map(|s| s.with_seed(3)))
        .collect::<Result<_, _>>()?;
    for epoch in 0..EQ_EPOCHS {
        equivalence_freeze(&model, epoch);
        let orders: Vec<Vec<usize>> = samplers.iter().map(|s| s.indices(epoch)).collect();
        for step in 0..orders[0].len() / EQ_PER_RANK {
            let shard = |r: usize| orders[r][step * EQ_PER_RANK..(step + 1) * EQ_PER_RANK].to_vec();
            match &mut ddp {
                Some(ddp) => {
                    for micro in shard(rank).chunks(EQ_PER_RANK / EQ_MICRO) {
                        let loss = loss_on(&model, &xs, &ys, micro) / EQ_MICRO as f64;
                        loss.backward();
                    }
                    ddp.sync_gradients()?;
                }
                None => {
                    let all: Vec<usize> = (0..world).flat_map(shard).collect();
                    loss_on(&model, &xs, &ys, &all).backward();
                }
            }
            sgd.step()?;
            sgd.zero_grad()?;
        }
    }
    Ok(model)
}

fn loss_on(model: &dyn Module, xs: &Tensor, ys: &Tensor, indices: &[usize]) -> Tensor {
    let idx = Tensor::from_slice(&indices.iter().map(|&i| i as i64).collect::<Vec<_>>());
    model.forward_t(&xs.index_select(0, &idx), true).cross_entropy_for_logits(&ys.index_select(0, &idx))
}

/// The fixture of `tests/fixtures/make_ddp.py`: real PyTorch DDP (Gloo, 2 ranks) on `conv_bn`.
pub fn torch_fixture() -> Result<Vec<(String, Tensor)>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ddp_conv_bn.safetensors");
    Ok(torchlight_nn::read_safetensors(&path)?)
}

fn take(fixture: &[(String, Tensor)], key: &str) -> Result<Tensor> {
    fixture
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, t)| t.shallow_clone())
        .with_context(|| format!("fixture key {key}"))
}

/// `conv_bn` loaded with the fixture's initial state.
pub fn conv_bn_from_fixture(fixture: &[(String, Tensor)]) -> Result<Sequential> {
    let model = conv_bn();
    let initial: Vec<(String, Tensor)> = fixture
        .iter()
        .filter_map(|(k, t)| k.strip_prefix("initial.").map(|k| (k.to_string(), t.shallow_clone())))
        .collect();
    torchlight_nn::load_state_dict(&model, initial, &torchlight_nn::LoadOptions::strict())?;
    Ok(model)
}

/// The fixture's training, as this rank: SGD(lr 0.1, momentum 0.9) for 3 steps on the
/// fixture's per-rank batches; writes the final state.
fn ddp_vs_torch(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let fixture = torch_fixture()?;
    let model = conv_bn_from_fixture(&fixture)?;
    let mut ddp = DistributedDataParallel::new(&model, pg, DdpConfig::default())?;
    let mut sgd = Sgd::new(vec![ParamGroup::new(
        torchlight_nn::named_parameters(&model),
        SgdConfig::new(0.1).with_momentum(0.9),
    )])?;
    let (xs, ys) = (take(&fixture, "xs")?, take(&fixture, "ys")?);
    for step in 0..xs.size()[0] {
        let (x, y) = (xs.get(step).get(pg.rank() as i64), ys.get(step).get(pg.rank() as i64));
        model.forward_t(&x, true).cross_entropy_for_logits(&y).backward();
        ddp.sync_gradients()?;
        sgd.step()?;
        sgd.zero_grad()?;
    }
    save_safetensors(&model, out.join(format!("rank{}.safetensors", pg.rank())))?;
    Ok(())
}

/// Two heads: `a` used by every rank, `b` by rank 0 only, `c` by none. With
/// `find_unused_parameters`, `b`'s gradient is averaged (zeros where unused) and `c`'s stays
/// unset; each rank writes its gradients.
fn unused(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let model = Sequential::new()
        .add_named("a", Linear::new(3, 2, true))
        .add_named("b", Linear::new(3, 2, true))
        .add_named("c", Linear::new(3, 2, true));
    init_deterministic(&model, 5);
    let mut ddp =
        DistributedDataParallel::new(&model, pg, DdpConfig::default().with_find_unused_parameters(true))?;
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).view([1, 3]) * (pg.rank() as f64 + 1.0);
    let heads: Vec<&dyn Module> = (0..3).map(|i| model.get(i).expect("three heads")).collect();
    let mut y = heads[0].forward_t(&x, true);
    if pg.rank() == 0 {
        y += heads[1].forward_t(&x, true);
    }
    y.sum(Kind::Float).backward();
    ddp.sync_gradients()?;
    let mut grads = Vec::new();
    for (name, p) in torchlight_nn::named_parameters(&model) {
        let g = p.grad();
        ensure!(g.defined() != name.starts_with("c."), "{name}: defined {}", g.defined());
        if g.defined() {
            grads.push((name, g.copy()));
        }
    }
    Tensor::write_safetensors(&grads, out.join(format!("grads{}.safetensors", pg.rank())))?;
    Ok(())
}

/// Rank 1 builds a model with one more layer: DistributedDataParallel must refuse on every
/// rank.
fn mismatch(pg: &ProcessGroup) -> Result<()> {
    let mut model = conv_mlp();
    if pg.rank() == 1 {
        model = model.add(Linear::new(3, 3, true));
    }
    match DistributedDataParallel::new(&model, pg, DdpConfig::default()) {
        Ok(_) => bail!("rank {} accepted a model that differs across ranks", pg.rank()),
        Err(e) => {
            // The expected outcome: report it and end as a failed rank would.
            eprintln!("DDP refused: {e}");
            std::process::exit(2);
        }
    }
}

/// The last rank completes one all-reduce, then dies; the others keep reducing and must fail
/// with an error naming their rank and the operation.
fn dies(pg: &ProcessGroup) -> Result<()> {
    let t = Tensor::ones([1024], (Kind::Float, Device::Cpu));
    pg.all_reduce(&t, ReduceOp::Sum)?;
    if pg.rank() == pg.world_size() - 1 {
        eprintln!("rank {} exits on purpose", pg.rank());
        std::process::exit(3);
    }
    for _ in 0..20 {
        pg.all_reduce(&t, ReduceOp::Sum)?;
    }
    bail!("rank {} kept reducing with a dead peer", pg.rank())
}

/// The last rank stops calling collectives (it sleeps); the others must time out with an
/// error naming their rank and the operation. The short timeout (`TL_DIST_HANG_TIMEOUT_MS`) is
/// set once every rank has joined, so a slow start on a loaded machine cannot trip it.
fn hangs(pg: &ProcessGroup) -> Result<()> {
    let t = Tensor::ones([8], (Kind::Float, Device::Cpu));
    pg.all_reduce(&t, ReduceOp::Sum)?;
    let short = std::env::var(HANG_TIMEOUT_MS).context("TL_DIST_HANG_TIMEOUT_MS")?.parse()?;
    pg.set_timeout(Duration::from_millis(short))?;
    if pg.rank() == pg.world_size() - 1 {
        std::thread::sleep(Duration::from_secs(120));
        bail!("rank {} woke up", pg.rank());
    }
    pg.all_reduce(&t, ReduceOp::Sum)?;
    bail!("rank {} finished an all-reduce its peer never joined", pg.rank())
}
