//! Text's build script: links libtorch's `lib/` as an rpath for the test binaries when
//! `LIBTORCH` is set.
//!
//! Text needs no libtorch. But in this workspace's `cargo test --workspace`, Cargo unifies
//! features across members, so torchlight-data is built with `tch` and libtorch gets linked
//! into this crate's test binaries too; when `LIBTORCH` names a libtorch, give them its `lib/`
//! folder as an rpath so they start (as vision's build script does). Nothing happens without
//! `LIBTORCH` (no libtorch anywhere).

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(libtorch) = env::var_os("LIBTORCH") {
        let lib = Path::new(&libtorch).join("lib");
        if lib.is_dir() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
        }
    }
}
