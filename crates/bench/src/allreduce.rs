//! The all-reduce rows: the bench server is rank 0 and a peer process (`torchlight-bench
//! allreduce-peer`, started on first use) is rank 1, over Gloo on loopback. Before each
//! repetition rank 0 broadcasts the command (`[1, elements, count]`; `[0, 0, 0]` to quit) and
//! both ranks run `count` all-reduces; `pytorch_bench.py` does the same with `dist.all_reduce`.

/// Each all-reduce row: name, float32 elements per all-reduce, all-reduces per repetition.
/// 25 MiB is DistributedDataParallel's default bucket.
pub const ALLREDUCE_WORKLOADS: &[(&str, usize, usize)] =
    &[("allreduce_2r_256kib", 64 << 10, 20), ("allreduce_2r_25mib", 25 << 18, 4)];

/// Bytes one rank reduces per repetition of `name`, for the bandwidth lines of the report.
pub fn bytes_per_rep(name: &str) -> Option<f64> {
    ALLREDUCE_WORKLOADS
        .iter()
        .find(|w| w.0 == name)
        .map(|&(_, elements, count)| (elements * count * 4) as f64)
}

#[cfg(feature = "distributed")]
pub use imp::{build, peer_main, shutdown};

#[cfg(not(feature = "distributed"))]
pub use off::{build, peer_main, shutdown};

#[cfg(feature = "distributed")]
mod imp {
    use crate::workloads::Workload;
    use anyhow::{Context as _, Result};
    use std::process::{Child, Command};
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;
    use tch::{Device, Kind, Tensor};
    use torchlight_distributed::{InitOptions, ProcessGroup, ReduceOp, TcpStore};

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
        loop {
            let cmd = Tensor::zeros([3], (Kind::Int64, Device::Cpu));
            group.broadcast(&cmd, 0)?;
            let cmd = Vec::<i64>::try_from(&cmd)?;
            if cmd[0] == 0 {
                return Ok(());
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
    use crate::workloads::Workload;
    use anyhow::{bail, Result};

    const WHY: &str = "torchlight-bench was built without its `distributed` feature (gloo's headers were \
                       missing; `cargo xtask setup --distributed`)";

    /// Without the feature there are no all-reduce rows.
    pub fn build(_elements: usize, _count: usize) -> Result<Box<dyn Workload>> {
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
