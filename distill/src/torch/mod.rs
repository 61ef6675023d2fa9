//! libtorch plumbing: the C++ shim, what a precision means to libtorch, rotary positions, memory format, the tests' seeded generator.

pub mod shim;
pub mod channels_last;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod precision;
pub mod rotary;
