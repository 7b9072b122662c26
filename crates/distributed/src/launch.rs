//! `Launcher`: runs N local ranks of a program the way `torchrun --standalone` does.
//!
//! The launcher hosts the TCPStore itself on a free port (no port to choose, no race for
//! one), starts the ranks with torchrun's environment (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `TORCHELASTIC_USE_AGENT_STORE=True`, so
//! every rank connects as a client, as under torchrun), prefixes their output with
//! `[rank N]`, and watches them: when one fails, the others get `failure_grace` to notice
//! and report it themselves, then are terminated (SIGTERM, then SIGKILL).

use crate::error::{DistributedError, Result};
use crate::store::TcpStore;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of each rank's output kept for [`RankExit::output`].
const KEPT_LINES: usize = 40;
/// How long a terminated rank gets between SIGTERM and SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);

/// Starts `nproc` ranks of a program on this machine and waits for them.
///
/// ```no_run
/// use torchlight_distributed::Launcher;
/// # fn main() -> Result<(), torchlight_distributed::DistributedError> {
/// let outcome = Launcher::new("target/release/my-trainer", 2).arg("--epochs").arg("3").run()?;
/// outcome.into_result()?; // Err naming the first rank that failed, with its last lines
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Launcher {
    program: PathBuf,
    args: Vec<OsString>,
    nproc: usize,
    envs: Vec<(OsString, OsString)>,
    echo: bool,
    failure_grace: Duration,
    deadline: Option<Duration>,
    threads_per_rank: Option<usize>,
    store_timeout: Duration,
}

impl Launcher {
    /// `nproc` ranks of `program`.
    pub fn new(program: impl Into<PathBuf>, nproc: usize) -> Self {
        Launcher {
            program: program.into(),
            args: Vec::new(),
            nproc,
            envs: Vec::new(),
            echo: true,
            failure_grace: Duration::from_secs(5),
            deadline: None,
            threads_per_rank: None,
            store_timeout: crate::group::DEFAULT_TIMEOUT,
        }
    }

