//! `distill`: knowledge distillation of a TorchScript teacher into a student that a cfg.toml
//! describes, on CUDA or CPU, with libtorch through tch.
//!
//! The flow of a run (`run::run`): `config` (cfg.toml, schema in `estimator_wasm::spec`) ->
//! `data` (npz, normalisation, seeded order) -> `teacher` (TorchScript, eval, no_grad) ->
//! `preflight` -> `phase` per student (layers from `estimator_wasm::schema::arch` in `student`) ->
//! `trainer` (loop, `batches`, `checkpoint`) -> `step` (`shim` autocast, `loss`, `amp` loss
//! scaling, gradient checkpointing) -> `optim` + `schedule` + `prune` -> `export` (+ `shrink`,
//! `latency`) -> `report`, written through `rundir` (`durable` writes; `fingerprint` of the
//! input files that a resume checks).
pub mod amp;
pub mod batches;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod durable;
pub mod error;
pub mod eval;
pub mod export;
pub mod fingerprint;
pub mod latency;
pub mod loss;
pub mod metrics;
pub mod optim;
pub mod phase;
pub mod plan;
pub mod preflight;
pub mod progress;
pub mod prune;
pub mod report;
pub mod run;
pub mod rundir;
pub mod schedule;
pub mod shim;
pub mod shrink;
pub mod step;
pub mod student;
pub mod teacher;
pub mod trainer;

pub use error::{DistillError, Result};
pub use run::{resume, run, TrainOptions};

/// Serialises unit tests that draw from libtorch's global random generator (the test harness
/// runs tests on parallel threads, and `manual_seed` in one would steer another's dropout).
#[cfg(test)]
pub(crate) fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
