//! `ProcessGroup`: a c10d process group (Gloo on CPU, NCCL on GPU) and its collectives.

use crate::env::DistEnv;
use crate::error::{DistributedError, Result};
use crate::ffi;
use crate::store::TcpStore;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tch::{Kind, Tensor};

/// The collective backend, as in `init_process_group(backend=...)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Gloo: CPU tensors (and CUDA tensors through host copies), TCP between machines.
    Gloo,
    /// NCCL: CUDA tensors, one GPU per rank. Needs the `nccl` feature and the CUDA libtorch.
    Nccl,
}

impl Backend {
    /// `gloo` or `nccl`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = DistributedError;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "gloo" => Ok(Backend::Gloo),
            "nccl" => Ok(Backend::Nccl),
            _ => Err(DistributedError::Config {
                field: "backend",
                reason: format!("`{s}` is not `gloo` or `nccl`"),
            }),
        }
    }
}

/// How an all-reduce combines the ranks' tensors (`torch.distributed.ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
    /// Elementwise mean; floating-point tensors only. Gloo has no AVG, so on Gloo this is a sum
    /// divided by the world size afterwards.
    Avg,
    /// Elementwise product.
    Product,
    /// Elementwise minimum.
    Min,
    /// Elementwise maximum.
    Max,
}

impl ReduceOp {
    /// c10d's `RedOpType` code.
    fn code(self) -> i32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Product => 2,
            ReduceOp::Min => 3,
            ReduceOp::Max => 4,
        }
    }
}

/// PyTorch's default process-group timeout (`default_pg_timeout`), 30 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Settings of [`ProcessGroup::init`] (`init_process_group`'s keyword arguments).
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// The backend; default [`Backend::Gloo`].
    pub backend: Backend,
    /// How long any collective, and the rendezvous at start, may wait for the other ranks
    /// before failing with an error naming this rank and the operation; default 30 minutes
    /// ([`DEFAULT_TIMEOUT`]), as PyTorch's.
    pub timeout: Duration,
    /// Gloo: the network interfaces to use, comma-separated (`eth0,eth1`); default
    /// `GLOO_SOCKET_IFNAME`, else the interface of this machine's hostname (loopback if that
    /// does not resolve), as PyTorch.
    pub gloo_interfaces: Option<String>,
    /// Gloo: worker threads of the group; default 2 per interface, as PyTorch.
    pub gloo_threads: usize,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            backend: Backend::Gloo,
            timeout: DEFAULT_TIMEOUT,
            gloo_interfaces: None,
            gloo_threads: 0,
        }
    }
}

impl InitOptions {
    /// Gloo with PyTorch's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the backend.
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Sets the timeout of the rendezvous and of every collective.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets Gloo's network interfaces (`GLOO_SOCKET_IFNAME`'s format).
    pub fn with_gloo_interfaces(mut self, interfaces: impl Into<String>) -> Self {
        self.gloo_interfaces = Some(interfaces.into());
        self
    }

    fn validate(&self) -> Result<()> {
        if self.timeout < Duration::from_millis(1) {
            return Err(DistributedError::Config {
                field: "timeout",
                reason: "must be at least 1 ms".into(),
            });
        }
        Ok(())
    }
}

/// Distinguishes the groups of one process in a shared store. Every rank creates its groups
/// in the same order, so the numbers agree across ranks.
static GROUP_COUNTER: AtomicUsize = AtomicUsize::new(0);

struct Inner {
    raw: NonNull<ffi::RawGroup>,
    rank: usize,
    world_size: usize,
    backend: Backend,
    /// The collective timeout in milliseconds ([`ProcessGroup::set_timeout`] changes it).
    timeout_ms: AtomicU64,
}

// SAFETY: c10d backends are called from several threads by design (their work queues take
// locks); the handle is freed once, on the last drop.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from the shim and is freed once. c10d's destructor waits for the
        // group's queued work, which its timeout bounds.
        unsafe { ffi::tl_dist_group_free(self.raw.as_ptr()) }
    }
}

/// A c10d process group: `rank` of `world_size` processes that run collectives together.
///
/// Clones share the group. Collectives must be called in the same order on every rank (as
/// in PyTorch); each blocks until done and fails, naming this rank and the operation, when a
/// peer fails or the timeout passes. The tensor arguments are changed in place.
///
/// ```no_run
/// use torchlight_distributed::{InitOptions, ProcessGroup, ReduceOp};
/// # fn main() -> Result<(), torchlight_distributed::DistributedError> {
/// // Under torchrun or `torchlight_distributed::Launcher`: RANK, WORLD_SIZE, MASTER_ADDR, ...
/// let pg = ProcessGroup::init_from_env(&InitOptions::default())?;
/// let loss_sum = tch::Tensor::from_slice(&[1.5f32]);
/// pg.all_reduce(&loss_sum, ReduceOp::Sum)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("backend", &self.inner.backend)
            .field("rank", &self.inner.rank)
            .field("world_size", &self.inner.world_size)
            .finish()
    }
}

