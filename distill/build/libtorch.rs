// Shared by the build scripts of every package that links an executable against tch.
//
// torch-sys passes its rpath only to the C++ glue it compiles, and tch's own `rustc-link-arg`s
// reach only tch's examples. Every package that links a binary, test or bench must therefore
// add the rpath and keep `libtorch.so` (which is what pulls in `libtorch_cuda.so`) from being
// dropped by `--as-needed` (tch-rs #980, #787; docs/toolchain.md A5).

/// The libtorch `lib` folder torch-sys found (`DEP_TCH_LIBTORCH_LIB`); needs torch-sys as a
/// direct dependency of the package.
fn libtorch_lib() -> String {
    std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys did not report DEP_TCH_LIBTORCH_LIB: run scripts/setup first")
}

/// Links executables with an rpath to libtorch and with `libtorch.so` kept.
fn link_libtorch() {
    let lib = libtorch_lib();
    println!("cargo:rustc-link-arg=-Wl,-rpath={lib}");
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
}
