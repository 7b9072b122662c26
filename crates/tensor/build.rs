//! Builds the C++ shim (`csrc/shim.cpp`) against the libtorch torch-sys found, and passes
//! that libtorch's lib dir on: as an rpath for this crate's tests (through torchlight-build)
//! and, through `links`, as `DEP_TORCHLIGHT_SHIM_LIBTORCH_LIB` to every crate that depends on
//! this one.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/trace.cpp");
    println!("cargo:rerun-if-changed=csrc/generator.cpp");
    println!("cargo:rerun-if-changed=csrc/guard.h");
    // torch-sys reports the lib dir it linked (DEP_TCH_LIBTORCH_LIB), which this finds first.
    let libtorch = torchlight_build::link_libtorch();
    let (lib, root) = (&libtorch.lib_dir, libtorch.root());
    let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_string());
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");

    cc::Build::new()
        .cpp(true)
        .pic(true)
        .std("c++17")
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .define("GLOG_USE_GLOG_EXPORT", None)
        // libtorch's headers are not warning-clean under -Wall; ours are checked by review.
        .warnings(false)
        .file("csrc/shim.cpp")
        .file("csrc/trace.cpp")
        .file("csrc/generator.cpp")
        .compile("torchlight_shim");
    // After the static shim so that the linker resolves its references to libtorch.
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:libtorch_lib={}", lib.display());
    // Other crates' shims include csrc/guard.h, so that every shim shares one error store.
    println!("cargo:csrc={}", PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("csrc").display());
}
