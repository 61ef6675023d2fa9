//! Shared, pure-Rust half of the toolkit: the cfg.toml schema and the training-memory model.
//!
//! No tch, no I/O: the same code runs natively inside `distill` and as WebAssembly in the browser.
pub mod arch;
pub mod error;
pub mod spec;

pub use error::SpecError;
pub use spec::Config;
