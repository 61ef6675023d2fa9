//! What the CUDA runtime adds to the tensors: caching-allocator rounding and segments, the CUDA
//! context, the cuBLAS workspace, NCCL buffers and a fragmentation reserve
//! (`docs/memory-model.md` section 7; `c10/cuda/CUDACachingAllocator.cpp`).
//!
//! Every request is rounded up to 512 B. Requests up to 1 MiB are packed into 2 MiB segments,
//! requests below 10 MiB are carved out of 20 MiB segments, larger ones get their own
//! `cudaMalloc` rounded up to 2 MiB.
//!
//! [`AllocatorPool::reserved`] prices the segments of one moment's tensors, built to be monotone
//! in every tensor's size (so in the batch: a larger batch never needs less), which exact
//! segment packing is not (a tensor that grows past 10 MiB leaves a shared 20 MiB segment). It
//! prices: small tensors packed into 2 MiB segments; 1-10 MiB tensors at their size but at least
//! 2 MiB each (the small segment they left); larger tensors rounded to 2 MiB; and the cuBLAS
//! workspace, the first 1-10 MiB request of a process, as the whole 20 MiB segment it opens.
//! The device total is built on this fast bound (plus the `estimate.fragmentation` reserve); the
//! plan also reports the allocator's peak over the whole run, replayed on
//! `crate::memory::caching_allocator` (`Plan::reserved_replay`), which is too slow for sweeps.
use serde::Serialize;

use crate::memory::errors::EstimateError;

/// Bytes in a mebibyte.
pub const MIB: u64 = 1 << 20;
/// Allocation granularity of the caching allocator (`kMinBlockSize`).
pub const BLOCK: u64 = 512;
/// Largest request served from the small pool (`kSmallSize`).
pub const SMALL_REQUEST: u64 = MIB;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_SEGMENT: u64 = 2 * MIB;
/// Smallest request that gets its own segment (`kMinLargeAlloc`).
pub const LARGE_REQUEST: u64 = 10 * MIB;
/// Segment size for requests between 1 and 10 MiB (`kLargeBuffer`).
pub const MID_SEGMENT: u64 = 20 * MIB;
/// Rounding of large segments (`kRoundLarge`).
pub const LARGE_ROUND: u64 = 2 * MIB;

/// `x` rounded up to a multiple of `to`, `None` on overflow.
pub fn round_up(x: u64, to: u64) -> Option<u64> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

/// `x` rounded up to a multiple of the power of two `to`; `u64::MAX` (the overflow marker of
/// [`AllocatorPool`]) when that does not fit.
#[inline(always)]
fn round_pow2(x: u64, to: u64) -> u64 {
    match x.checked_add(to - 1) {
        Some(v) => v & !(to - 1),
        None => u64::MAX,
    }
}

/// `a + b` or an [`EstimateError::Overflow`] naming `what`.
pub fn add(a: u64, b: u64, what: &str) -> Result<u64, EstimateError> {
    a.checked_add(b).ok_or_else(|| EstimateError::overflow(what))
}

/// `a * b` or an [`EstimateError::Overflow`] naming `what`.
pub fn mul(a: u64, b: u64, what: &str) -> Result<u64, EstimateError> {
    a.checked_mul(b).ok_or_else(|| EstimateError::overflow(what))
}

/// A sum of live tensors as the caching allocator sees them.
///
/// Arithmetic saturates at `u64::MAX` instead of failing on every addition (the estimator sums
/// millions of tensors per second); a saturated field can only mean an overflow, which
/// [`AllocatorPool::check`] turns into [`EstimateError::Overflow`] before any figure is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AllocatorPool {
    /// Exact tensor bytes (`requested_bytes`).
    pub requested: u64,
    /// Bytes after rounding each tensor to 512 B (`allocated_bytes`); equals `requested` on CPU.
    pub allocated: u64,
    /// Rounded bytes of tensors up to 1 MiB (small pool, packed into 2 MiB segments).
    small: u64,
    /// Segment bytes of everything else: tensors between 1 and 10 MiB at their size but at
    /// least 2 MiB each, larger ones rounded to 2 MiB, workspaces' whole segments.
    segments: u64,
}

