//! `distill`: knowledge distillation of a TorchScript teacher into a student that a cfg.toml
//! describes, on CUDA or CPU, with libtorch through tch.
//!
//! The data flows one way: cfg.toml -> schema (`estimator_wasm::schema`) -> resolved run
//! ([`config::RunSettings`]) -> trainer -> exports -> report. The source folders are the stages of
//! that flow, in order; a stage imports its own files, earlier stages and the plumbing, never a
//! later stage (`scripts/check-structure` checks it; `docs/architecture.md` says why):
//!
//! 1. [`config`]: the cfg.toml as written (`--set` included) and the run as resolved.
//! 2. [`inputs`]: what a run reads: the data, the teacher (TorchScript or a Hugging Face folder),
//!    its cached outputs, the vocabularies' check, the files a resume checks.
//! 3. [`student`]: the student network, its kinds, and building it with its starting weights.
//! 4. [`prune`]: pruning during training, its schedule, and the physically smaller student.
//! 5. [`train`]: the loop, one step, the loss, the optimiser, batches, checkpoints, evaluation,
//!    the memory plan, `metrics.jsonl`.
//! 6. [`export`]: the trained student written (safetensors, TorchScript, a Hugging Face folder)
//!    and measured: its section of the report.
//! 7. [`report`]: `report.json`, `report.html`, the printed summary, `distill compare`.
//! 8. [`run`]: one run end to end in its output folder, and `distill plan`.
//!
//! Plumbing, used by every stage and using none: [`host`] (atomic writes, Ctrl-C, progress
//! lines, malloc's arenas, phase times, the error type), [`torch`] (the C++ shim, precisions,
//! rotary positions, channels-last), [`data_parallel`] (the process group, DDP, SyncBatchNorm).
//! Whether a process trains alone or as one rank of a data-parallel job is chosen once: `main.rs`
//! reads the launcher's environment ([`data_parallel::Launch`]), `run/mod.rs` joins the job's
//! group ([`data_parallel::Launch::join`]) and the trainer holds the resulting
//! [`data_parallel::Strategy`]; no other code branches on a rank or a world size.
//!
//! One training step, from the command line to `report.json`, passes through eight files, each
//! entered once, each with one job:
//!
//! 1. `main.rs`: the command line; caps malloc's arenas (`host::allocator`), then calls
//!    [`run()`] (or `run::plan_command` for `distill plan`).
//! 2. `run/mod.rs`: one run in its output folder: the cfg, the inputs loaded, the run resolved,
//!    `run.json` and `config.toml`, the students, then `report.json` and the folder's final name
//!    (or `--resume` from `run.json`).
//! 3. `config/mod.rs`: the cfg.toml as written ([`config::WrittenCfg`], with the files it names
//!    resolved once), settled into the run as resolved on the device ([`config::RunSettings`],
//!    `config/settings.rs`: the micro-batch a number, `"auto"` the largest that fits by the memory
//!    plan, [`train::memory_plan::resolve`]), which the trainer takes; nothing after it reads the
//!    cfg as written.
//! 4. `run/train_students.rs`: the run's students: the teacher measured, an `"auto"` batch
//!    confirmed with one step, then each student (KD, `--baseline`) fresh, resumed or already
//!    finished, trained with its objective (built once) and handed to the export.
//! 5. `train/trainer.rs`: the loop: batches, the parameter update, bookkeeping, evaluation,
//!    checkpoints.
//! 6. `train/step.rs`: one forward and backward (`torch::shim` autocast, `train::objective`,
//!    `train::amp` loss scaling, gradient checkpointing; `train::backward`, the autograd call,
//!    refused for a loss without a graph).
//! 7. `export/mod.rs`: writes the trained student and measures it: the student's report section
//!    (`export::section`).
//! 8. `report/mod.rs`: `report.json`'s fields, built once ([`report::Report::new`]), and the
//!    printed summary; `report/html/` draws `report.html` from it and the students'
//!    `metrics.jsonl`.
// The stages, in the order a run passes through them (one group each: rustfmt sorts a group).
pub mod config;

pub mod inputs;

pub mod student;

pub mod prune;

pub mod train;

pub mod export;

pub mod report;

pub mod run;

// Plumbing.
pub mod data_parallel;
pub mod host;
pub mod torch;

pub use host::error::{DistillError, Result};
pub use run::{resume, run, TrainOptions};
