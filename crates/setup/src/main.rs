//! `torchlight-setup`: `torchlight setup` without libtorch, for installing libtorch first.

use std::path::PathBuf;
use torchlight_setup::{find_project, setup_project, SetupOptions};

const USAGE: &str = "\
usage: torchlight-setup [--cuda] [--project DIR | --no-project]

Installs libtorch 2.11.0 into the per-user cache (once per machine; a LIBTORCH in the environment
is checked and used instead) and writes `[env] LIBTORCH` into the Cargo project's
.cargo/config.toml, so that `cargo build`, `cargo test` and `cargo run` find it.

  --cuda          install the full CUDA libtorch even without an NVIDIA GPU
  --project DIR   the Cargo project to configure (default: the one around the current folder)
  --no-project    only install libtorch and print where it is
";

fn main() {
    let mut options = SetupOptions::new("torchlight-setup");
    options.libtorch = std::env::var_os("LIBTORCH").map(PathBuf::from);
    let mut project: Option<PathBuf> = None;
    let mut no_project = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cuda" => options.cuda = true,
            "--no-project" => no_project = true,
            "--project" => match args.next() {
                Some(dir) => project = Some(PathBuf::from(dir)),
                None => fail("--project needs a folder"),
            },
            "-h" | "--help" => {
                print!("{USAGE}");
                return;
            }
            other => fail(&format!("unknown argument `{other}`")),
        }
    }
    let project = if no_project {
        None
    } else {
        match project {
            Some(dir) => Some(dir),
            None => {
                let here = std::env::current_dir().unwrap_or_else(|e| fail(&format!("current folder: {e}")));
                Some(find_project(&here).unwrap_or_else(|| {
                    fail("no Cargo.toml here or above; run it in your Cargo project, or pass --project DIR or --no-project")
                }))
            }
        }
    };
    match setup_project(&options, project.as_deref()) {
        Ok(done) => eprint!("{}", done.describe()),
        Err(err) => fail(&err.to_string()),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("torchlight-setup: error: {message}");
    std::process::exit(1);
}
