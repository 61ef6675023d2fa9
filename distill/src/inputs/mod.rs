//! Stage 2 of a run (after `config`): what a run reads besides the cfg. `data` (the data sets,
//! their orders and batch widths), `hf` (a Hugging Face teacher folder: config, safetensors, the
//! Llama decoder), `teacher` and `teacher_module` (a teacher loaded and run in eval mode),
//! `teacher_cache` (its train-set outputs on disk), `vocab_check` (the teacher's vocabulary
//! against the tokenizer's), `fingerprint` (the input files a resume must find unchanged).

pub mod data;
pub mod fingerprint;
pub mod hf;
pub mod teacher;
pub mod teacher_cache;
pub mod teacher_module;
pub mod vocab_check;
