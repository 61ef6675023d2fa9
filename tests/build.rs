//! The test binaries link libtorch: the same rpath recipe as the trainer's.
include!("../distill/build/libtorch.rs");

fn main() {
    link_libtorch();
}
