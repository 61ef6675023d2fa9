//! Links libtorch for the binary and tests, and compiles the C++ shim (`csrc/shim.cpp`) for what
//! tch does not bind (autocast dtype on CPU and CUDA, CUDA allocator statistics).
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
}
