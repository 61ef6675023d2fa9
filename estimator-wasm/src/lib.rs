//! Shared, pure-Rust half of the toolkit, in three parts:
//!
//! - [`schema`]: the cfg.toml schema (types, TOML read and write, validation, limits, name
//!   matching, and the tables validation needs: teacher presets, GPU catalogue, precision
//!   recipes). A leaf: it imports nothing else of this crate. The trainer depends on it.
//! - [`memory`]: the training-memory model: layer pricing, the moments of a step, optimiser
//!   states, the allocator, the batch search, the estimate and its rendering.
//! - `explorer` (feature `explorer`, off by default): the browser explorer's form, its sweep and
//!   the JavaScript bindings (feature `js`). The trainer and the root workspace never enable it.
//!
//! No tch, no I/O: the same code runs natively inside `distill` and as WebAssembly in the browser.
//!
//! ```
//! use estimator_wasm::{estimate, Config, Inputs};
//! let config = Config::from_toml_str(
//!     "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256]\n\
//!      [teacher]\nparams = 1000000\n[estimate]\ngpu = \"T4\"\n",
//! )
//! .unwrap();
//! let plan = estimate(&config, &Inputs::default()).unwrap();
//! assert!(plan.fit.unwrap().fits);
//! assert_eq!(plan.params.student, 784 * 256 + 256 + 256 * 10 + 10);
//! ```
//!
//! The formula sheet is `docs/memory-model.md`; each module cites its sources.
#[cfg(feature = "explorer")]
pub mod explorer;
pub mod memory;
pub mod schema;

pub use memory::{
    estimate, max_batch, max_batch_per_gpu, BatchSearch, Cat, Categories, DatasetSize, EstimateError, Inputs,
    MemoryModel, Moment, Plan, StepFlops, TeacherModel, TextWidths, Totals,
};
/// The batch search on the allocator's replay, which the browser build (wasm32) never makes.
#[cfg(not(target_arch = "wasm32"))]
pub use memory::{search_replayed, ReplayedSearch};
pub use schema::{catalogue, gpu, Config, Gpu, SpecError, UnknownGpu};
