//! `torchlight train` on several processes: `--nproc N` starts N local ranks of this same
//! command through torchlight-distributed's `Launcher`, and a rank started by it, by
//! `torchrun --no-python` or by `srun` joins the process group its environment describes.
//! Built with the `distributed` feature; without it both are one clear error.

use anyhow::Result;
use std::ffi::OsString;
use torchlight_train::Distributed;

/// This process's place in a data-parallel run.
pub struct World {
    /// The Trainer's world over the process group.
    pub dist: Box<dyn Distributed>,
    /// The rank on this machine (picks the GPU).
    pub local_rank: usize,
}

/// The command line of this process without `--nproc N` / `--nproc=N`: what each rank runs.
pub fn args_without_nproc() -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--nproc" {
            args.next();
        } else if !arg.to_string_lossy().starts_with("--nproc=") {
            out.push(arg);
        }
    }
    out
}

#[cfg(feature = "distributed")]
mod imp {
    use super::World;
    use anyhow::{Context, Result};
    use std::ffi::OsString;
    use torchlight_distributed::{
        Backend, DataParallel, DdpConfig, DistEnv, InitOptions, Launcher, ProcessGroup,
    };

    /// Starts `nproc` ranks of this command with `args` and waits for them; their output
    /// lines carry a `[rank N]` prefix. An error names the rank that failed first.
    pub fn launch(nproc: usize, args: Vec<OsString>) -> Result<()> {
        let exe =
            std::env::current_exe().context("cannot find the torchlight executable to start the ranks")?;
        Launcher::new(exe, nproc).args(args).run()?.into_result()?;
        Ok(())
    }

    /// The world this process is a rank of, when a launcher's environment (`WORLD_SIZE`, ...)
    /// says it is one: NCCL when it trains on CUDA, else Gloo.
    pub fn world(cuda: bool) -> Result<Option<World>> {
        let Some(env) = DistEnv::detect()? else { return Ok(None) };
        let backend = if cuda { Backend::Nccl } else { Backend::Gloo };
        let group = ProcessGroup::init(&env, &InitOptions::default().with_backend(backend))?;
        let dist = Box::new(DataParallel::new(&group, DdpConfig::default()));
        Ok(Some(World { dist, local_rank: env.local_rank }))
    }
}

#[cfg(not(feature = "distributed"))]
mod imp {
    use super::World;
    use anyhow::{bail, Result};
    use std::ffi::OsString;

    const HOW: &str = "this torchlight was built without the `distributed` feature: rebuild it with \
                       `cargo install torchlight-cli --features distributed` (its C++ part needs gloo's \
                       headers: `apt-get install libgloo-dev`, or `cargo xtask setup --distributed` in the \
                       workspace)";

    pub fn launch(nproc: usize, _args: Vec<OsString>) -> Result<()> {
        bail!("--nproc {nproc}: {HOW}")
    }

    pub fn world(_cuda: bool) -> Result<Option<World>> {
        match std::env::var("WORLD_SIZE").ok().and_then(|w| w.parse::<usize>().ok()) {
            Some(n) if n > 1 => bail!("WORLD_SIZE={n} asks for a distributed run, but {HOW}"),
            _ => Ok(None),
        }
    }
}

/// What `--version` says of data-parallel training in this build.
pub const BUILT_IN: &str = if cfg!(feature = "distributed") {
    "built in (train --nproc N, or ranks started by torchrun or srun)"
} else {
    "not built in (train --nproc needs `cargo install torchlight-cli --features distributed`, with gloo's headers: \
     `apt-get install libgloo-dev`)"
};

/// Starts `nproc` local ranks of this command (without `--nproc`) and waits for them.
pub fn launch(nproc: usize) -> Result<()> {
    imp::launch(nproc, args_without_nproc())
}

/// This process's world when it was started as a rank (by `--nproc`, torchrun or srun); `cuda`
/// picks NCCL over Gloo.
pub fn world(cuda: bool) -> Result<Option<World>> {
    imp::world(cuda)
}
