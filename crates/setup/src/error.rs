//! The setup crate's error type: each variant says what to do next.

use std::path::PathBuf;

/// What can stop a libtorch set-up. Messages name the file or folder at fault and the next step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// Neither `TORCHLIGHT_CACHE`, `XDG_CACHE_HOME` nor `HOME` is set.
    #[error("cannot place the per-user cache: neither TORCHLIGHT_CACHE, XDG_CACHE_HOME nor HOME is set; set TORCHLIGHT_CACHE to a folder")]
    NoCacheDir,
    /// The cache (or a folder above it) is a file.
    #[error("{} is a file, not a folder, so the per-user cache cannot go there (from {variable}); set TORCHLIGHT_CACHE to a folder", path.display())]
    NotAFolder {
        /// The file in the way.
        path: PathBuf,
        /// The variable the cache's place came from (`TORCHLIGHT_CACHE`, `XDG_CACHE_HOME`,
        /// `HOME`).
        variable: &'static str,
    },
    /// The cache folder cannot be written (read-only, another user's).
    #[error("cannot write into the cache folder {}: {error}; make it writable, or set TORCHLIGHT_CACHE to a folder you can write", dir.display())]
    NotWritable {
        /// The folder.
        dir: PathBuf,
        /// The OS error of a test file made there (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// `python3 -m pip` does not run, so nothing can be fetched from PyPI.
    #[error("python3 with pip is needed to fetch libtorch {} from PyPI, and `python3 -m pip` does not run here. Install them (Debian/Ubuntu: `apt-get install python3 python3-pip`), or point LIBTORCH at an existing libtorch {}, then run `{command}` again", crate::TORCH_VERSION, crate::TORCH_VERSION)]
    NoPython {
        /// The set-up command to run again.
        command: &'static str,
    },
    /// The cache's file system has too little room.
    #[error("not enough disk space in {}: libtorch needs about {needed_mib} MiB, {free_mib} MiB is free. Free some space, or set TORCHLIGHT_CACHE to a folder on a larger disk", dir.display())]
    DiskSpace {
        /// The folder the install goes into.
        dir: PathBuf,
        /// MiB needed.
        needed_mib: u64,
        /// MiB free.
        free_mib: u64,
    },
    /// pip failed (its output, printed above, says why).
    #[error("pip could not install {packages} ({status}); see its output above. Check that PyPI is reachable and that the disk has room, then run `{command}` again")]
    Pip {
        /// The packages asked for.
        packages: String,
        /// pip's exit status.
        status: String,
        /// The set-up command to run again.
        command: &'static str,
    },
    /// A folder that is not a libtorch (no `lib/`).
    #[error("{} is not a libtorch folder (no lib/ inside). LIBTORCH must name the folder that holds lib/ and include/", path.display())]
    NotLibtorch {
        /// The folder.
        path: PathBuf,
    },
    /// A libtorch whose version cannot be read.
    #[error("cannot tell the version of the libtorch at {}: neither build-version nor a __version__ line in version.py is there", path.display())]
    UnknownVersion {
        /// The folder or file read.
        path: PathBuf,
    },
    /// A libtorch of another version than the one tch 0.24.0 needs.
    #[error("the libtorch at {} is version {version}, but tch 0.24.0 needs exactly {}. Point LIBTORCH at a {} install, or unset it to let setup install one", path.display(), crate::TORCH_VERSION, crate::TORCH_VERSION)]
    WrongVersion {
        /// The libtorch folder.
        path: PathBuf,
        /// The version found.
        version: String,
    },
    /// A path Cargo's config cannot hold (not UTF-8).
    #[error("{} is not valid UTF-8, so it cannot be written into a Cargo config; move libtorch (or TORCHLIGHT_CACHE) to a UTF-8 path", path.display())]
    NonUtf8Path {
        /// The path.
        path: PathBuf,
    },
    /// A `.cargo/config.toml` whose `LIBTORCH` setting this tool does not rewrite.
    #[error("{}: {reason}; set `[env] LIBTORCH` there by hand", path.display())]
    CargoConfig {
        /// The config file.
        path: PathBuf,
        /// What is in the way.
        reason: String,
    },
    /// A file-system operation failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (shown in the message, not chained, so it is not printed twice).
        error: std::io::Error,
    },
}

/// `Result` with [`SetupError`].
pub type Result<T, E = SetupError> = std::result::Result<T, E>;
