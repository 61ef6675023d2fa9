//! Links libtorch for the binary and tests, and compiles the C++ shims for what tch does not bind:
//! `csrc/shim.cpp` (autocast dtype on CPU and CUDA, CUDA allocator statistics) and
//! `csrc/dist_shim.cpp` (c10d: process groups and the DDP Reducer).
include!("build/libtorch.rs");

fn main() {
    link_libtorch();
    let lib = std::path::PathBuf::from(libtorch_lib());
    let include = lib.join("../include");
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    cc::Build::new()
        .cpp(true)
        .file("csrc/shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("distill_shim");
    compile_dist_shim(&include);
}

/// The c10d shim (`csrc/dist_shim.cpp`, data-parallel training): libtorch's c10d headers from the
/// wheel, and Gloo's, which the wheel does not ship, from `GLOO_INCLUDE` or Debian's
/// `libgloo-dev` (`/usr/include/gloo`; declarations only, gloo's code is inside libtorch_cpu).
fn compile_dist_shim(include: &std::path::Path) {
    println!("cargo:rerun-if-changed=csrc/dist_shim.cpp");
    println!("cargo:rerun-if-env-changed=GLOO_INCLUDE");
    let gloo = std::env::var("GLOO_INCLUDE").unwrap_or_else(|_| "/usr/include".to_string());
    if !std::path::Path::new(&gloo).join("gloo/config.h").exists() {
        panic!(
            "distill: Gloo's headers are missing ({gloo}/gloo/config.h): run `apt-get install libgloo-dev` \
             (scripts/setup does) or set GLOO_INCLUDE to a folder holding gloo/"
        );
    }
    cc::Build::new()
        .cpp(true)
        .file("csrc/dist_shim.cpp")
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .include(&gloo)
        .flag("-std=c++17")
        .flag("-fvisibility=hidden")
        .flag("-fvisibility-inlines-hidden")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", None)
        .warnings(false)
        .compile("distill_dist_shim");
}
