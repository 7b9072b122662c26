//! Links this crate's tests and binary with an rpath to the libtorch torchlight-tensor uses.
fn main() {
    let lib = std::env::var("DEP_TORCHLIGHT_SHIM_LIBTORCH_LIB")
        .expect("torchlight-tensor reports its libtorch lib dir");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
}
