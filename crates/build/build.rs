//! The preflight: stops the build in one line, before torch-sys's C++ build can fail in two
//! screens of compiler output, when `LIBTORCH` names no libtorch. It has no dependencies, so
//! Cargo runs it long before torch-sys's build script, whose own dependencies take a while.

#[path = "src/preflight.rs"]
mod preflight;

fn main() {
    for var in ["LIBTORCH", "LIBTORCH_LIB", "LIBTORCH_USE_PYTORCH", "DOCS_RS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // docs.rs builds documentation without libtorch (tch's `doc-only`).
    if std::env::var_os("DOCS_RS").is_some() {
        return;
    }
    if let Err(message) = preflight::check_libtorch_env(|name| std::env::var_os(name)) {
        println!("cargo::error={message}");
    }
}
