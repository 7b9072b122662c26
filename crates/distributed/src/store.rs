//! `TcpStore`: c10d's key-value rendezvous store, hosted by rank 0 or a launcher, through
//! which process groups find their peers.

use crate::error::{DistributedError, Result};
use crate::ffi;
use std::ffi::CString;
use std::ptr::NonNull;
use std::time::Duration;

/// A `c10d::TCPStore` (`torch.distributed.TCPStore`): the server side or a client of one.
///
/// Process groups exchange their peers' addresses through it at start-up; afterwards it is
/// idle. Dropping the server side closes it, so the host must outlive its clients' set-up.
pub struct TcpStore {
    raw: NonNull<ffi::RawStore>,
    host: String,
    port: u16,
}

// SAFETY: c10d::TCPStore is used from several threads by c10d itself (its calls take a lock);
// the handle is only freed on drop.
unsafe impl Send for TcpStore {}
// SAFETY: as above; all calls through `&self` are thread-safe in c10d.
unsafe impl Sync for TcpStore {}

impl TcpStore {
    /// Hosts a store on `port` (0 picks a free one; see [`TcpStore::port`]) of every
    /// interface, as a launcher does: it waits for nobody. `world_size` is the number of clients
    /// that will connect; `timeout` bounds every wait on it.
    pub fn host(port: u16, world_size: usize, timeout: Duration) -> Result<Self> {
        Self::open("127.0.0.1", port, world_size, true, false, false, timeout, None)
    }

    /// Hosts a store as rank 0 of `world_size` ranks does in torch.distributed: waits until
    /// every other rank has connected (or `timeout` passes). Several groups of one process may
    /// share `port` (c10d's multi-tenant store).
    pub(crate) fn host_as_rank0(host: &str, port: u16, world_size: usize, timeout: Duration) -> Result<Self> {
        Self::open(host, port, world_size, true, true, true, timeout, Some(0))
    }

    /// Connects to the store at `host:port`, retrying until `timeout` passes.
    pub fn connect(
        host: &str,
        port: u16,
        world_size: usize,
        timeout: Duration,
        rank: Option<usize>,
    ) -> Result<Self> {
        Self::open(host, port, world_size, false, true, false, timeout, rank)
    }

    #[allow(clippy::too_many_arguments)]
    fn open(
        host: &str,
        port: u16,
        world_size: usize,
        is_server: bool,
        wait_workers: bool,
        multi_tenant: bool,
        timeout: Duration,
        rank: Option<usize>,
    ) -> Result<Self> {
        let op = || {
            if is_server {
                format!("host the TCPStore on port {port}")
            } else {
                format!("connect to the TCPStore at {host}:{port}")
            }
        };
        let c_host = CString::new(host).map_err(|_| DistributedError::Config {
            field: "master_addr",
            reason: format!("`{host}` holds a NUL byte"),
        })?;
        let world = i32::try_from(world_size).map_err(|_| DistributedError::Config {
            field: "world_size",
            reason: format!("{world_size} is too large"),
        })?;
        let mut out = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; the shim writes `out` on success only.
        let rc = unsafe {
            ffi::tl_dist_store_open(
                c_host.as_ptr(),
                i32::from(port),
                world,
                is_server,
                wait_workers,
                multi_tenant,
                ffi::millis(timeout),
                &mut out,
            )
        };
        ffi::check(rank, op, rc)?;
        let raw = NonNull::new(out).expect("the shim returns a store on success");
        let mut bound = 0;
        // SAFETY: `raw` is a live store.
        let rc = unsafe { ffi::tl_dist_store_port(raw.as_ptr(), &mut bound) };
        let mut store = TcpStore { raw, host: host.to_string(), port };
        ffi::check(rank, op, rc)?;
        store.port = u16::try_from(bound).unwrap_or(port);
        Ok(store)
    }

    /// The port it listens on (the server) or connects to (a client).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host clients connect to.
    pub fn host_name(&self) -> &str {
        &self.host
    }

    pub(crate) fn raw(&self) -> *mut ffi::RawStore {
        self.raw.as_ptr()
    }
}

impl Drop for TcpStore {
    fn drop(&mut self) {
        // SAFETY: `raw` came from tl_dist_store_open and is freed once. Process groups built on
        // the store hold their own reference to the C++ object.
        unsafe { ffi::tl_dist_store_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStore").field("host", &self.host).field("port", &self.port).finish()
    }
}
