//! GPU catalogue: memory as `nvidia-smi` reports it, plus runtime defaults per card.
//!
//! Memory figures are the `Memory-Usage` totals that `nvidia-smi` prints (MiB; MIG rows from its
//! "MIG devices" table), read from published `nvidia-smi` outputs. The CUDA context default is
//! the middle of the 0.5 to 1 GiB range in `docs/memory-model.md` section 7 and is **unverified
//! (GPU)**: override it with `[estimate] cuda_context_mib`. The cuBLAS workspace follows
//! PyTorch's default `CUBLAS_WORKSPACE_CONFIG` (`:4096:2:16:8` = 8320 KiB, 32 MiB on sm90;
//! `aten/src/ATen/cuda/CublasHandlePool.cpp`).
use serde::Serialize;

use crate::schema::errors::UnknownGpu;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
/// Default CUDA context (driver, kernels, cuBLAS/cuDNN handles) outside the allocator.
pub const DEFAULT_CUDA_CONTEXT: u64 = 768 * MIB;
const CUBLAS_DEFAULT: u64 = 4096 * KIB * 2 + 16 * KIB * 8;
const CUBLAS_SM90: u64 = 32 * MIB;

/// The cuBLAS workspace PyTorch gives each (cuBLAS handle, CUDA stream) pair on a device of
/// compute capability `sm_major`.x, in bytes: `CUBLAS_WORKSPACE_CONFIG` when `config` holds one
/// PyTorch can read, else its default, 32 MiB from Hopper (sm90) on and `:4096:2:16:8` = 8320 KiB
/// before (`getChosenWorkspaceSize` in `aten/src/ATen/cuda/CublasHandlePool.cpp`). cuBLASLt
/// shares it. Measured on an H200 with torch 2.11: 33,554,432 B on the first matmul, and as much
/// again on each other thread or stream that runs one (`docs/memory-model.md`, section 7).
pub fn cublas_workspace(sm_major: u32, config: Option<&str>) -> u64 {
    match config.and_then(parse_workspace_config) {
        Some(bytes) => bytes,
        None if sm_major >= 9 => CUBLAS_SM90,
        None => CUBLAS_DEFAULT,
    }
}

/// A CUDA device that is not (necessarily) in the catalogue, as a run finds it: `memory` bytes
/// (`cudaMemGetInfo`'s total), compute capability `sm_major`.x, and the process's
/// `CUBLAS_WORKSPACE_CONFIG` (see [`cublas_workspace`]).
pub fn cuda_device(memory: u64, sm_major: u32, workspace_config: Option<&str>) -> Gpu {
    Gpu {
        name: "cuda",
        memory,
        cuda_context: DEFAULT_CUDA_CONTEXT,
        cublas_workspace: cublas_workspace(sm_major, workspace_config),
        bf16: sm_major >= 8,
        mig_of: None,
    }
}

/// `CUBLAS_WORKSPACE_CONFIG` as PyTorch reads it: every `:SIZE:COUNT` pair (SIZE in KiB) adds
/// SIZE x COUNT KiB; `None` when the text holds no pair.
pub fn parse_workspace_config(text: &str) -> Option<u64> {
    let mut total: Option<u64> = None;
    let mut parts = text.split(':').skip(1);
    while let (Some(size), Some(count)) = (parts.next(), parts.next()) {
        let (Ok(size), Ok(count)) = (size.trim().parse::<u64>(), count.trim().parse::<u64>()) else {
            return None;
        };
        total = Some(total.unwrap_or(0).saturating_add(size.saturating_mul(count).saturating_mul(KIB)));
    }
    total
}

/// One GPU (or MIG slice) the estimator can plan for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Catalogue name, e.g. `"A100-80GB"` or `"A100-40GB-MIG-1g.5gb"`.
    pub name: &'static str,
    /// Memory the process can see, in bytes (`nvidia-smi` total).
    pub memory: u64,
    /// Default CUDA context size in bytes (outside the caching allocator).
    pub cuda_context: u64,
    /// cuBLAS workspace in bytes, allocated through the caching allocator on the first matmul.
    pub cublas_workspace: u64,
    /// Native bfloat16 (compute capability 8.0 and newer).
    pub bf16: bool,
    /// The card a MIG slice is cut from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_of: Option<&'static str>,
}

const fn card(name: &'static str, mib: u64, bf16: bool, sm90: bool) -> Gpu {
    Gpu {
        name,
        memory: mib * MIB,
        cuda_context: DEFAULT_CUDA_CONTEXT,
        cublas_workspace: if sm90 { CUBLAS_SM90 } else { CUBLAS_DEFAULT },
        bf16,
        mig_of: None,
    }
}

