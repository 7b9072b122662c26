//! With libtorch in the build (the `tensor` feature, on by default), bakes its lib folder into
//! this crate's tests and examples as an rpath.
fn main() {
    #[cfg(feature = "tensor")]
    torchlight_build::link_libtorch();
}
