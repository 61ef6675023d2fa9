//! `distill`: knowledge distillation of a TorchScript teacher into a student that a cfg.toml
//! describes, on CUDA or CPU, with libtorch through tch.
//!
//! The data flows one way: cfg.toml -> schema (`estimator_wasm::schema`) -> resolved run
//! ([`config::RunSettings`]) -> trainer -> exports -> report. One training step, from the command
//! line to `report.json`, passes through eight files, each entered once, each with one job:
//!
//! 1. `main.rs`: the command line; caps malloc's arenas (`allocator`), then calls [`run()`] (or
//!    `plan_command` for `distill plan`).
//! 2. `run.rs`: one run in its output folder: the cfg, the inputs loaded, the run resolved,
//!    `run.json` and `config.toml`, the students, then `report.json` and the folder's final name
//!    (or `--resume` from `run.json`).
//! 3. `config.rs`: the cfg.toml as written ([`config::RunConfig`], with the files it names
//!    resolved once) and the run as resolved on the device ([`config::RunSettings`]: the
//!    micro-batch a number, `"auto"` the largest that fits by the memory plan), which the
//!    trainer takes.
//! 4. `students.rs`: the run's students: the teacher measured, an `"auto"` batch confirmed with
//!    one step, then each student (KD, `--baseline`) fresh, resumed or already finished, trained
//!    and handed to the export.
//! 5. `trainer.rs`: the loop: batches, the parameter update, bookkeeping, evaluation,
//!    checkpoints.
//! 6. `step.rs`: one forward and backward (`shim` autocast, `objective`, `amp` loss scaling,
//!    gradient checkpointing; `backward`, the autograd call, refused for a loss without a graph).
//! 7. `export.rs`: writes the trained student and measures it: the student's report section.
//! 8. `report.rs`: `report.json`'s fields, built once ([`report::Report::new`]), and the printed
//!    summary; `report_html/` draws `report.html` from it and the students' `metrics.jsonl`.
//!
//! Side trips, each one job: `overrides` (reading a cfg.toml with `--set`), `load` (data and
//! teacher onto the device, checked by `preflight` and, for a language model's
//! vocabularies, `vocab_check` before any output), `memory_plan` (the
//! estimator on the device: its capacity, the largest batch that fits, the plan's figures),
//! `data` (images from npz with their normalisation; text from .txt tokenised by the teacher's
//! tokenizer.json; seeded and length-bucketed orders), `teacher` (TorchScript, eval, no_grad),
//! `student_build` (a student built
//! with its starting weights: the teacher's, a file), `student` (the network interface; its kinds: layers from `estimator_wasm::schema::arch`, and
//! transformers, initialised from a BERT teacher on request), `objective` (the distillation loss:
//! logits or embeddings), `precision` (what a precision means to libtorch, and which ones
//! train), `batches`, `loop_state` (the loop's position and running sums), `metrics`
//! (`metrics.jsonl`), `optim`, `schedule`, `prune`, `checkpoint` (the checkpoint format), `eval`,
//! `similarity` (Spearman of embedding cosines), `shrink`, `latency`, `rundir` (the output
//! folder), `durable` (atomic writes), `fingerprint` (the input files a resume checks), `teacher_cache`
//! (the teacher's train-set outputs on disk, for a resume or other runs),
//! `interrupt` (Ctrl-C: the stop flag, and what it does in each phase of the run), `phase_times`
//! (where the wall time went, for the report), `progress`,
//! `error`; `plan_command` is `distill plan`, `compare` is `distill compare` (finished runs side
//! by side: a table and a page).
pub mod allocator;
pub mod amp;
pub mod backward;
pub mod batches;
pub mod channels_last;
pub mod checkpoint;
pub mod chunked_loss;
pub mod compare;
pub mod config;
pub mod data;
pub mod dist;
pub mod durable;
pub mod error;
pub mod eval;
pub mod export;
pub mod fingerprint;
pub mod hf;
pub mod hidden_step;
pub mod interrupt;
pub mod latency;
pub mod load;
pub mod loop_state;
pub mod memory_plan;
pub mod metrics;
pub mod objective;
pub mod optim;
pub mod overrides;
pub mod phase_times;
pub mod plan_command;
pub mod precision;
pub mod preflight;
pub mod progress;
pub mod prune;
pub mod prune_schedule;
pub mod report;
pub mod report_html;
pub mod run;
pub mod rundir;
pub mod schedule;
pub mod shim;
pub mod shrink;
pub mod similarity;
pub mod step;
pub mod student;
pub mod student_build;
pub mod students;
pub mod summary;
pub mod teacher;
pub mod teacher_cache;
pub mod teacher_module;
#[cfg(test)]
mod test_rng;
pub mod train_io;
pub mod trainer;
pub mod utilisation;
pub mod vocab_check;

pub use error::{DistillError, Result};
pub use run::{resume, run, TrainOptions};
