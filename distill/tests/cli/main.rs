//! The `distill` binary end to end, by topic: bad input (exit code 2, exactly one error line
//! naming the file, key or flag and the fix, never a panic, no output folder left behind),
//! teachers that cannot teach, stopping and resuming, data-parallel jobs, `distill plan` and
//! `distill compare`.
mod bad_input;
mod common;
mod compare;
mod data_parallel;
mod hf_folder;
mod hidden;
mod job_refusals;
mod plan;
mod resume;
mod teacher;
