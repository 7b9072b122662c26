//! The two-rank rows: the bench server is rank 0 and a peer process (`torchlight-bench
//! allreduce-peer`, started on first use) is rank 1, over Gloo on loopback. Before each
//! repetition rank 0 broadcasts the command and both ranks follow it: `[1, elements, count]`
//! runs `count` all-reduces; `[2, row, steps]` runs `steps` data-parallel training steps of the
//! training row `row` of [`DDP_WORKLOADS`] (with `steps` 0 it only builds the row's model and
//! `DistributedDataParallel`, which broadcasts rank 0's weights); `[0, 0, 0]` quits.
//! `pytorch_bench.py` does the same with `dist.all_reduce` and torch's DDP.

/// Each all-reduce row: name, float32 elements per all-reduce, all-reduces per repetition.
/// 25 MiB is DistributedDataParallel's default bucket.
pub const ALLREDUCE_WORKLOADS: &[(&str, usize, usize)] =
    &[("allreduce_2r_256kib", 64 << 10, 20), ("allreduce_2r_25mib", 25 << 18, 4)];

/// The data-parallel training rows: name, batch per rank, image size. Each repetition is
/// [`DDP_STEPS`] training steps of resnet18 (10 classes) on each of the 2 ranks, one thread each;
/// a rank's batch is half of `train_resnet18_64_b32`'s, so the two rows process the same images
/// per step and their ratio is the speed-up of 2 ranks over 1 process on this machine.
pub const DDP_WORKLOADS: &[(&str, i64, i64)] = &[("train_ddp_2r_resnet18_64_b16", 16, 64)];

/// Training steps per repetition of a [`DDP_WORKLOADS`] row.
pub const DDP_STEPS: i64 = 2;

/// Bytes one rank reduces per repetition of `name`, for the bandwidth lines of the report.
pub fn bytes_per_rep(name: &str) -> Option<f64> {
    ALLREDUCE_WORKLOADS
        .iter()
        .find(|w| w.0 == name)
        .map(|&(_, elements, count)| (elements * count * 4) as f64)
}

#[cfg(feature = "distributed")]
pub use imp::{build, build_ddp, peer_main, shutdown};

#[cfg(not(feature = "distributed"))]
pub use off::{build, build_ddp, peer_main, shutdown};

#[cfg(feature = "distributed")]
mod imp {
    use super::{DDP_STEPS, DDP_WORKLOADS};
    use crate::common::{adamw, inputs, Workload};
    use anyhow::{Context as _, Result};
    use std::process::{Child, Command};
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;
    use tch::{Device, Kind, Tensor};
    use torchlight_distributed::{
        DdpConfig, DistributedDataParallel, InitOptions, ProcessGroup, ReduceOp, TcpStore,
    };
    use torchlight_nn::{resnet18, CrossEntropyLoss, ModuleT, ResNet};
    use torchlight_optim::{AdamW, Optimizer};

    const TIMEOUT: Duration = Duration::from_secs(600);

    /// The two-rank group, made once and shared by the all-reduce rows.
    struct Pair {
        group: ProcessGroup,
        peer: Mutex<Child>,
        _store: TcpStore,
    }

    static PAIR: OnceLock<Pair> = OnceLock::new();

