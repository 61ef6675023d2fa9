//! The training-memory model: what one step of `distill` holds on the device, moment by moment.
//!
//! [`memory_model`] compiles a [`crate::schema::Config`] into a [`MemoryModel`], one step per
//! file (`setup`, `student_chain`, `teacher_plan`, `step_tensors`, `stage_plan`, `eval_plan`,
//! `summary`, `scan_layout`; `fused_loss` for a head fused with its loss) into the pieces of `compiled`: the layers priced by [`layer`]
//! (sizes in [`sizes`]), the optimiser [`states`], the [`runtime`] allocator. `moments` defines
//! what is live at each moment of a step and `scan` finds the peak; [`mod@estimate`] assembles the
//! [`Plan`] ([`breakdown`]) that [`render`] prints; [`batch`] finds the largest micro-batch that
//! fits a GPU ([`replayed_fit`]: by the allocator's replay, for `distill`); [`flops`] counts a
//! step's FLOPs. [`inputs`] holds what a caller knows beyond the cfg.toml, [`errors`] why an estimate
//! fails.
mod alloc_trace;
pub mod batch;
pub mod breakdown;
mod builder;
pub mod caching_allocator;
pub(crate) mod compiled;
pub mod errors;
pub mod estimate;
mod eval_plan;
mod flop_plan;
pub mod flops;
mod fused_loss;
mod hidden_plan;
pub mod inputs;
pub mod layer;
pub mod memory_model;
pub(crate) mod moments;
pub mod render;
// the allocator's replay is left out of the browser build (wasm32), so is the search on it
#[cfg(not(target_arch = "wasm32"))]
pub mod replayed_fit;
pub mod runtime;
pub(crate) mod scan;
mod scan_layout;
mod setup;
pub mod sizes;
mod stage_plan;
pub mod states;
mod step_tensors;
mod student_chain;
mod summary;
mod teacher_plan;
mod text_widths;
mod transformer_blocks;

pub use batch::BatchSearch;
pub use breakdown::{Cat, Categories, Moment, MomentBytes, Plan, Totals};
pub use errors::EstimateError;
pub use estimate::{estimate, max_batch, max_batch_per_gpu};
pub use flops::StepFlops;
pub use inputs::{DatasetSize, Inputs, TeacherModel, TextWidths};
pub use memory_model::MemoryModel;
#[cfg(not(target_arch = "wasm32"))]
pub use replayed_fit::{search_replayed, ReplayedSearch};
pub use text_widths::at_width;