impl ProcessGroup {
    /// `init_process_group(backend, init_method="env://")`: reads [`DistEnv::from_env`] and
    /// joins the job it describes.
    pub fn init_from_env(options: &InitOptions) -> Result<Self> {
        Self::init(&DistEnv::from_env()?, options)
    }

    /// Joins the job `env` describes: connects to its TCPStore (hosted by rank 0, or by the
    /// launcher's agent when `env.agent_store`), then builds the group over it.
    pub fn init(env: &DistEnv, options: &InitOptions) -> Result<Self> {
        options.validate()?;
        let store = if env.agent_store || env.rank != 0 {
            TcpStore::connect(
                &env.master_addr,
                env.master_port,
                env.world_size,
                options.timeout,
                Some(env.rank),
            )?
        } else {
            TcpStore::host_as_rank0(&env.master_addr, env.master_port, env.world_size, options.timeout)?
        };
        Self::with_store(&store, env.rank, env.world_size, options)
    }

    /// Builds the group over an open store (`init_process_group(store=...)`).
    pub fn with_store(
        store: &TcpStore,
        rank: usize,
        world_size: usize,
        options: &InitOptions,
    ) -> Result<Self> {
        options.validate()?;
        if world_size == 0 || rank >= world_size {
            return Err(DistributedError::Config {
                field: "rank",
                reason: format!("rank {rank} is not below the world size {world_size}"),
            });
        }
        let size = i32::try_from(world_size).map_err(|_| DistributedError::Config {
            field: "world_size",
            reason: format!("{world_size} is too large"),
        })?;
        let prefix = CString::new(format!("torchlight/{}/", GROUP_COUNTER.fetch_add(1, Ordering::SeqCst)))
            .expect("no NUL in the prefix");
        let op = || {
            format!(
                "join the {} process group ({world_size} ranks, store {}:{})",
                options.backend.name(),
                store.host_name(),
                store.port()
            )
        };
        let mut out = std::ptr::null_mut();
        let rc = match options.backend {
            Backend::Gloo => {
                let interfaces = options
                    .gloo_interfaces
                    .clone()
                    .or_else(|| std::env::var("GLOO_SOCKET_IFNAME").ok())
                    .map(|s| {
                        CString::new(s).map_err(|_| DistributedError::Config {
                            field: "gloo_interfaces",
                            reason: "holds a NUL byte".into(),
                        })
                    })
                    .transpose()?;
                let threads = i32::try_from(options.gloo_threads).unwrap_or(i32::MAX);
                // SAFETY: every pointer is valid for the call; the shim writes `out` on success.
                unsafe {
                    ffi::tl_dist_gloo_new(
                        store.raw(),
                        prefix.as_ptr(),
                        rank as i32,
                        size,
                        ffi::millis(options.timeout),
                        interfaces.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                        threads,
                        &mut out,
                    )
                }
            }
            Backend::Nccl => nccl_new(store, &prefix, rank, size, options, &mut out)?,
        };
        ffi::check(Some(rank), op, rc)?;
        let raw = NonNull::new(out).expect("the shim returns a group on success");
        Ok(ProcessGroup {
            inner: Arc::new(Inner {
                raw,
                rank,
                world_size,
                backend: options.backend,
                timeout_ms: AtomicU64::new(options.timeout.as_millis().try_into().unwrap_or(u64::MAX)),
            }),
        })
    }