const fn mig(name: &'static str, parent: &'static str, mib: u64) -> Gpu {
    Gpu {
        name,
        memory: mib * MIB,
        cuda_context: DEFAULT_CUDA_CONTEXT,
        cublas_workspace: CUBLAS_DEFAULT,
        bf16: true,
        mig_of: Some(parent),
    }
}

static CATALOGUE: [Gpu; 16] = [
    card("T4", 15360, false, false),
    card("L4", 23034, true, false),
    card("RTX-3090", 24576, true, false),
    card("RTX-4090", 24564, true, false),
    card("A100-40GB", 40960, true, false),
    card("A100-80GB", 81920, true, false),
    card("H100-80GB", 81559, true, true),
    card("H200", 143771, true, true),
    mig("A100-40GB-MIG-1g.5gb", "A100-40GB", 4864),
    mig("A100-40GB-MIG-2g.10gb", "A100-40GB", 9984),
    mig("A100-40GB-MIG-3g.20gb", "A100-40GB", 19968),
    mig("A100-40GB-MIG-4g.20gb", "A100-40GB", 19968),
    mig("A100-80GB-MIG-1g.10gb", "A100-80GB", 9728),
    mig("A100-80GB-MIG-2g.20gb", "A100-80GB", 19968),
    mig("A100-80GB-MIG-3g.40gb", "A100-80GB", 40192),
    mig("A100-80GB-MIG-4g.40gb", "A100-80GB", 40192),
];

/// Every GPU the estimator knows, cards first, then MIG slices.
pub fn catalogue() -> &'static [Gpu] {
    &CATALOGUE
}

/// Looks a GPU up by name as every name is matched (`crate::schema::names`: ignoring case, white
/// space, `-`, `_`, `.`), also without a leading "NVIDIA", "Tesla" or "GeForce" (`"nvidia h200"`,
/// `"rtx3090"`, `"T4 "` and `"a100-40gb-mig-1g.5gb"` all match). Results carry `Gpu::name`.
///
/// # Errors
/// [`UnknownGpu`] listing the known names.
pub fn gpu(name: &str) -> Result<&'static Gpu, UnknownGpu> {
    let wanted = normalise(name);
    CATALOGUE.iter().find(|g| normalise(g.name) == wanted).ok_or_else(|| UnknownGpu {
        name: crate::schema::names::short(name),
        known: CATALOGUE.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
    })
}

fn normalise(name: &str) -> String {
    let s = crate::schema::names::fold(name);
    for prefix in ["nvidia", "tesla", "geforce"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_ignores_case_and_separators() {
        assert_eq!(gpu("nvidia h200").unwrap().memory, 143_771 * MIB);
        assert_eq!(gpu("rtx3090").unwrap().name, "RTX-3090");
        assert_eq!(gpu("Tesla T4").unwrap().memory, 15_360 * MIB);
        assert_eq!(gpu("a100-40gb-mig-1g.5gb").unwrap().memory, 4864 * MIB);
        assert_eq!(gpu("A100_80GB").unwrap().mig_of, None);
    }

    #[test]
    fn unknown_name_lists_the_catalogue() {
        let e = gpu("A100").unwrap_err().to_string();
        assert!(e.contains("A100-40GB") && e.contains("H200") && e.contains("MIG-1g.5gb"), "{e}");
    }

    #[test]
    fn catalogue_covers_the_issue_list_and_mig() {
        for name in ["T4", "L4", "RTX-3090", "RTX-4090", "A100-40GB", "A100-80GB", "H100-80GB", "H200"] {
            assert!(gpu(name).is_ok(), "{name}");
        }
        assert!(catalogue().iter().filter(|g| g.mig_of.is_some()).count() >= 8);
        assert!(!gpu("T4").unwrap().bf16);
        assert_eq!(gpu("H100-80GB").unwrap().cublas_workspace, 32 * MIB);
        assert_eq!(gpu("A100-80GB").unwrap().cublas_workspace, 8320 * KIB);
    }

    #[test]
    fn the_workspace_follows_the_device_generation_and_cublas_workspace_config() {
        assert_eq!(cublas_workspace(9, None), 33_554_432); // measured on the H200
        assert_eq!(cublas_workspace(8, None), 8320 * KIB);
        assert_eq!(cublas_workspace(10, Some(":4096:8")), 32 * MIB);
        assert_eq!(cublas_workspace(9, Some(":16:8")), 128 * KIB);
        assert_eq!(cublas_workspace(9, Some(":4096:2:16:8")), 8320 * KIB);
        assert_eq!(cublas_workspace(9, Some("garbage")), 32 * MIB);
        assert_eq!(parse_workspace_config(":0:0"), Some(0));
    }
}
