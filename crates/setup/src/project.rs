//! `torchlight setup` for a Cargo project: libtorch in the cache, `LIBTORCH` in the project's
//! Cargo config, and what the project still needs (the build-script line).

use crate::cargo_config::{write_cargo_config, ConfigChange};
use crate::error::Result;
use crate::install::{ensure_libtorch, Libtorch, Origin, SetupOptions};
use std::fs;
use std::path::{Path, PathBuf};

/// What [`setup_project`] did.
#[derive(Clone, Debug)]
pub struct ProjectSetup {
    /// The libtorch in use.
    pub libtorch: Libtorch,
    /// The Cargo config written, when a project was given.
    pub config: Option<ConfigChange>,
    /// The project, when one was given.
    pub project: Option<PathBuf>,
    /// Whether the project's `Cargo.toml` already names `torchlight-build` (binaries and tests
    /// need its build-script call to find libtorch at run time).
    pub has_build_helper: bool,
}

/// Makes libtorch available ([`ensure_libtorch`]) and, given a `project`, writes its
/// `LIBTORCH` into the project's `.cargo/config.toml` ([`write_cargo_config`]).
pub fn setup_project(options: &SetupOptions, project: Option<&Path>) -> Result<ProjectSetup> {
    let libtorch = ensure_libtorch(options)?;
    let config = project.map(|dir| write_cargo_config(dir, &libtorch.path)).transpose()?;
    let has_build_helper = project.is_some_and(|dir| {
        fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|text| text.contains("torchlight-build"))
    });
    Ok(ProjectSetup { libtorch, config, project: project.map(Path::to_path_buf), has_build_helper })
}

impl ProjectSetup {
    /// What was done and what is left, as lines for a terminal.
    pub fn describe(&self) -> String {
        let l = &self.libtorch;
        let whence = match &l.origin {
            Origin::User => "your LIBTORCH".to_string(),
            Origin::Cached(v) => format!("the {} install in the per-user cache", v.name()),
            Origin::Installed(v) => format!("the {} install, just put in the per-user cache", v.name()),
        };
        let mut out = format!(
            "setup: libtorch {} ({whence}{}) at {}\n",
            l.version,
            if l.cuda { ", with CUDA" } else { ", CPU only" },
            l.path.display()
        );
        match &self.config {
            Some(ConfigChange::Created(p)) => out += &format!("setup: wrote LIBTORCH into {}\n", p.display()),
            Some(ConfigChange::Updated(p)) => out += &format!("setup: set LIBTORCH in {}\n", p.display()),
            Some(ConfigChange::Unchanged(p)) => out += &format!("setup: {} already names it\n", p.display()),
            None => out += &format!("setup: set LIBTORCH={} to build against it\n", l.path.display()),
        }
        if self.project.is_some() && !self.has_build_helper {
            out += "setup: so that your binaries and tests find libtorch when they run, add to Cargo.toml\n\
                    setup:     [build-dependencies]\n\
                    setup:     torchlight-build = \"0.1\"\n\
                    setup: and a build.rs beside it:\n\
                    setup:     fn main() { torchlight_build::link_libtorch(); }\n";
        }
        out
    }
}
