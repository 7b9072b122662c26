//! `DistEnv`: where this process sits in a distributed job, read from the environment that
//! `torchrun`, Torchlight's [`crate::Launcher`], SLURM scripts and Kubernetes' PyTorchJob set.

use crate::error::{DistributedError, Result};

/// The launch protocol's variables, as torch.distributed's `env://` rendezvous reads them.
///
/// | variable | meaning | if unset |
/// | --- | --- | --- |
/// | `RANK` | this process's rank, `0..WORLD_SIZE` | `SLURM_PROCID` |
/// | `WORLD_SIZE` | the number of processes | `SLURM_NTASKS` |
/// | `LOCAL_RANK` | the rank on this machine (picks the GPU) | `SLURM_LOCALID`, else `RANK` |
/// | `LOCAL_WORLD_SIZE` | processes on this machine | `SLURM_NTASKS_PER_NODE` (a plain number), else `WORLD_SIZE` |
/// | `MASTER_ADDR` | host of the TCPStore | required |
/// | `MASTER_PORT` | its port | required |
/// | `TORCHELASTIC_USE_AGENT_STORE` | `True`: the launcher's agent hosts the store, so every rank (rank 0 too) connects as a client | rank 0 hosts it |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// The rank on this machine.
    pub local_rank: usize,
    /// The number of processes on this machine.
    pub local_world_size: usize,
    /// The TCPStore's host.
    pub master_addr: String,
    /// The TCPStore's port.
    pub master_port: u16,
    /// Whether the store is hosted by a launcher agent (torchrun, [`crate::Launcher`]) rather
    /// than by rank 0.
    pub agent_store: bool,
}

impl DistEnv {
    /// A single-machine job where rank 0 hosts the store at `master_addr:master_port`.
    pub fn new(
        rank: usize,
        world_size: usize,
        master_addr: impl Into<String>,
        master_port: u16,
    ) -> Result<Self> {
        let env = DistEnv {
            rank,
            world_size,
            local_rank: rank,
            local_world_size: world_size,
            master_addr: master_addr.into(),
            master_port,
            agent_store: false,
        };
        env.validate()?;
        Ok(env)
    }

    /// Reads the launch protocol from this process's environment (see the table above);
    /// missing or malformed variables are errors naming them.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// `Some` when this process was launched as part of a distributed job (`WORLD_SIZE` is set,
    /// or SLURM runs more than one task), `None` for a plain run.
    pub fn detect() -> Result<Option<Self>> {
        Self::detect_with(|k| std::env::var(k).ok())
    }

