//! The training-memory model: what one step of `distill` holds on the device, moment by moment.
//!
//! [`memory_model`] compiles a [`crate::schema::Config`] into a [`MemoryModel`] (the layers
//! priced by [`layer`], the optimiser [`states`], the [`runtime`] allocator); [`moments`] scans
//! the moments of a step; [`estimate`] assembles the [`Plan`] ([`breakdown`]) that [`render`]
//! prints; [`batch`] finds the largest micro-batch that fits a GPU.
pub mod batch;
pub mod breakdown;
mod builder;
pub mod estimate;
pub mod layer;
pub mod memory_model;
pub(crate) mod moments;
pub mod render;
pub mod runtime;
pub mod sizes;
pub mod states;
mod transformer_blocks;

pub use batch::BatchSearch;
pub use breakdown::{Cat, Categories, Moment, MomentBytes, Plan, Totals};
pub use estimate::{estimate, max_batch, max_batch_per_gpu};
pub use memory_model::{DatasetSize, Inputs, MemoryModel};