impl AllocatorPool {
    /// Adds one tensor of `bytes`; `cuda` applies the allocator's rounding.
    #[inline(always)]
    pub fn tensor(&mut self, bytes: u64, cuda: bool) {
        self.requested = self.requested.saturating_add(bytes);
        if !cuda {
            self.allocated = self.requested;
            return;
        }
        let rounded = round_pow2(bytes, BLOCK);
        self.allocated = self.allocated.saturating_add(rounded);
        if rounded <= SMALL_REQUEST {
            self.small = self.small.saturating_add(rounded);
        } else if rounded < LARGE_REQUEST {
            self.segments = self.segments.saturating_add(rounded.max(SMALL_SEGMENT));
        } else {
            self.segments = self.segments.saturating_add(round_pow2(rounded, LARGE_ROUND));
        }
    }

    /// Adds a workspace that opens a segment of its own: `bytes` allocated, the whole segment
    /// (20 MiB below 10 MiB, else rounded to 2 MiB) reserved.
    pub fn workspace(&mut self, bytes: u64, cuda: bool) {
        if !cuda {
            self.tensor(bytes, false);
            return;
        }
        let rounded = round_pow2(bytes, BLOCK);
        self.requested = self.requested.saturating_add(bytes);
        self.allocated = self.allocated.saturating_add(rounded);
        let segment = if rounded < LARGE_REQUEST { MID_SEGMENT } else { round_pow2(rounded, LARGE_ROUND) };
        self.segments = self.segments.saturating_add(segment);
    }

    /// [`AllocatorPool::tensor`] without overflow handling: exact when the caller has bounded every sum
    /// below 2^62 (`scan::scan` does, once per estimate).
    #[inline(always)]
    pub(crate) fn tensor_exact(&mut self, bytes: u64, cuda: bool) {
        self.requested += bytes;
        if !cuda {
            self.allocated = self.requested;
            return;
        }
        let rounded = (bytes + (BLOCK - 1)) & !(BLOCK - 1);
        self.allocated += rounded;
        if rounded <= SMALL_REQUEST {
            self.small += rounded;
        } else if rounded < LARGE_REQUEST {
            self.segments += rounded.max(SMALL_SEGMENT);
        } else {
            self.segments += (rounded + (LARGE_ROUND - 1)) & !(LARGE_ROUND - 1);
        }
    }

    /// [`AllocatorPool::merge`] for bounded sums (see [`AllocatorPool::tensor_exact`]).
    #[inline(always)]
    pub(crate) fn merge_exact(&mut self, other: &AllocatorPool) {
        self.requested += other.requested;
        self.allocated += other.allocated;
        self.small += other.small;
        self.segments += other.segments;
    }

    /// [`AllocatorPool::remove`] for bounded sums.
    #[inline(always)]
    pub(crate) fn remove_exact(&mut self, part: &AllocatorPool) {
        self.requested -= part.requested;
        self.allocated -= part.allocated;
        self.small -= part.small;
        self.segments -= part.segments;
    }

    /// `self + other` for bounded sums.
    #[inline(always)]
    pub(crate) fn plus_exact(&self, other: &AllocatorPool) -> AllocatorPool {
        let mut p = *self;
        p.merge_exact(other);
        p
    }

    /// Adds `n` copies of a tensor of `bytes`.
    pub fn tensors(&mut self, bytes: u64, n: u64, cuda: bool) {
        let mut one = AllocatorPool::default();
        one.tensor(bytes, cuda);
        self.merge(&one.times(n));
    }

