//! Plumbing over libtorch, which every stage may use and which uses none: `shim` (what tch lacks:
//! autocast, CUDA memory statistics), `precision` (what a precision means to libtorch),
//! `memory_history` (the CUDA allocator's recorded history, `--cuda-memory-history`), `rotary`
//! (rotary positions, for a Llama teacher and a student), `channels_last` (the memory format),
//! `test_rng` (the unit tests' seeded generator).

pub mod channels_last;
pub mod memory_history;
pub mod precision;
pub mod rotary;
pub mod shim;
#[cfg(test)]
pub(crate) mod test_rng;
