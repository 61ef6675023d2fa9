//! Host plumbing: atomic writes, Ctrl-C, progress lines, malloc's arenas, where the wall time went, the error type.

pub mod durable;
pub mod interrupt;
pub mod progress;
pub mod allocator;
pub mod error;
pub mod phase_times;
