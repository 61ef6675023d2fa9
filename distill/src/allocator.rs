//! How much memory glibc's malloc may keep: at most two arenas.
//!
//! glibc gives each thread that allocates an arena of its own (up to 8 per core) and returns a
//! freed block to the arena it came from. libtorch allocates tensors on its intra-op worker
//! threads and frees many of them on the main thread, so the freed space of one arena is not
//! reused by the others and the resident size creeps up batch after batch. The default
//! Fashion-MNIST job (2 epochs, 2 cores, VmRSS sampled every 0.1 s; 2026-12-01) peaked at 809,
//! 1,303 and 1,293 MiB in three identical runs, most of it while caching the teacher's outputs,
//! and at 753, 707 and 690 MiB with two arenas, at the same training speed (5,411-6,852 against
//! 5,659-6,934 samples/s, runs alternated). See glibc's `mallopt(3)`, `M_ARENA_MAX`.
//!
//! A user's own `MALLOC_ARENA_MAX` environment variable wins. Other platforms and C libraries
//! (macOS, musl) are left as they are.

/// The arenas [`limit_malloc_arenas`] allows.
pub const ARENAS: i32 = 2;

/// Caps glibc's malloc at [`ARENAS`] arenas, unless `MALLOC_ARENA_MAX` is set. Call it first
/// thing in `main`, before other threads start. Returns whether the cap was set.
pub fn limit_malloc_arenas() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    set_arena_max(ARENAS)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(arenas: i32) -> bool {
    // SAFETY: mallopt only sets a parameter of the allocator; any value is valid to pass.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_cap() {
        assert!(super::set_arena_max(super::ARENAS), "mallopt(M_ARENA_MAX) refused");
    }
}
