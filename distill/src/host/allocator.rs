//! Host memory: how much glibc's malloc may keep (at most two arenas), and how much the process
//! held at its peak ([`peak_resident_bytes`], for `report.json`).
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

/// The process's peak resident set so far (`VmHWM` in `/proc/self/status`, Linux), bytes: all
/// the host RAM it held at its high-water mark up to the call (the report takes it once the
/// students are exported; teardown after it can add tens of MiB), libtorch's code, the teacher, cached teacher outputs,
/// tensors and what malloc kept after frees included (on CPU, batches of varying length leave
/// freed blocks malloc keeps for reuse, so it exceeds the estimator's prediction). `None` without
/// `/proc`.
pub fn peak_resident_bytes() -> Option<u64> {
    own_status("VmHWM")
}

/// The line `key` of this process's `/proc/self/status`, in bytes.
fn own_status(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(|s| status_bytes(s, key))
}

/// The line `key` of a `/proc/<pid>/status` text (`"VmHWM:\t  2048 kB"`), in bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    let kib = line.trim().strip_suffix("kB")?;
    kib.trim().parse::<u64>().ok().map(|k| k * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_peak_resident_line_is_read_in_bytes() {
        let status = "Name:\tdistill\nVmPeak:\t 9999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(super::status_bytes(status, "VmHWM"), Some(2_097_152));
        assert_eq!(super::status_bytes(status, "VmRSS"), Some(1_048_576));
        assert_eq!(super::status_bytes("VmRSS:\t 1024 kB\n", "VmHWM"), None);
        assert_eq!(super::status_bytes("VmHWM:\t 12 MB\n", "VmHWM"), None, "Linux writes kB");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_peak_covers_memory_touched_and_freed() {
        // the current resident set before, plus a block touched then freed (mmap-sized, so
        // munmap hands it back and the current figure falls while the peak keeps it)
        let before = super::own_status("VmRSS").expect("Linux has /proc/self/status");
        let block: u64 = 192 << 20;
        let touched = vec![1u8; block as usize];
        std::hint::black_box(&touched);
        drop(touched);
        let peak = super::peak_resident_bytes().expect("Linux has VmHWM");
        // half the block: slack for what other test threads free meanwhile
        assert!(peak >= before + block / 2, "peak {peak} under {before} + half the {block} bytes touched");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_cap() {
        assert!(super::set_arena_max(super::ARENAS), "mallopt(M_ARENA_MAX) refused");
    }
}
