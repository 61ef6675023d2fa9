//! A block-level model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! torch 2.x, default `PYTORCH_CUDA_ALLOC_CONF`), to predict the bytes it reserves from the
//! driver: every segment it ever opened stays reserved (nothing calls `empty_cache`), so its
//! peak depends on the order of requests, not only on what is live at the peak.
//!
//! The rules, each as that file has it:
//! * `round_size`: a request is rounded up to a multiple of `kMinBlockSize` = 512 B;
//! * `get_pool`: requests up to `kSmallSize` = 1 MiB come from the small pool, larger ones from
//!   the large pool; a block never moves between pools;
//! * `get_free_block`: the smallest cached free block of the pool that fits (blocks ordered by
//!   size, then address: `BlockComparatorSize`);
//! * `get_allocation_size`: without one, a new segment (`cudaMalloc`) of `kSmallBuffer` = 2 MiB
//!   for small requests, `kLargeBuffer` = 20 MiB for requests below `kMinLargeAlloc` = 10 MiB,
//!   else the request rounded up to `kRoundLarge` = 2 MiB;
//! * `should_split`: the block is cut to the request when what remains is at least 512 B (small
//!   pool) or more than 1 MiB (large pool); otherwise the request takes the whole block;
//! * `free_block` / `try_merge_blocks`: a freed block merges with its free neighbours in the same
//!   segment;
//! * `alloc_block` failing (the device is full): `release_cached_blocks` returns every segment
//!   with no block in use to the driver, and the request is tried again.
//!
//! The default `max_split_size` (unlimited), no expandable segments, no garbage-collection
//! threshold and one stream are assumed, as `distill` runs.
use std::collections::{BTreeMap, BTreeSet};

// the allocator's constants, under their names in the source
use crate::memory::runtime::{
    BLOCK as MIN_BLOCK, LARGE_REQUEST as MIN_LARGE_ALLOC, LARGE_ROUND as ROUND_LARGE, MID_SEGMENT as LARGE_BUFFER,
    SMALL_REQUEST as SMALL_SIZE, SMALL_SEGMENT as SMALL_BUFFER,
};

/// `round_size`: `bytes` as the allocator hands it out.
pub fn round_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// `get_allocation_size`: the segment opened for a rounded request of `size` bytes.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    free: bool,
    segment: u128,
}

/// The allocator's state: its segments, their blocks, and its counters.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    /// Every block by address (u128: a run of segments near 2^64 bytes each still has room).
    blocks: BTreeMap<u128, Block>,
    /// Cached free blocks of each pool, as (size, address): `[small, large]`.
    free: [BTreeSet<(u64, u128)>; 2],
    /// Segments by base address: (size, small pool).
    segments: BTreeMap<u128, (u64, bool)>,
    next_address: u128,
    /// Bytes of the device the allocator may reserve (`u64::MAX`: unlimited).
    limit: u64,
    /// Bytes in segments now (`reserved_bytes.current`).
    pub reserved: u64,
    /// The largest `reserved` so far (`reserved_bytes.peak`).
    pub peak_reserved: u64,
    /// Bytes in blocks in use now (`allocated_bytes.current`).
    pub allocated: u64,
    /// The largest `allocated` so far.
    pub peak_allocated: u64,
}

impl CachingAllocator {
    /// An allocator that may reserve at most `limit` bytes before it releases its cached
    /// segments (`u64::MAX`: never).
    pub fn new(limit: u64) -> CachingAllocator {
        CachingAllocator { limit, ..CachingAllocator::default() }
    }