    /// Appends an argument given to every rank.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Appends arguments given to every rank.
    pub fn args(mut self, args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Self {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets an environment variable for every rank.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs.push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// Whether the ranks' output is copied to this process's stdout/stderr with a `[rank N]`
    /// prefix (default true); it is kept for [`RankExit::output`] either way.
    pub fn echo(mut self, echo: bool) -> Self {
        self.echo = echo;
        self
    }

    /// How long the other ranks may run on after one failed, to report the failure
    /// themselves, before they are terminated; default 5 s (torchrun: none).
    pub fn failure_grace(mut self, grace: Duration) -> Self {
        self.failure_grace = grace;
        self
    }

    /// A limit on the whole run, after which every rank is terminated; default none.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// `OMP_NUM_THREADS` for each rank when the environment does not set it; by default 1 for
    /// more than one rank (torchrun's choice: N ranks with all cores each would oversubscribe
    /// the machine).
    pub fn threads_per_rank(mut self, threads: usize) -> Self {
        self.threads_per_rank = Some(threads);
        self
    }

    /// How long the hosted store waits for ranks to connect and keys to appear; default 30 min.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Starts the ranks and waits for all of them. `Err` only when the launch itself fails;
    /// a rank that fails is reported in the outcome ([`LaunchOutcome::into_result`]).
    pub fn run(&self) -> Result<LaunchOutcome> {
        if self.nproc == 0 {
            return Err(DistributedError::Config { field: "nproc", reason: "must be at least 1".into() });
        }
        let store = TcpStore::host(0, self.nproc, self.store_timeout)?;
        let port = store.port().to_string();
        let threads = self.threads_per_rank.or((self.nproc > 1).then_some(1));
        let mut ranks: Vec<Running> = Vec::with_capacity(self.nproc);
        for rank in 0..self.nproc {
            let mut cmd = Command::new(&self.program);
            cmd.args(&self.args)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("GROUP_RANK", "0")
                .env("WORLD_SIZE", self.nproc.to_string())
                .env("LOCAL_WORLD_SIZE", self.nproc.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("TORCHELASTIC_USE_AGENT_STORE", "True")
                .env("TORCHELASTIC_RESTART_COUNT", "0")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(n) = threads {
                if std::env::var_os("OMP_NUM_THREADS").is_none() {
                    cmd.env("OMP_NUM_THREADS", n.to_string());
                }
            }
            for (k, v) in &self.envs {
                cmd.env(k, v);
            }
            let child = match cmd.spawn() {
                Ok(c) => c,
                Err(source) => {
                    for r in &mut ranks {
                        r.signal(libc::SIGKILL);
                        let _ = r.child.wait();
                    }
                    return Err(DistributedError::Spawn {
                        rank,
                        program: self.program.display().to_string(),
                        source,
                    });
                }
            };
            ranks.push(Running::start(rank, child, self.echo));
        }
        let outcome = self.watch(&mut ranks);
        drop(store);
        Ok(outcome)
    }

    fn watch(&self, ranks: &mut [Running]) -> LaunchOutcome {
        let started = Instant::now();
        let mut first_failure: Option<(usize, Instant)> = None;
        let mut terminate_at: Option<Instant> = None;
        let mut deadline_passed = false;
        loop {
            for r in ranks.iter_mut() {
                if r.status.is_some() {
                    continue;
                }
                if let Ok(Some(status)) = r.child.try_wait() {
                    r.status = Some(status);
                    if !status.success() && first_failure.is_none() {
                        first_failure = Some((r.rank, Instant::now()));
                        terminate_at = Some(Instant::now() + self.failure_grace);
                    }
                }
            }
            if ranks.iter().all(|r| r.status.is_some()) {
                break;
            }
            let now = Instant::now();
            if !deadline_passed && self.deadline.is_some_and(|d| now >= started + d) {
                deadline_passed = true;
                terminate_at = Some(now);
            }
            if terminate_at.is_some_and(|t| now >= t) {
                for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
                    match r.terminated_at {
                        None => {
                            r.signal(libc::SIGTERM);
                            r.terminated_at = Some(now);
                        }
                        Some(t) if now >= t + KILL_AFTER => r.signal(libc::SIGKILL),
                        Some(_) => {}
                    }
                }
            }
            std::thread::sleep(POLL);
        }
        let exits = ranks
            .iter_mut()
            .map(|r| {
                let output = r.finish();
                RankExit {
                    rank: r.rank,
                    status: r.status.expect("every rank has exited"),
                    terminated: r.terminated_at.is_some(),
                    output,
                }
            })
            .collect();
        LaunchOutcome { ranks: exits, first_failure: first_failure.map(|(r, _)| r), deadline_passed }
    }
}

/// A rank being watched, with the threads copying its output.
struct Running {
    rank: usize,
    child: Child,
    status: Option<ExitStatus>,
    terminated_at: Option<Instant>,
    lines: Arc<Mutex<VecDeque<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(rank: usize, mut child: Child, echo: bool) -> Self {
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(copy_lines(rank, out, false, echo, lines.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(copy_lines(rank, err, true, echo, lines.clone()));
        }
        Running { rank, child, status: None, terminated_at: None, lines, readers }
    }

    fn signal(&self, signal: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped while `status` is None.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// Joins the output threads and returns the kept lines.
    fn finish(&mut self) -> Vec<String> {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        self.lines.lock().map(|l| l.iter().cloned().collect()).unwrap_or_default()
    }
}

fn copy_lines(
    rank: usize,
    stream: impl Read + Send + 'static,
    is_err: bool,
    echo: bool,
    lines: Arc<Mutex<VecDeque<String>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf).trim_end_matches(['\n', '\r']).to_string();
            if echo {
                let text = format!("[rank {rank}] {line}\n");
                if is_err {
                    let _ = std::io::stderr().lock().write_all(text.as_bytes());
                } else {
                    let _ = std::io::stdout().lock().write_all(text.as_bytes());
                }
            }
            if let Ok(mut kept) = lines.lock() {
                if kept.len() == KEPT_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        }
    })
}

/// How one rank ended.
#[derive(Debug, Clone)]
pub struct RankExit {
    /// The rank.
    pub rank: usize,
    /// Its exit status.
    pub status: ExitStatus,
    /// Whether the launcher terminated it (after another rank failed, or at the deadline).
    pub terminated: bool,
    /// Its last lines of output (stdout and stderr, in arrival order).
    pub output: Vec<String>,
}

/// How a launch ended.
#[derive(Debug, Clone)]
pub struct LaunchOutcome {
    /// Every rank, in rank order.
    pub ranks: Vec<RankExit>,
    /// The rank that failed first, if any.
    pub first_failure: Option<usize>,
    /// Whether the launcher's deadline ended the run.
    pub deadline_passed: bool,
}

impl LaunchOutcome {
    /// Whether every rank exited successfully.
    pub fn success(&self) -> bool {
        self.ranks.iter().all(|r| r.status.success())
    }

    /// `Ok` when every rank succeeded, else [`DistributedError::RankFailed`] for the rank
    /// that failed first, with its last lines of output.
    pub fn into_result(self) -> Result<Self> {
        let failed =
            self.first_failure.or_else(|| self.ranks.iter().find(|r| !r.status.success()).map(|r| r.rank));
        match failed {
            None => Ok(self),
            Some(rank) => {
                let exit = &self.ranks[rank];
                let mut status = describe_status(exit.status);
                if self.deadline_passed {
                    status.push_str(", after the launcher's deadline passed");
                }
                Err(DistributedError::RankFailed { rank, status, output: exit.output.clone() })
            }
        }
    }
}

/// `exit status 3`, `killed by signal 9 (SIGKILL)`.
fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        _ => format!("{status}"),
    }
}
