//! Bakes libtorch's lib folder into this crate's tests and binaries as an rpath.
fn main() {
    torchlight_build::link_libtorch();
}
