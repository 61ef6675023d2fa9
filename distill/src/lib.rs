//! `distill`: knowledge distillation of a TorchScript teacher into a student that a cfg.toml
//! describes, on CUDA or CPU, with libtorch through tch.
//!
//! The data flows one way: cfg.toml -> schema (`estimator_wasm::schema`) -> resolved run
//! ([`config::RunSettings`]) -> trainer -> exports -> report. One training step, from the command
//! line to `report.json`, passes through eight files, each with one job:
//!
//! 1. `main.rs`: the command line; calls [`run()`] (or `plan_command` for `distill plan`).
//! 2. `run.rs`: one run: reads the config, loads data and teacher, preflight, the memory plan,
//!    then each student; builds the [`report::Report`] once and writes `report.json`.
//! 3. `config.rs`: the cfg.toml as written ([`config::RunConfig`]) and the run as resolved
//!    ([`config::RunSettings`], a micro-batch that is a number), which the trainer takes.
//! 4. `student_run.rs`: distilling one student: fresh, resumed from its newest checkpoint, or
//!    already finished; trains it and hands it to the export.
//! 5. `trainer.rs`: the loop: batches, the parameter update, bookkeeping, evaluation,
//!    checkpoints.
//! 6. `step.rs`: one forward and backward (`shim` autocast, `objective`, `amp` loss scaling,
//!    gradient checkpointing).
//! 7. `export.rs`: writes the trained student and measures it: the student's report section.
//! 8. `report.rs`: `report.json`'s fields and the printed summary.
//!
//! Side trips, each one job: `data` (npz, normalisation, seeded order), `teacher` (TorchScript,
//! eval, no_grad), `preflight` (checks before any output), `memory_plan` (the estimator on the
//! device; `batch_size = "auto"`), `student` (the network interface; today's kind: layers from
//! `estimator_wasm::schema::arch`), `objective` (the distillation loss), `precision` (what a precision
//! means to libtorch), `batches`, `loop_state` (the loop's position and running sums), `metrics`
//! (`metrics.jsonl`), `optim`, `schedule`, `prune`, `checkpoint` (the checkpoint format), `eval`,
//! `shrink`, `latency`, `rundir` (the output folder), `durable` (atomic writes), `fingerprint` (the
//! input files a resume checks), `progress`, `error`; `plan_command` is `distill plan`.
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
pub mod loop_state;
pub mod memory_plan;
pub mod metrics;
pub mod objective;
pub mod optim;
pub mod plan_command;
pub mod precision;
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
pub mod student_run;
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