    fn pair() -> Result<&'static Pair> {
        if let Some(p) = PAIR.get() {
            return Ok(p);
        }
        let store = TcpStore::host(0, 2, TIMEOUT)?;
        let exe = std::env::current_exe()?;
        let peer = Command::new(&exe)
            .arg("allreduce-peer")
            .env("RANK", "1")
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", store.port().to_string())
            .env("TORCHELASTIC_USE_AGENT_STORE", "True")
            // The server's stdout is the bench protocol; the peer has nothing to say there.
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting the all-reduce peer {}", exe.display()))?;
        let group = ProcessGroup::with_store(&store, 0, 2, &InitOptions::default().with_timeout(TIMEOUT))?;
        let _ = PAIR.set(Pair { group, peer: Mutex::new(peer), _store: store });
        Ok(PAIR.get().expect("just set"))
    }

    fn command(group: &ProcessGroup, values: [i64; 3]) -> Result<()> {
        group.broadcast(&Tensor::from_slice(&values), 0)?;
        Ok(())
    }

    struct AllReduce {
        group: &'static ProcessGroup,
        buffer: Tensor,
        count: usize,
    }

    impl Workload for AllReduce {
        fn run(&mut self) -> Result<()> {
            command(self.group, [1, self.buffer.numel() as i64, self.count as i64])?;
            for _ in 0..self.count {
                self.group.all_reduce(&self.buffer, ReduceOp::Sum)?;
            }
            Ok(())
        }
    }

    /// The row `elements` x `count`.
    pub fn build(elements: usize, count: usize) -> Result<Box<dyn Workload>> {
        let group = &pair()?.group;
        let buffer = Tensor::zeros([elements as i64], (Kind::Float, Device::Cpu));
        Ok(Box::new(AllReduce { group, buffer, count }))
    }

    /// One rank's side of a data-parallel training row: resnet18 under
    /// `DistributedDataParallel`, AdamW, a fixed batch.
    struct DdpStep {
        model: ResNet,
        ddp: DistributedDataParallel,
        optimizer: AdamW,
        loss: CrossEntropyLoss,
        x: Tensor,
        y: Tensor,
    }

    impl DdpStep {
        /// Collective: both ranks build it at the same command.
        fn new(group: &ProcessGroup, row: usize) -> Result<Self> {
            let (_, batch, size) = DDP_WORKLOADS[row];
            let model = resnet18(10);
            let ddp = DistributedDataParallel::new(&model, group, DdpConfig::default())?;
            let optimizer = adamw(&model)?;
            let (x, y) = inputs(batch, size);
            Ok(DdpStep { model, ddp, optimizer, loss: CrossEntropyLoss::new(), x, y })
        }

        /// `steps` training steps on one thread (the other rank has the other core).
        fn steps(&mut self, steps: i64) -> Result<()> {
            let threads = tch::get_num_threads();
            tch::set_num_threads(1);
            let result = (0..steps).try_for_each(|_| -> Result<()> {
                self.optimizer.zero_grad()?;
                let logits = self.model.forward_t(&self.x, true);
                self.loss.forward(&logits, &self.y)?.backward();
                self.ddp.sync_gradients()?;
                self.optimizer.step()?;
                Ok(())
            });
            tch::set_num_threads(threads);
            result
        }
    }

    struct DdpTrain {
        group: &'static ProcessGroup,
        row: usize,
        step: DdpStep,
    }

    impl Workload for DdpTrain {
        fn run(&mut self) -> Result<()> {
            command(self.group, [2, self.row as i64, DDP_STEPS])?;
            self.step.steps(DDP_STEPS)
        }
    }

    /// The training row `row` of [`DDP_WORKLOADS`]; the peer builds its replica alongside.
    pub fn build_ddp(row: usize) -> Result<Box<dyn Workload>> {
        let group = &pair()?.group;
        command(group, [2, row as i64, 0])?;
        let step = DdpStep::new(group, row)?;
        Ok(Box::new(DdpTrain { group, row, step }))
    }

    /// Tells the peer to quit and waits for it, if one was started.
    pub fn shutdown() -> Result<()> {
        if let Some(p) = PAIR.get() {
            command(&p.group, [0, 0, 0])?;
            let status = p.peer.lock().map_err(|_| anyhow::anyhow!("peer lock poisoned"))?.wait()?;
            anyhow::ensure!(status.success(), "the all-reduce peer exited with {status}");
        }
        Ok(())
    }

    /// Rank 1: follows rank 0's commands until told to quit.
    pub fn peer_main() -> Result<()> {
        let group = ProcessGroup::init_from_env(&InitOptions::default().with_timeout(TIMEOUT))?;
        let mut buffer = Tensor::zeros([0], (Kind::Float, Device::Cpu));
        let mut training: Option<(i64, DdpStep)> = None;
        loop {
            let cmd = Tensor::zeros([3], (Kind::Int64, Device::Cpu));
            group.broadcast(&cmd, 0)?;
            let cmd = Vec::<i64>::try_from(&cmd)?;
            if cmd[0] == 0 {
                return Ok(());
            }
            if cmd[0] == 2 {
                if training.as_ref().is_none_or(|(row, _)| *row != cmd[1]) {
                    let row = usize::try_from(cmd[1]).context("training row")?;
                    training = Some((cmd[1], DdpStep::new(&group, row)?));
                }
                training.as_mut().expect("built above").1.steps(cmd[2])?;
                continue;
            }
            if buffer.numel() as i64 != cmd[1] {
                buffer = Tensor::zeros([cmd[1]], (Kind::Float, Device::Cpu));
            }
            for _ in 0..cmd[2] {
                group.all_reduce(&buffer, ReduceOp::Sum)?;
            }
        }
    }
}

#[cfg(not(feature = "distributed"))]
mod off {
    use crate::common::Workload;
    use anyhow::{bail, Result};

    const WHY: &str = "torchlight-bench was built without its `distributed` feature (gloo's headers were \
                       missing; `cargo xtask setup --distributed`)";

    /// Without the feature there are no all-reduce rows.
    pub fn build(_elements: usize, _count: usize) -> Result<Box<dyn Workload>> {
        bail!("{WHY}")
    }

    /// Nor data-parallel training rows.
    pub fn build_ddp(_row: usize) -> Result<Box<dyn Workload>> {
        bail!("{WHY}")
    }

    /// Nothing was started.
    pub fn shutdown() -> Result<()> {
        Ok(())
    }

    /// No peer without the feature.
    pub fn peer_main() -> Result<()> {
        bail!("{WHY}")
    }
}