    /// Serves a request of `bytes`; returns the block's address (the handle [`Self::free`] takes).
    pub fn malloc(&mut self, bytes: u64) -> u128 {
        let size = round_size(bytes);
        let small = size <= SMALL_SIZE;
        let pool = usize::from(!small);
        let found = self.free[pool].range((size, 0)..).next().copied();
        let (block_size, address) = match found {
            Some(key) => {
                self.free[pool].remove(&key);
                key
            }
            None => {
                let segment = allocation_size(size);
                if self.reserved.saturating_add(segment) > self.limit {
                    self.release_cached();
                }
                let base = self.next_address;
                // segments never touch: a gap keeps neighbours of different segments apart
                self.next_address = base + u128::from(segment) + u128::from(SMALL_BUFFER);
                self.segments.insert(base, (segment, small));
                self.blocks.insert(base, Block { size: segment, free: true, segment: base });
                self.reserved = self.reserved.saturating_add(segment);
                self.peak_reserved = self.peak_reserved.max(self.reserved);
                (segment, base)
            }
        };
        let remaining = block_size - size;
        let split = if small { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        let segment = self.blocks[&address].segment;
        let taken = if split {
            let rest = address + u128::from(size);
            self.blocks.insert(rest, Block { size: remaining, free: true, segment });
            self.free[pool].insert((remaining, rest));
            size
        } else {
            block_size
        };
        self.blocks.insert(address, Block { size: taken, free: false, segment });
        self.allocated = self.allocated.saturating_add(taken);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        address
    }

    /// Returns the block at `address` to the cache, merged with its free neighbours.
    ///
    /// # Panics
    /// If `address` is not a block in use (a bug of the caller's trace).
    pub fn free(&mut self, address: u128) {
        let block = self.blocks[&address];
        assert!(!block.free, "double free at {address}");
        self.allocated = self.allocated.saturating_sub(block.size);
        let pool = usize::from(!self.segments[&block.segment].1);
        let (mut start, mut size) = (address, block.size);
        if let Some((&prev, &p)) = self.blocks.range(..address).next_back() {
            if p.free && p.segment == block.segment {
                self.free[pool].remove(&(p.size, prev));
                self.blocks.remove(&address);
                start = prev;
                size += p.size;
            }
        }
        if let Some((&next, &n)) = self.blocks.range(address + 1..).next() {
            if n.free && n.segment == block.segment {
                self.free[pool].remove(&(n.size, next));
                self.blocks.remove(&next);
                size += n.size;
            }
        }
        self.blocks.insert(start, Block { size, free: true, segment: block.segment });
        self.free[pool].insert((size, start));
    }

    /// `release_cached_blocks`: every segment whose blocks are all free goes back to the driver.
    fn release_cached(&mut self) {
        // a segment with no block in use is one free block at its base, of its size
        let whole: Vec<(u128, u64, bool)> = self.free[0]
            .iter()
            .chain(&self.free[1])
            .filter(|(size, base)| self.segments.get(base).is_some_and(|s| s.0 == *size))
            .map(|&(size, base)| (base, size, self.segments[&base].1))
            .collect();
        for (base, size, small) in whole {
            self.free[usize::from(!small)].remove(&(size, base));
            self.blocks.remove(&base);
            self.segments.remove(&base);
            self.reserved = self.reserved.saturating_sub(size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn small_requests_share_a_2_mib_segment() {
        let mut a = CachingAllocator::new(u64::MAX);
        let x = a.malloc(1);
        let y = a.malloc(700 * 1024);
        let _z = a.malloc(MIB);
        // 512 + 700 KiB + 1 MiB = 1,765,888 B fit one segment
        assert_eq!((a.reserved, a.allocated), (2 * MIB, 512 + 700 * 1024 + MIB));
        // a fourth request of 400 KiB does not: 2 MiB less the three leaves 331,264 B
        a.malloc(400 * 1024);
        assert_eq!(a.reserved, 4 * MIB);
        a.free(x);
        a.free(y);
        // the freed 512 B and 700 KiB merge into one 700.5 KiB block, which 700 KiB + 512 reuses
        a.malloc(700 * 1024 + 512);
        assert_eq!(a.reserved, 4 * MIB);
    }

    #[test]
    fn middle_requests_carve_a_20_mib_segment_and_large_ones_round_to_2_mib() {
        let mut a = CachingAllocator::new(u64::MAX);
        // 3 MiB opens 20 MiB; the remaining 17 MiB (more than 1 MiB) is split off and serves
        // five more requests of 3 MiB; the 2 MiB left serves one of 1.5 MiB, whose 0.5 MiB
        // remainder is not split off (not more than 1 MiB), so the block is 2 MiB
        for _ in 0..6 {
            a.malloc(3 * MIB);
        }
        let b = a.malloc(3 * MIB / 2);
        assert_eq!(a.reserved, 20 * MIB);
        assert_eq!(a.allocated, 20 * MIB);
        a.free(b);
        assert_eq!(a.allocated, 18 * MIB);
        // 10 MiB + 1 B gets its own segment of 12 MiB
        a.malloc(10 * MIB + 1);
        assert_eq!(a.reserved, 32 * MIB);
        assert_eq!(allocation_size(round_size(10 * MIB + 1)), 12 * MIB);
        assert_eq!(allocation_size(round_size(10 * MIB - 512)), 20 * MIB);
        assert_eq!(allocation_size(round_size(MIB + 1)), 20 * MIB);
        assert_eq!(allocation_size(round_size(MIB)), 2 * MIB);
    }

    #[test]
    fn a_larger_request_after_frees_opens_a_new_segment_unless_neighbours_merge() {
        let mut a = CachingAllocator::new(u64::MAX);
        let x = a.malloc(100 * MIB);
        a.free(x);
        // the cached 100 MiB segment cannot serve 101 MiB: reserved grows to 202 MiB
        let y = a.malloc(101 * MIB);
        assert_eq!((a.reserved, a.peak_reserved), (202 * MIB, 202 * MIB));
        // a request of 40 MiB takes the best fit (the 100 MiB block), split: 60 MiB stays free
        let z = a.malloc(40 * MIB);
        a.malloc(60 * MIB);
        assert_eq!(a.reserved, 202 * MIB);
        // blocks of one segment merge when freed: 40 + 60 again serve 100 MiB
        a.free(y);
        a.free(z);
        assert_eq!(a.allocated, 60 * MIB);
    }

    #[test]
    fn a_full_device_returns_its_unused_segments_before_growing() {
        let mut a = CachingAllocator::new(150 * MIB);
        let x = a.malloc(100 * MIB);
        a.free(x);
        a.malloc(120 * MIB);
        // the cached 100 MiB segment was released: 120 MiB reserved, peak 120 MiB
        assert_eq!((a.reserved, a.peak_reserved), (120 * MIB, 120 * MIB));
    }
}
