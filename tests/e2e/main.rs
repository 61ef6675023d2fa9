//! End-to-end tests on the digits fixtures (real data, real TorchScript teachers), with Python
//! cross-checks through the project's venv. Each test finishes in seconds on 2 CPU cores.
mod checkpointing;
mod compression;
mod determinism;
mod divergences;
mod embeddings;
mod explorer_folder;
mod export;
mod head_rank;
mod hf_encoders;
mod hf_readback;
mod hf_student;
mod hf_teacher;
mod hidden_states;
mod language_model;
mod optimizer;
mod padded_vocab;
mod run_report;
mod stability;
mod teachers;
mod text;
