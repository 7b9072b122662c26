//! `torchlight setup`: libtorch 2.11.0 in the per-user cache, and `LIBTORCH` in a project's
//! `.cargo/config.toml` (the same as the `torchlight-setup` command and `cargo xtask setup`).

use anyhow::{anyhow, Result};
use std::path::PathBuf;
use torchlight_setup::{find_project, setup_project, SetupOptions};

/// Options of `torchlight setup`.
#[derive(clap::Args)]
pub struct Args {
    /// Install the full CUDA libtorch even without an NVIDIA GPU.
    #[arg(long)]
    cuda: bool,
    /// The Cargo project to point at libtorch (default: the one around the current folder).
    #[arg(long, value_name = "DIR", conflicts_with = "no_project")]
    project: Option<PathBuf>,
    /// Only install libtorch and print where it is; write no Cargo config.
    #[arg(long)]
    no_project: bool,
}

pub fn run(args: Args) -> Result<()> {
    let mut options = SetupOptions::new("torchlight setup");
    options.cuda = args.cuda;
    options.libtorch = std::env::var_os("LIBTORCH").map(PathBuf::from);
    let project = match (args.no_project, args.project) {
        (true, _) => None,
        (false, Some(dir)) => Some(dir),
        (false, None) => Some(find_project(&std::env::current_dir()?).ok_or_else(|| {
            anyhow!("no Cargo.toml here or above; run it in your Cargo project, or pass --project DIR or --no-project")
        })?),
    };
    let done = setup_project(&options, project.as_deref())?;
    eprint!("{}", done.describe());
    Ok(())
}
