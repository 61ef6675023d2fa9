//! Plumbing of the host, which every stage may use and which uses none: `durable` (atomic
//! writes), `interrupt` (Ctrl-C), `progress` (the progress lines), `allocator` (malloc's arenas,
//! peak resident memory), `phase_times` (where the wall time went), `error` (the error type).

pub mod allocator;
pub mod durable;
pub mod error;
pub mod interrupt;
pub mod phase_times;
pub mod progress;
