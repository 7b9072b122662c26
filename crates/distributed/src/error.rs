//! The distributed crate's error type: every variant names the rank (or the launcher) at fault.

/// What can go wrong in `torchlight-distributed`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistributedError {
    /// An environment variable of the launch protocol (`RANK`, `MASTER_PORT`, ...) is missing or
    /// malformed.
    #[error("environment variable {var}: {reason}")]
    Env {
        /// The variable's name.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting that cannot work (a rank past the world size, a zero timeout, ...).
    #[error("invalid {field}: {reason}")]
    Config {
        /// The setting's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// c10d raised an error (its C++ exception, caught at the boundary): a peer that died or
    /// timed out, a store that could not be reached, a bad argument.
    #[error("{}: {op} failed: {message}", who(.rank))]
    Torch {
        /// The rank that saw the failure; `None` for the launcher.
        rank: Option<usize>,
        /// The operation (`all_reduce`, `connect to the TCPStore at host:port`, ...).
        op: String,
        /// c10d's message, without its C++ backtrace.
        message: String,
    },
    /// A tensor a collective cannot take (not contiguous, on the wrong device, integer for
    /// `Avg`, shapes that differ).
    #[error("rank {rank}: {op}: {reason}")]
    Tensor {
        /// The rank that called the collective.
        rank: usize,
        /// The collective.
        op: &'static str,
        /// What is wrong with the tensor.
        reason: String,
    },
    /// Ranks hold different models (names, shapes, dtypes) or different trainable sets.
    #[error("rank {rank}: {detail}")]
    Mismatch {
        /// The rank that noticed.
        rank: usize,
        /// Which ranks differ from rank 0, and in what.
        detail: String,
    },
    /// A trainable parameter got no gradient, which DistributedDataParallel cannot average
    /// unless told to look for unused parameters.
    #[error(
        "rank {rank}: parameter `{name}` requires grad but has no gradient after backward; it was \
         not used to compute the loss. Freeze it, or set `find_unused_parameters` in DdpConfig \
         (one extra small all-reduce per step), as with torch's DistributedDataParallel"
    )]
    MissingGradient {
        /// The rank that noticed.
        rank: usize,
        /// The parameter's state_dict key.
        name: String,
    },
    /// A backend this build or this machine cannot provide.
    #[error("the {backend} backend is not available: {reason}")]
    BackendUnavailable {
        /// `gloo` or `nccl`.
        backend: &'static str,
        /// Why not, and what to do.
        reason: String,
    },
    /// The launcher could not start a rank.
    #[error("launcher: cannot start rank {rank} ({program}): {source}")]
    Spawn {
        /// The rank being started.
        rank: usize,
        /// The program.
        program: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A rank launched by [`crate::Launcher`] exited unsuccessfully (the first one to do so).
    #[error("rank {rank} failed first ({status}){}", tail(.output))]
    RankFailed {
        /// The rank.
        rank: usize,
        /// How it ended (`exit status: 1`, `signal: 9 (SIGKILL)`, ...).
        status: String,
        /// Its last lines of output, both streams.
        output: Vec<String>,
    },
}

fn who(rank: &Option<usize>) -> String {
    match rank {
        Some(r) => format!("rank {r}"),
        None => "launcher".to_string(),
    }
}

fn tail(output: &[String]) -> String {
    if output.is_empty() {
        return String::new();
    }
    let mut s = String::from("; its last output:");
    for line in output {
        s.push_str("\n  ");
        s.push_str(line);
    }
    s
}

/// `Result` with [`DistributedError`].
pub type Result<T, E = DistributedError> = std::result::Result<T, E>;