    /// Adds every tensor of `other`.
    #[inline]
    pub fn merge(&mut self, other: &AllocatorPool) {
        self.requested = self.requested.saturating_add(other.requested);
        self.allocated = self.allocated.saturating_add(other.allocated);
        self.small = self.small.saturating_add(other.small);
        self.segments = self.segments.saturating_add(other.segments);
    }

    /// Removes the tensors of `part`, which must have been added.
    #[inline]
    pub fn remove(&mut self, part: &AllocatorPool) {
        self.requested = self.requested.saturating_sub(part.requested);
        self.allocated = self.allocated.saturating_sub(part.allocated);
        self.small = self.small.saturating_sub(part.small);
        self.segments = self.segments.saturating_sub(part.segments);
    }

    /// `self + other`.
    #[inline]
    pub fn plus(&self, other: &AllocatorPool) -> AllocatorPool {
        let mut p = *self;
        p.merge(other);
        p
    }

    /// Every tensor `n` times.
    pub fn times(&self, n: u64) -> AllocatorPool {
        let m = |v: u64| v.saturating_mul(n);
        AllocatorPool {
            requested: m(self.requested),
            allocated: m(self.allocated),
            small: m(self.small),
            segments: m(self.segments),
        }
    }

    /// [`AllocatorPool::reserved`] for bounded sums.
    #[inline(always)]
    pub(crate) fn reserved_exact(&self, cuda: bool) -> u64 {
        if cuda {
            ((self.small + (SMALL_SEGMENT - 1)) & !(SMALL_SEGMENT - 1)) + self.segments
        } else {
            self.requested
        }
    }

    /// An upper bound of every field, in u128 (for overflow bounds).
    pub(crate) fn bound(&self) -> u128 {
        u128::from(self.requested.max(self.allocated))
            + u128::from(self.small)
            + u128::from(self.segments)
            + u128::from(SMALL_SEGMENT)
    }

    /// Memory the allocator reserves from the driver for these tensors (see the module docs).
    #[inline]
    pub fn reserved(&self, cuda: bool) -> u64 {
        if !cuda {
            return self.requested;
        }
        let small = round_pow2(self.small, SMALL_SEGMENT);
        small.saturating_add(self.segments)
    }

    /// This pool, or [`EstimateError::Overflow`] naming `what` if any sum saturated.
    pub fn check(self, what: &str) -> Result<AllocatorPool, EstimateError> {
        let fields = [self.requested, self.allocated, self.small, self.segments];
        if fields.contains(&u64::MAX) || self.reserved(true) == u64::MAX {
            return Err(EstimateError::overflow(what));
        }
        Ok(self)
    }
}

/// The runtime costs of one device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Runtime {
    /// True on a CUDA device (allocator rounding and the costs below); false on CPU.
    pub cuda: bool,
    /// CUDA context and loaded kernels, outside the allocator, in bytes.
    pub cuda_context: u64,
    /// cuBLAS workspace, inside the allocator, in bytes.
    pub cublas_workspace: u64,
    /// NCCL communicator buffers, outside the allocator, in bytes.
    pub nccl: u64,
    /// Fragmentation reserve in parts per million of the allocator's reserved peak.
    pub fragmentation_ppm: u64,
}

impl Runtime {
    /// Device total for an allocator peak of `reserved` bytes:
    /// `context + nccl + reserved * (1 + fragmentation)` (`docs/memory-model.md` section 8).
    pub fn device_total(&self, reserved: u64) -> Result<(u64, u64), EstimateError> {
        let frag = fraction_ppm(reserved, self.fragmentation_ppm)?;
        let total = add(reserved, frag, "device total")?;
        let total = add(total, self.cuda_context, "device total")?;
        Ok((frag, add(total, self.nccl, "device total")?))
    }
}

