//! Standard output that ends quietly when the reader goes away (`torchlight predict ... | head`),
//! as Unix tools do, instead of Rust's "failed printing to stdout" panic.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether file descriptor 1 was closed when the process started (`torchlight predict ...
/// >&-`). Rust's runtime puts `/dev/null` on a closed standard descriptor before `main`, so
/// writes would then succeed into nothing and the command would exit 0 having printed
/// nothing; this is read earlier, from the ELF `.init_array`, which runs before the runtime.
static STDOUT_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static RECORD_STDOUT_STATE: extern "C" fn() = record_stdout_state;

#[cfg(target_os = "linux")]
extern "C" fn record_stdout_state() {
    // SAFETY: `fcntl(F_GETFD)` on a descriptor number only reads its flags; -1 (EBADF) says
    // it is not open.
    let closed = unsafe { libc::fcntl(1, libc::F_GETFD) } == -1;
    STDOUT_CLOSED_AT_START.store(closed, Ordering::Relaxed);
}

/// Writes one line to stdout. A closed pipe ends the program at once, quietly and with
/// status 0 (the reader has what it wanted, as `| head`); every other failure is an error
/// naming standard output, so the command exits non-zero: a full disk (`> /dev/full`), or a
/// standard output that was closed from the start (`>&-`).
pub fn line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    if STDOUT_CLOSED_AT_START.load(Ordering::Relaxed) {
        return Err(std::io::Error::other(
            "cannot write the results: standard output is closed (`>&-`); redirect it to a file, or to /dev/null to discard them",
        ));
    }
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n")).and_then(|()| stdout.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            Err(std::io::Error::new(e.kind(), format!("cannot write the results to standard output: {e}")))
        }
        Ok(()) => Ok(()),
    }
}

/// Makes a `println!` whose pipe was closed end the program quietly too: the commands that
/// still print with `println!` (train, doctor) panic with "failed printing to stdout: Broken
/// pipe" there, and this hook turns exactly that panic into a quiet exit. Every other panic
/// is reported as before.
pub fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// `println!` through [`line()`]: `outln!("{x}")?`.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
