//! `torchlight-setup`: installs libtorch 2.11.0 (what `tch` 0.24.0 links against) into a
//! per-user cache, once per machine, and points a Cargo project at it.
//!
//! This is the library behind `torchlight setup`, the `torchlight-setup` command (which needs
//! no libtorch to build, so it can be installed first) and `cargo xtask setup`; all three fill
//! the same cache (`$TORCHLIGHT_CACHE`, else `$XDG_CACHE_HOME/torchlight`, else
//! `~/.cache/torchlight`).
//!
//! - [`ensure_libtorch`]: the user's `LIBTORCH` after a version check, else the cached install,
//!   installing it from PyPI's torch wheel when missing (lean on CPU machines, full with CUDA
//!   where an NVIDIA driver is loaded).
//! - [`write_cargo_config`]: `[env] LIBTORCH = "..."` in a project's `.cargo/config.toml`, so
//!   torch-sys finds libtorch with no environment set by hand.
//! - [`setup_project`]: both, as `torchlight setup` runs them.
//!
//! ```no_run
//! use torchlight_setup::{setup_project, SetupOptions};
//! let done = setup_project(&SetupOptions::new("torchlight-setup"), Some(std::path::Path::new(".")))?;
//! println!("{}", done.describe());
//! # Ok::<(), torchlight_setup::SetupError>(())
//! ```

mod cargo_config;
mod error;
mod install;
mod project;
mod version;

pub use cargo_config::{find_project, write_cargo_config, ConfigChange};
pub use error::{Result, SetupError};
pub use install::{
    cache_dir, cache_root, check_free_space, check_python, check_writable, ensure_libtorch, gpu_present,
    Libtorch, Origin, SetupOptions, Variant,
};
pub use project::{setup_project, ProjectSetup};
pub use version::{check_version, libtorch_version, TORCH_VERSION};

/// The README's example, compiled as a doc test so it cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
