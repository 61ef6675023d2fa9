//! Link libtorch so that the binary, tests and benches run without `LD_LIBRARY_PATH` and see CUDA.
//!
//! torch-sys passes its rpath only to the C++ glue it compiles, and tch's own `rustc-link-arg`s reach
//! only tch's examples. Every package that links an executable against tch must therefore add the
//! rpath and keep `libtorch.so` (which is what pulls in `libtorch_cuda.so`) from being dropped by
//! `--as-needed` (tch-rs #980, #787; `shared/docs/toolchain.md` A5).
fn main() {
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("torch-sys did not report DEP_TCH_LIBTORCH_LIB: run scripts/setup first");
    println!("cargo:rustc-link-arg=-Wl,-rpath={lib}");
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
}
