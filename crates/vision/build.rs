//! Vision needs no libtorch. But in this workspace's `cargo test --workspace`, Cargo unifies
//! features across members, so torchlight-data is built with `tch` and libtorch gets linked
//! into this crate's test binaries too; when `LIBTORCH` names a libtorch, give them its `lib/`
//! folder as an rpath so they start. Nothing happens without `LIBTORCH` (no libtorch anywhere).

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else { return };
    let lib = Path::new(&libtorch).join("lib");
    if lib.is_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
