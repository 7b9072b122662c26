//! Standard output that ends quietly when the reader goes away (`torchlight predict ... | head`),
//! as Unix tools do, instead of Rust's "failed printing to stdout" panic.

use std::io::Write;

/// Writes one line to stdout. A closed pipe ends the program at once, quietly and with
/// status 0 (the reader has what it wanted); other write errors are returned.
pub fn line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n")).and_then(|()| stdout.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
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