    pub(crate) fn detect_with(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let slurm_tasks = lookup("SLURM_NTASKS").and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(0);
        if lookup("WORLD_SIZE").is_none() && slurm_tasks <= 1 {
            return Ok(None);
        }
        Self::from_lookup(lookup).map(Some)
    }

    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let read = |var: &'static str, fallback: Option<&'static str>| -> Option<(&'static str, String)> {
            lookup(var).map(|v| (var, v)).or_else(|| fallback.and_then(|f| lookup(f).map(|v| (f, v))))
        };
        let number = |found: Option<(&'static str, String)>| -> Result<Option<usize>> {
            match found {
                None => Ok(None),
                Some((var, value)) => value.trim().parse::<usize>().map(Some).map_err(|_| {
                    DistributedError::Env { var, reason: format!("`{value}` is not a non-negative integer") }
                }),
            }
        };
        let missing =
            |var: &'static str, hint: &str| DistributedError::Env { var, reason: format!("not set; {hint}") };
        let launch_hint = "launch with torchrun, `torchlight`'s launcher or srun, or set RANK, WORLD_SIZE, \
                           MASTER_ADDR and MASTER_PORT (see docs/distributed.md)";
        let rank = number(read("RANK", Some("SLURM_PROCID")))?.ok_or_else(|| missing("RANK", launch_hint))?;
        let world_size = number(read("WORLD_SIZE", Some("SLURM_NTASKS")))?
            .ok_or_else(|| missing("WORLD_SIZE", launch_hint))?;
        let local_rank = number(read("LOCAL_RANK", Some("SLURM_LOCALID")))?.unwrap_or(rank);
        // SLURM_NTASKS_PER_NODE may read `2(x3)` on heterogeneous allocations; only a plain
        // number is taken.
        let local_world_size = match lookup("LOCAL_WORLD_SIZE") {
            Some(v) => number(Some(("LOCAL_WORLD_SIZE", v)))?.unwrap_or(world_size),
            None => lookup("SLURM_NTASKS_PER_NODE").and_then(|v| v.trim().parse().ok()).unwrap_or(world_size),
        };
        let master_addr = lookup("MASTER_ADDR")
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| {
                missing(
                    "MASTER_ADDR",
                    "it names the host of rank 0 (or of the launcher's store); under SLURM, export it from \
                     `scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1` (see docs/distributed.md)",
                )
            })?
            .trim()
            .to_string();
        let port_text =
            lookup("MASTER_PORT").ok_or_else(|| missing("MASTER_PORT", "pick a free port on MASTER_ADDR"))?;
        let master_port = port_text.trim().parse::<u16>().map_err(|_| DistributedError::Env {
            var: "MASTER_PORT",
            reason: format!("`{port_text}` is not a port number (0..=65535)"),
        })?;
        let agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.trim() == "True");
        let env =
            DistEnv { rank, world_size, local_rank, local_world_size, master_addr, master_port, agent_store };
        env.validate()?;
        Ok(env)
    }

    fn validate(&self) -> Result<()> {
        if self.world_size == 0 {
            return Err(DistributedError::Config {
                field: "world_size",
                reason: "must be at least 1".into(),
            });
        }
        if self.rank >= self.world_size {
            return Err(DistributedError::Config {
                field: "rank",
                reason: format!("rank {} is not below the world size {}", self.rank, self.world_size),
            });
        }
        if self.local_rank >= self.local_world_size {
            return Err(DistributedError::Config {
                field: "local_rank",
                reason: format!(
                    "local rank {} is not below the local world size {}",
                    self.local_rank, self.local_world_size
                ),
            });
        }
        if i32::try_from(self.world_size).is_err() {
            return Err(DistributedError::Config {
                field: "world_size",
                reason: format!("{} is more ranks than c10d supports", self.world_size),
            });
        }
        Ok(())
    }

    /// Whether this process is rank 0, the one that writes run folders and logs.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn reads_torchruns_variables() {
        let env = DistEnv::from_lookup(lookup(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ]))
        .unwrap();
        assert_eq!(
            env,
            DistEnv {
                rank: 3,
                world_size: 4,
                local_rank: 1,
                local_world_size: 2,
                master_addr: "node0".into(),
                master_port: 29500,
                agent_store: true,
            }
        );
        assert!(!env.is_main());
    }

    #[test]
    fn falls_back_to_slurm_and_defaults() {
        let env = DistEnv::from_lookup(lookup(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("MASTER_ADDR", "gpu-17"),
            ("MASTER_PORT", "12355"),
        ]))
        .unwrap();
        assert_eq!((env.rank, env.world_size, env.local_rank, env.local_world_size), (5, 8, 1, 4));
        assert!(!env.agent_store);
        let plain = DistEnv::from_lookup(lookup(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "1"),
            ("SLURM_NTASKS_PER_NODE", "2(x3)"),
        ]))
        .unwrap();
        assert_eq!((plain.local_rank, plain.local_world_size), (1, 2));
    }

    #[test]
    fn names_the_missing_or_bad_variable() {
        let err = DistEnv::from_lookup(lookup(&[("WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(err.contains("RANK") && err.contains("not set"), "{err}");
        let err =
            DistEnv::from_lookup(lookup(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err().to_string();
        assert!(err.contains("RANK") && err.contains("`x`"), "{err}");
        let base = [("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")];
        let err = DistEnv::from_lookup(lookup(&base)).unwrap_err().to_string();
        assert!(err.contains("MASTER_PORT"), "{err}");
        let err = DistEnv::from_lookup(lookup(&[base[0], base[1], base[2], ("MASTER_PORT", "70000")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MASTER_PORT") && err.contains("70000"), "{err}");
        let err = DistEnv::from_lookup(lookup(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "2"),
            base[2],
            ("MASTER_PORT", "1"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("rank 2 is not below the world size 2"), "{err}");
        let err = DistEnv::from_lookup(lookup(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MASTER_ADDR") && err.contains("scontrol"), "{err}");
    }

    #[test]
    fn detects_a_distributed_launch_only_when_one_is_there() {
        assert_eq!(DistEnv::detect_with(lookup(&[])).unwrap(), None);
        // A single SLURM task is a plain run.
        assert_eq!(
            DistEnv::detect_with(lookup(&[("SLURM_NTASKS", "1"), ("SLURM_PROCID", "0")])).unwrap(),
            None
        );
        assert!(DistEnv::detect_with(lookup(&[("SLURM_NTASKS", "2"), ("SLURM_PROCID", "0")])).is_err());
        let found = DistEnv::detect_with(lookup(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "29500"),
        ]))
        .unwrap()
        .unwrap();
        assert!(found.is_main());
    }
}