    /// This process's rank (`dist.get_rank()`).
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The number of ranks (`dist.get_world_size()`).
    pub fn world_size(&self) -> usize {
        self.inner.world_size
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The timeout of every collective.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.inner.timeout_ms.load(Ordering::Relaxed))
    }

    /// Changes the timeout of later collectives (c10d's `Backend::setTimeout`), e.g. a long one
    /// for a slow first step and a short one after. Every rank should set the same.
    pub fn set_timeout(&self, timeout: Duration) -> Result<()> {
        if timeout < Duration::from_millis(1) {
            return Err(DistributedError::Config {
                field: "timeout",
                reason: "must be at least 1 ms".into(),
            });
        }
        // SAFETY: the group is live.
        let rc = unsafe { ffi::tl_dist_group_set_timeout(self.inner.raw.as_ptr(), ffi::millis(timeout)) };
        ffi::check(Some(self.rank()), || "set the timeout".to_string(), rc)?;
        self.inner.timeout_ms.store(timeout.as_millis().try_into().unwrap_or(u64::MAX), Ordering::Relaxed);
        Ok(())
    }

    /// The shim's group, live as long as `self`.
    pub(crate) fn raw(&self) -> *mut ffi::RawGroup {
        self.inner.raw.as_ptr()
    }

    /// Whether this is rank 0.
    pub fn is_main(&self) -> bool {
        self.inner.rank == 0
    }

    /// `dist.all_reduce(tensor, op)`: every rank ends with the reduction of all ranks' tensors.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(tensor, op)?.wait()
    }

    /// [`ProcessGroup::all_reduce`] started in the background; [`Work::wait`] finishes it.
    pub fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        const OP: &str = "all_reduce";
        self.check_tensor(OP, tensor)?;
        let floating = tensor.is_floating_point() || tensor.is_complex();
        if op == ReduceOp::Avg && !floating {
            return Err(self.tensor_error(
                OP,
                format!("ReduceOp::Avg needs a floating-point tensor, got {:?}", tensor.kind()),
            ));
        }
        // Gloo has no AVG: sum, then divide once the sum is in.
        let (code, then_divide) = match (op, self.inner.backend) {
            (ReduceOp::Avg, Backend::Gloo) => (ReduceOp::Sum.code(), Some(tensor.shallow_clone())),
            _ => (op.code(), None),
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: the group and tensor are live; the shim writes `out` on success.
        let rc =
            unsafe { ffi::tl_dist_all_reduce(self.inner.raw.as_ptr(), ffi::raw(tensor), code, &mut out) };
        self.started(OP, rc, out, then_divide)
    }

    /// `dist.broadcast(tensor, src=root)`: every rank ends with rank `root`'s tensor.
    pub fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<()> {
        self.broadcast_async(tensor, root)?.wait()
    }

    /// [`ProcessGroup::broadcast`] started in the background.
    pub fn broadcast_async(&self, tensor: &Tensor, root: usize) -> Result<Work> {
        const OP: &str = "broadcast";
        self.check_tensor(OP, tensor)?;
        if root >= self.world_size() {
            return Err(self.tensor_error(
                OP,
                format!("root rank {root} is not below the world size {}", self.world_size()),
            ));
        }
        let mut out = std::ptr::null_mut();
        // SAFETY: the group and tensor are live; the shim writes `out` on success.
        let rc = unsafe {
            ffi::tl_dist_broadcast(self.inner.raw.as_ptr(), ffi::raw(tensor), root as i32, &mut out)
        };
        self.started(OP, rc, out, None)
    }

    /// `dist.all_gather(outputs, tensor)`: every rank's `tensor`, in rank order. Each rank
    /// must pass a tensor of the same shape and dtype.
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        const OP: &str = "all_gather";
        self.check_tensor(OP, tensor)?;
        let outputs: Vec<Tensor> = (0..self.world_size()).map(|_| tensor.empty_like()).collect();
        let raw: Vec<ffi::RawTensor> = outputs.iter().map(ffi::raw).collect();
        let mut out = std::ptr::null_mut();
        // SAFETY: the group and tensors are live for the call; c10d keeps its own references.
        let rc = unsafe {
            ffi::tl_dist_all_gather(
                self.inner.raw.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                ffi::raw(tensor),
                &mut out,
            )
        };
        self.started(OP, rc, out, None)?.wait()?;
        Ok(outputs)
    }

    /// `dist.barrier()`: returns once every rank has reached it.
    pub fn barrier(&self) -> Result<()> {
        let mut out = std::ptr::null_mut();
        // SAFETY: the group is live; the shim writes `out` on success.
        let rc = unsafe { ffi::tl_dist_barrier(self.inner.raw.as_ptr(), &mut out) };
        self.started("barrier", rc, out, None)?.wait()
    }

    fn started(
        &self,
        op: &'static str,
        rc: i32,
        out: *mut ffi::RawWork,
        then_divide: Option<Tensor>,
    ) -> Result<Work> {
        ffi::check(Some(self.rank()), || op.to_string(), rc)?;
        let raw = NonNull::new(out).expect("the shim returns a work on success");
        Ok(Work {
            raw,
            op,
            rank: self.rank(),
            timeout: self.timeout(),
            then_divide,
            world_size: self.world_size(),
        })
    }

    fn check_tensor(&self, op: &'static str, tensor: &Tensor) -> Result<()> {
        if !tensor.defined() {
            return Err(self.tensor_error(op, "the tensor is undefined".into()));
        }
        if !tensor.is_contiguous() {
            return Err(self.tensor_error(
                op,
                format!(
                    "the {:?} tensor is not contiguous; pass `t.contiguous()` and copy the result back",
                    tensor.size()
                ),
            ));
        }
        if tensor.is_sparse() {
            return Err(self.tensor_error(op, "sparse tensors are not supported".into()));
        }
        if self.inner.backend == Backend::Nccl && !tensor.device().is_cuda() {
            return Err(
                self.tensor_error(op, format!("NCCL needs CUDA tensors, got one on {:?}", tensor.device()))
            );
        }
        Ok(())
    }

    fn tensor_error(&self, op: &'static str, reason: String) -> DistributedError {
        DistributedError::Tensor { rank: self.rank(), op, reason }
    }

    /// An all-reduce of `tensors` through one flat buffer per dtype (`allreduce_coalesced`):
    /// one collective per dtype instead of one per tensor. For reducing several metric
    /// tensors (loss sums, hit counts, a confusion matrix) at once.
    pub fn all_reduce_many(&self, tensors: &[&Tensor], op: ReduceOp) -> Result<()> {
        let owned: Vec<Tensor> = tensors.iter().map(|t| t.shallow_clone()).collect();
        let mut groups: Vec<(Kind, tch::Device, Vec<usize>)> = Vec::new();
        for (i, t) in owned.iter().enumerate() {
            match groups.iter_mut().find(|(k, d, _)| *k == t.kind() && *d == t.device()) {
                Some(g) => g.2.push(i),
                None => groups.push((t.kind(), t.device(), vec![i])),
            }
        }
        let mut pending = Vec::new();
        for (_, _, members) in &groups {
            let flat = crate::bucket::flatten(members.iter().map(|&i| &owned[i]));
            pending.push((self.all_reduce_async(&flat, op)?, flat, members));
        }
        for (work, flat, members) in pending {
            work.wait()?;
            crate::bucket::unflatten_into(&flat, members.iter().map(|&i| &owned[i]));
        }
        Ok(())
    }
}

