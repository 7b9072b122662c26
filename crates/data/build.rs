//! With the `tch` feature, bakes libtorch's lib folder into this crate's tests as an rpath;
//! without it the crate needs no libtorch at all.
fn main() {
    #[cfg(feature = "tch")]
    torchlight_build::link_libtorch();
}
