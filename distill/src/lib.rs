//! `distill`: knowledge distillation of a TorchScript teacher into a student that a cfg.toml
//! describes, on CUDA or CPU, with libtorch through tch.
//!
//! The flow of a run (`run::run`): `config` (cfg.toml, schema in `estimator_wasm::spec`) ->
//! `data` (npz, normalisation, seeded order) -> `teacher` (TorchScript, eval, no_grad) ->
//! `preflight` -> `student` (layers from `estimator_wasm::arch`) -> `trainer` (`loss`, `optim`,
//! `schedule`) -> `export` (safetensors, TorchScript) -> `report`, written through `rundir`.
pub mod amp;
pub mod config;
pub mod data;
pub mod error;
pub mod eval;
pub mod export;
pub mod loss;
pub mod metrics;
pub mod optim;
pub mod preflight;
pub mod progress;
pub mod report;
pub mod run;
pub mod rundir;
pub mod schedule;
pub mod shim;
pub mod student;
pub mod teacher;
pub mod trainer;

pub use error::{DistillError, Result};
pub use run::{run, TrainOptions};
