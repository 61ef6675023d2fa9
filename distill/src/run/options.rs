//! What the command line asks of a training run ([`TrainOptions`], kept in `run.json` for a
//! resume), and the quiet CPU run a library caller or a test starts from.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::host::progress::Verbosity;

/// What the command line asks of a training run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainOptions {
    pub teacher: PathBuf,
    /// The cfg.toml.
    pub student: PathBuf,
    /// Output folder; `runs/<cfg stem>-<UTC time>` when `None`.
    pub out: Option<PathBuf>,
    pub overwrite: bool,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// Also train the same student with alpha = 0 into `<out>/baseline`.
    pub baseline: bool,
    /// `key.path=value` overrides of the cfg.toml (`--set`).
    #[serde(default)]
    pub sets: Vec<String>,
    #[serde(skip, default = "quiet")]
    pub verbosity: Verbosity,
    /// Checkpoint and stop after this many optimiser steps of a student (resume later).
    #[serde(skip)]
    pub stop_after: Option<u64>,
    /// `--teacher-cache DIR`: the teacher's train-set outputs shared ([`crate::inputs::teacher_cache`]).
    #[serde(default)]
    pub teacher_cache: Option<PathBuf>,
    /// `--sync-batch-norm`: a data-parallel job's BatchNorm layers normalise over the global
    /// batch ([`crate::data_parallel::sync_batch_norm`]).
    #[serde(default)]
    pub sync_batch_norm: bool,
    /// `--latency`: time the exported students on the CPU ([`crate::export::latency`]), else null
    /// `latency` and a `latency_not_measured` note; kept in `run.json` for a resume.
    #[serde(default)]
    pub latency: bool,
}

fn quiet() -> Verbosity {
    Verbosity::Quiet
}

impl TrainOptions {
    /// A quiet run on the CPU of the cfg.toml `student` distilled from `teacher` (empty: the
    /// cfg's `teacher.hf` folder) into the default `runs/<cfg stem>-<UTC time>`, with every
    /// other option off (no overwrite, baseline, overrides, stop, teacher cache, synced
    /// BatchNorm or latency): a library caller sets what differs,
    /// `TrainOptions { out: Some(dir), ..TrainOptions::quiet_cpu(teacher, cfg) }`.
    pub fn quiet_cpu(teacher: impl Into<PathBuf>, student: impl Into<PathBuf>) -> TrainOptions {
        TrainOptions {
            teacher: teacher.into(),
            student: student.into(),
            out: None,
            overwrite: false,
            device: "cpu".into(),
            baseline: false,
            sets: Vec::new(),
            verbosity: Verbosity::Quiet,
            stop_after: None,
            teacher_cache: None,
            sync_batch_norm: false,
            latency: false,
        }
    }
}
