//! Builds the c10d shim (`csrc/dist.cpp`, `csrc/sync_bn.cpp`, and `csrc/nccl.cpp` with the
//! `nccl` feature) against the libtorch torchlight-tensor uses, with gloo's headers, and adds
//! libtorch's lib folder as an rpath for this crate's tests.
//!
//! libtorch ships c10d's headers but not gloo's, which `ProcessGroupGloo.hpp` includes. Any
//! recent gloo's headers do (Debian's `libgloo-dev`; `cargo xtask setup --distributed` unpacks
//! it into the per-user cache without root and links it as `.gloo`): the shim only uses c10d's
//! classes, never gloo's own (see `csrc/dist.cpp`), so the gloo version does not matter. Nothing
//! of gloo is linked: libtorch_cpu.so holds the gloo libtorch was built with.

use std::env;
use std::path::{Path, PathBuf};

/// Where gloo's headers are looked for after `TORCHLIGHT_GLOO_INCLUDE`.
const SYSTEM_INCLUDES: &[&str] = &["/usr/include", "/usr/local/include"];

fn main() {
    for file in ["csrc/dist.cpp", "csrc/dist.h", "csrc/handles.h", "csrc/nccl.cpp", "csrc/sync_bn.cpp"] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-env-changed=TORCHLIGHT_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let lib = PathBuf::from(
        env::var("DEP_TORCHLIGHT_SHIM_LIBTORCH_LIB").expect("torchlight-tensor reports its libtorch lib dir"),
    );
    let csrc =
        PathBuf::from(env::var("DEP_TORCHLIGHT_SHIM_CSRC").expect("torchlight-tensor reports its csrc dir"));
    let libtorch = lib.parent().expect("libtorch lib dir has a parent").to_path_buf();
    let gloo = gloo_include().unwrap_or_else(|searched| {
        panic!(
            "\n\ntorchlight-distributed needs gloo's C++ headers (gloo/config.h), which libtorch does not ship.\n\
             Searched: {searched}.\n\
             Fix: run `cargo xtask setup --distributed` in the Torchlight workspace (fetches Debian's libgloo-dev \
             with `apt-get download` into the per-user cache, no root needed), or `apt-get install libgloo-dev`, \
             or set TORCHLIGHT_GLOO_INCLUDE to a folder holding gloo/config.h.\n\
             The rest of the workspace builds without this crate: it is not a default member, and the \
             `torchlight` facade enables it only with its `distributed` feature.\n"
        )
    });
    println!("cargo:rerun-if-changed={}", gloo.join("gloo/config.h").display());
    let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_string());

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .std("c++17")
        .include(&csrc)
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .include(&gloo)
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .define("GLOG_USE_GLOG_EXPORT", None)
        .define("USE_DISTRIBUTED", None)
        .define("USE_C10D_GLOO", None)
        // libtorch's headers are not warning-clean under -Wall; ours are checked by review.
        .warnings(false)
        .file("csrc/dist.cpp")
        .file("csrc/sync_bn.cpp");
    if env::var_os("CARGO_FEATURE_NCCL").is_some() {
        add_nccl(&mut build, &libtorch);
    }
    build.compile("torchlight_dist");
    // For tests/it/shim_rule.rs, which checks the compiled shim's symbols.
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rustc-env=TL_DIST_SHIM_LIB={}", out_dir.join("libtorchlight_dist.a").display());
    // After the static shim so that the linker resolves its references to libtorch. c10d and
    // its Gloo backend live in libtorch_cpu.so; never `-ltorch`, whose libtorch.so pulls in
    // libtorch_cuda.so, which the lean install cannot resolve.
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    if env::var_os("CARGO_FEATURE_NCCL").is_some() {
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}

/// The folder holding `gloo/config.h`, or the list of places searched.
fn gloo_include() -> Result<PathBuf, String> {
    let mut searched = Vec::new();
    let configured = env::var_os("TORCHLIGHT_GLOO_INCLUDE").map(PathBuf::from);
    for dir in configured.into_iter().chain(SYSTEM_INCLUDES.iter().map(PathBuf::from)) {
        if dir.join("gloo/config.h").is_file() {
            return Ok(dir);
        }
        searched.push(dir.display().to_string());
    }
    Err(searched.join(", "))
}

/// ProcessGroupNCCL's headers include NCCL's and CUDA's: from the full libtorch install's
/// `nvidia/*` wheels (NCCL, the CUDA runtime, cuBLAS, ...) plus CUDA 13.0's crt and cccl, which
/// torch does not depend on (`cargo xtask setup --distributed` on a GPU machine links them as
/// `.cuda-headers`), through `TORCHLIGHT_CUDA_INCLUDE` (`:`-separated folders). Its code is in
/// libtorch_cuda.so.
fn add_nccl(build: &mut cc::Build, libtorch: &Path) {
    println!("cargo:rerun-if-env-changed=TORCHLIGHT_CUDA_INCLUDE");
    // `.cargo/config.toml` names `.cuda-headers`, which only GPU machines have: missing folders
    // are skipped.
    let mut dirs: Vec<PathBuf> = env::var("TORCHLIGHT_CUDA_INCLUDE")
        .map(|v| v.split(':').map(PathBuf::from).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    // `<site-packages>/torch` beside `<site-packages>/nvidia/<package>/include`.
    if let Some(site) = libtorch.parent() {
        if let Ok(entries) = std::fs::read_dir(site.join("nvidia")) {
            let mut found: Vec<PathBuf> =
                entries.flatten().map(|e| e.path().join("include")).filter(|p| p.is_dir()).collect();
            found.sort();
            dirs.extend(found);
        }
    }
    for header in ["nccl.h", "cuda_runtime_api.h", "crt/host_config.h"] {
        if !dirs.iter().any(|d| d.join(header).is_file()) {
            panic!(
                "\n\nthe `nccl` feature of torchlight-distributed needs {header}, found in none of: {}.\n\
                 Use the full (CUDA) libtorch install and CUDA's crt/cccl headers (`cargo xtask setup \
                 --cuda --distributed`), or set TORCHLIGHT_CUDA_INCLUDE.\n",
                dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            );
        }
    }
    for d in dirs {
        build.include(d);
    }
    build.define("USE_C10D_NCCL", None).define("TL_WITH_NCCL", None).file("csrc/nccl.cpp");
}
