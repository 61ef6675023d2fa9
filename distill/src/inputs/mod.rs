//! Stage 2, the inputs: the data files, the teacher (TorchScript or a Hugging Face folder), its cached outputs, the files a resume checks.

pub mod data;
pub mod hf;
pub mod teacher;
pub mod teacher_module;
pub mod teacher_cache;
pub mod vocab_check;
pub mod fingerprint;
