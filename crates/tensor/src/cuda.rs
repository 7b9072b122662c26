//! Making CUDA visible to tch: load `libtorch_cuda.so` beside the libtorch in use.
//!
//! On Linux, binaries are linked with `--as-needed`, and since Rust code calls no symbol of
//! `libtorch_cuda.so` directly, the linker drops it: libtorch then never registers its CUDA
//! hooks and reports no CUDA even on a GPU machine (tch-rs issue 980). Python's torch avoids
//! this because `libtorch_python.so` pulls the CUDA library in. Here we `dlopen` it, from the
//! same folder as the `libtorch_cpu.so` this process loaded, before anything asks about CUDA.
//! Loading it also runs its static initialisers, which register the CUDA backend.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What this process found out about CUDA, once.
#[derive(Debug, Clone)]
pub struct CudaStatus {
    /// Whether CUDA can be used (driver, device and CUDA-enabled libtorch all present).
    pub available: bool,
    /// How many CUDA devices are visible.
    pub device_count: usize,
    /// Whether cuDNN is available too.
    pub cudnn: bool,
    /// The folder of the `libtorch_cpu.so` this process uses.
    pub libtorch_lib_dir: Option<PathBuf>,
    /// When CUDA is unavailable, why, in words.
    pub reason: Option<String>,
}

static STATUS: OnceLock<CudaStatus> = OnceLock::new();

/// Loads libtorch's CUDA backend if it can be loaded, and reports what was found.
///
/// Safe to call any number of times from any thread; the work happens once. Every
/// Torchlight function that depends on CUDA (device resolution, seeding, pinned memory,
/// autocast) calls it first.
pub fn cuda_status() -> &'static CudaStatus {
    STATUS.get_or_init(load)
}

/// `torch.cuda.is_available()`, with libtorch's CUDA backend loaded first.
pub fn cuda_is_available() -> bool {
    cuda_status().available
}

/// `torch.cuda.device_count()`, with libtorch's CUDA backend loaded first.
pub fn cuda_device_count() -> usize {
    cuda_status().device_count
}

fn load() -> CudaStatus {
    let lib_dir = loaded_libtorch_dir();
    let mut reason = None;
    if !tch::Cuda::is_available() {
        reason = match &lib_dir {
            None => Some("could not locate the loaded libtorch_cpu.so".to_string()),
            Some(dir) => dlopen_global(&dir.join("libtorch_cuda.so")).err(),
        };
    }
    let available = tch::Cuda::is_available();
    let device_count = if available { usize::try_from(tch::Cuda::device_count()).unwrap_or(0) } else { 0 };
    if !available && reason.is_none() {
        reason = Some(
            "libtorch's CUDA backend is loaded but sees no CUDA device (no NVIDIA driver, or \
             CUDA_VISIBLE_DEVICES hides them)"
                .to_string(),
        );
    }
    CudaStatus {
        available,
        device_count,
        cudnn: available && tch::Cuda::cudnn_is_available(),
        libtorch_lib_dir: lib_dir,
        reason: if available { None } else { reason },
    }
}

/// The folder of the `libtorch_cpu.so` mapped into this process, from `/proc/self/maps`.
fn loaded_libtorch_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|p| p.file_name().is_some_and(|n| n == "libtorch_cpu.so"))
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// `dlopen(path, RTLD_NOW | RTLD_GLOBAL)`, keeping the library loaded for the process's life.
fn dlopen_global(path: &Path) -> Result<(), String> {
    if !path.exists() {
        return Err(format!("{} does not exist: this libtorch is a CPU-only build", path.display()));
    }
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
    // SAFETY: c_path is a valid NUL-terminated string; the handle is deliberately leaked so the
    // library (and the CUDA hooks it registers) stays loaded.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a NUL-terminated message describing the failed dlopen.
        let message = unsafe {
            let err = libc::dlerror();
            if err.is_null() {
                "unknown dlopen error".to_string()
            } else {
                std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "libtorch_cuda.so could not be loaded ({message}); on a GPU machine run \
             `cargo xtask setup --cuda` for the CUDA libraries"
        ));
    }
    Ok(())
}