/// `ceil(bytes * ppm / 1e6)` without overflow of the intermediate product.
pub fn fraction_ppm(bytes: u64, ppm: u64) -> Result<u64, EstimateError> {
    let v = (u128::from(bytes) * u128::from(ppm)).div_ceil(1_000_000);
    u64::try_from(v).map_err(|_| EstimateError::overflow("fragmentation reserve"))
}

/// A fraction in [0, 4] as parts per million (rounded to nearest).
pub fn ppm(fraction: f64) -> u64 {
    (fraction.clamp(0.0, 4.0) * 1e6).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_to_512_bytes() {
        let mut p = AllocatorPool::default();
        p.tensor(1, true);
        p.tensor(512, true);
        p.tensor(513, true);
        assert_eq!((p.requested, p.allocated), (1026, 512 + 512 + 1024));
        // all three sit in one 2 MiB small-pool segment
        assert_eq!(p.reserved(true), 2 * MIB);
        // on CPU nothing is rounded
        let mut c = AllocatorPool::default();
        c.tensor(1, false);
        assert_eq!((c.allocated, c.reserved(false)), (1, 1));
    }

    #[test]
    fn segment_classes_follow_the_caching_allocator() {
        // 1 MiB + 1 B is a middle request: priced at least one 2 MiB small segment
        let mut p = AllocatorPool::default();
        p.tensor(MIB + 1, true);
        assert_eq!(p.allocated, MIB + 512);
        assert_eq!(p.reserved(true), 2 * MIB);
        // middle requests are priced at their size
        let mut p = AllocatorPool::default();
        for _ in 0..4 {
            p.tensor(6 * MIB, true);
        }
        assert_eq!(p.reserved(true), 24 * MIB);
        // 10 MiB + 1 B gets its own segment rounded to 2 MiB: 12 MiB
        let mut p = AllocatorPool::default();
        p.tensor(10 * MIB + 1, true);
        assert_eq!(p.reserved(true), 12 * MIB);
        // the cuBLAS workspace (8320 KiB) opens a whole 20 MiB segment
        let mut p = AllocatorPool::default();
        p.workspace(8320 * 1024, true);
        assert_eq!((p.allocated, p.reserved(true)), (8320 * 1024, 20 * MIB));
    }

    /// Growing any one tensor never lowers the reserved estimate, across every class boundary.
    #[test]
    fn reserved_is_monotone_in_tensor_size() {
        let others = [300 * 1024, 700 * 1024, 3 * MIB, 9 * MIB + 100, 15 * MIB];
        let mut last = 0;
        for size in (0..=24 * MIB).step_by(4096) {
            let mut p = AllocatorPool::default();
            p.workspace(8320 * 1024, true);
            for o in others {
                p.tensor(o, true);
            }
            p.tensor(size, true);
            let r = p.reserved(true);
            assert!(r >= last, "{size}: {r} < {last}");
            last = r;
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let mut p = AllocatorPool::default();
        p.tensor(u64::MAX - 10, true);
        assert!(matches!(p.check("x"), Err(EstimateError::Overflow { .. })));
        let mut p = AllocatorPool::default();
        p.tensor(u64::MAX / 2 + 1, false);
        assert!(p.check("x").is_ok());
        p.tensor(u64::MAX / 2 + 1, false);
        assert!(matches!(p.check("x"), Err(EstimateError::Overflow { .. })));
        assert_eq!(AllocatorPool::default().times(3), AllocatorPool::default());
        assert_eq!(fraction_ppm(u64::MAX, 100_000).unwrap(), u64::MAX / 10 + 1);
        assert!(fraction_ppm(u64::MAX, 2_000_000).is_err());
    }

    #[test]
    fn device_total_adds_context_nccl_and_fragmentation() {
        let rt =
            Runtime { cuda: true, cuda_context: 768 * MIB, cublas_workspace: 0, nccl: 0, fragmentation_ppm: 100_000 };
        assert_eq!(rt.device_total(1000 * MIB).unwrap(), (100 * MIB, 1868 * MIB));
    }
}