#[cfg(feature = "nccl")]
fn nccl_new(
    store: &TcpStore,
    prefix: &CString,
    rank: usize,
    size: i32,
    options: &InitOptions,
    out: &mut *mut ffi::RawGroup,
) -> Result<i32> {
    // SAFETY: every pointer is valid for the call; the shim writes `out` on success.
    Ok(unsafe {
        ffi::tl_dist_nccl_new(
            store.raw(),
            prefix.as_ptr(),
            rank as i32,
            size,
            ffi::millis(options.timeout),
            out,
        )
    })
}

#[cfg(not(feature = "nccl"))]
fn nccl_new(
    _store: &TcpStore,
    _prefix: &CString,
    _rank: usize,
    _size: i32,
    _options: &InitOptions,
    _out: &mut *mut ffi::RawGroup,
) -> Result<i32> {
    Err(DistributedError::BackendUnavailable {
        backend: "nccl",
        reason: "this build of torchlight-distributed has no NCCL support: enable its `nccl` feature \
                 (needs the CUDA libtorch, `cargo xtask setup --cuda`, and NCCL's headers)"
            .into(),
    })
}

/// A collective in flight (`c10d::Work`); [`Work::wait`] finishes it. Dropping it without
/// waiting lets the collective complete in the background, unchecked (and, for
/// [`ReduceOp::Avg`] on Gloo, without the final division).
#[must_use = "a collective is only known to have succeeded once `wait()` returns Ok"]
pub struct Work {
    raw: NonNull<ffi::RawWork>,
    op: &'static str,
    rank: usize,
    timeout: Duration,
    then_divide: Option<Tensor>,
    world_size: usize,
}

impl Work {
    /// Blocks until the collective is done: `Err` naming this rank and the operation when a
    /// peer failed or the group's timeout passed.
    pub fn wait(mut self) -> Result<()> {
        // c10d's own timeout (the group's) fires first with the more telling message; this
        // bound only guards against a backend that never reports.
        let bound = self.timeout + Duration::from_secs(5);
        // SAFETY: `raw` is a live work.
        let rc = unsafe { ffi::tl_dist_work_wait(self.raw.as_ptr(), ffi::millis(bound)) };
        ffi::check(Some(self.rank), || self.op.to_string(), rc)?;
        if let Some(mut t) = self.then_divide.take() {
            let _ = t.f_div_scalar_(self.world_size as f64).map_err(|e| DistributedError::Tensor {
                rank: self.rank,
                op: self.op,
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        // SAFETY: `raw` came from the shim and is freed once; c10d keeps its own reference while
        // the collective runs.
        unsafe { ffi::tl_dist_work_free(self.raw.as_ptr()) }
    }
}
