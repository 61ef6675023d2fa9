//! Links libtorch for the binary and tests, and compiles the C++ shims for what tch does not bind:
//! `csrc/shim.cpp` (autocast dtype on CPU and CUDA, CUDA allocator statistics),
//! `csrc/script_names.cpp` (names of a traced TorchScript module's inputs),
//! `csrc/cuda_device.cpp` (a CUDA device's compute capability),
//! `csrc/memory_history.cpp` (the CUDA caching allocator's recorded history) and
//! `csrc/dist_shim.cpp` (c10d: process groups and the DDP Reducer) with `csrc/dist_nccl.cpp` (their
//! NCCL backend on CUDA).
include!("build/libtorch.rs");

fn main() {
    link_libtorch();
    let lib = std::path::PathBuf::from(libtorch_lib());
    let include = lib.join("../include");
    torch_cpp("csrc/shim.cpp", &include).compile("distill_shim");
    torch_cpp("csrc/script_names.cpp", &include).compile("distill_script_names");
    compile_dist_shim(&include);
    compile_nccl_backend(&include);
}

/// A C++17 build of `file` against libtorch's headers under `include`, with the wheel's C++11
/// ABI (rebuilt when the file changes).
fn torch_cpp(file: &str, include: &std::path::Path) -> cc::Build {
    println!("cargo:rerun-if-changed={file}");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(file)
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false);
    build
}

/// [`torch_cpp`] of a c10d shim: its symbols hidden (only the `extern "C"` ones are used).
fn c10d_cpp(file: &str, include: &std::path::Path) -> cc::Build {
    let mut build = torch_cpp(file, include);
    build.flag("-fvisibility=hidden").flag("-fvisibility-inlines-hidden");
    build
}

/// The NCCL backend (`csrc/dist_nccl.cpp`), always compiled and chosen at run time: the wheel's
/// own `nccl.h` (`nvidia/nccl/include`) and the CUDA runtime headers of `nvidia/cu13/include`,
/// completed by PyPI's `cuda-toolkit[crt,cccl]` at the wheel's toolkit version (scripts/setup);
/// linked against the wheel's `libtorch_cuda` and `libc10_cuda`, which hold ProcessGroupNCCL.
fn compile_nccl_backend(include: &std::path::Path) {
    let site = include.join("../..").canonicalize().expect("the torch wheel's site-packages folder");
    let (cuda, nccl) = (site.join("nvidia/cu13/include"), site.join("nvidia/nccl/include"));
    for (header, from) in [
        (nccl.join("nccl.h"), "the torch wheel's nvidia-nccl package"),
        (cuda.join("cuda_runtime.h"), "the torch wheel's nvidia-cuda-runtime package"),
        (cuda.join("crt/host_config.h"), "pip install \"cuda-toolkit[crt,cccl]==13.0.2\" into .venv"),
        (cuda.join("nv/target"), "pip install \"cuda-toolkit[crt,cccl]==13.0.2\" into .venv"),
    ] {
        if !header.exists() {
            panic!("distill: {} is missing: run scripts/setup ({from})", header.display());
        }
    }
    c10d_cpp("csrc/dist_nccl.cpp", include)
        .include(&cuda)
        .include(cuda.join("cccl"))
        .include(&nccl)
        .define("USE_C10D_NCCL", None)
        .compile("distill_dist_nccl");
    torch_cpp("csrc/cuda_device.cpp", include).include(&cuda).include(cuda.join("cccl")).compile("distill_cuda_device");
    torch_cpp("csrc/memory_history.cpp", include).compile("distill_memory_history");
    for lib in ["torch_cuda", "c10_cuda"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}

/// The c10d shim (`csrc/dist_shim.cpp`, data-parallel training): libtorch's c10d headers from the
/// wheel, and Gloo's, which the wheel does not ship, from `GLOO_INCLUDE` or Debian's
/// `libgloo-dev` (`/usr/include/gloo`; declarations only, gloo's code is inside libtorch_cpu).
fn compile_dist_shim(include: &std::path::Path) {
    println!("cargo:rerun-if-env-changed=GLOO_INCLUDE");
    let gloo = std::env::var("GLOO_INCLUDE").unwrap_or_else(|_| "/usr/include".to_string());
    if !std::path::Path::new(&gloo).join("gloo/config.h").exists() {
        panic!(
            "distill: Gloo's headers are missing ({gloo}/gloo/config.h): run `apt-get install libgloo-dev` \
             (scripts/setup does) or set GLOO_INCLUDE to a folder holding gloo/"
        );
    }
    c10d_cpp("csrc/dist_shim.cpp", include).include(&gloo).define("USE_C10D_GLOO", None).compile("distill_dist_shim");
}
