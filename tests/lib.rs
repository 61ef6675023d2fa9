//! Shared helpers of the end-to-end tests: fixture paths, a quiet training run in a temp
//! folder, the metrics log of a run, and the project's Python (the `.venv` that scripts/setup
//! makes) for cross-checks.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use distill::report::Report;
use distill::student::Student;
use distill::TrainOptions;
use estimator_wasm::Config;
use tch::{nn::VarStore, Device};

mod metrics_jsonl;

pub use metrics_jsonl::{metrics_lines, metrics_without_timing};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A cfg.toml in `dir` equal to the digits fixture config with `edits` (from, to) applied; its
/// data paths point back at the fixtures.
pub fn digits_config(dir: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(fixture("digits-student.toml")).unwrap();
    text = text
        .replace("\"digits-train.npz\"", &format!("{:?}", fixture("digits-train.npz")))
        .replace("\"digits-test.npz\"", &format!("{:?}", fixture("digits-test.npz")));
    write_edited(dir, text, edits)
}

/// A cfg.toml in `dir` equal to the text fixture's (`text/text-student.toml`: a 1-layer sentence
/// encoder over WordNet lines, the tiny BERT teacher `text/text-teacher.pt`) with `edits` (from,
/// to) applied; its data and tokenizer paths point back at the fixtures.
pub fn text_config(dir: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(fixture("text/text-student.toml")).unwrap();
    for name in ["text-train.txt", "text-test.txt", "tokenizer.json"] {
        text = text.replace(&format!("\"{name}\""), &format!("{:?}", fixture("text").join(name)));
    }
    write_edited(dir, text, edits)
}

/// A cfg.toml in `dir` equal to the language-model fixture's (`lm/lm-student.toml`: a 1-layer
/// decoder over KJV text, the tiny Llama teacher `lm/lm-teacher.pt`) with `edits` (from, to)
/// applied; its data and tokenizer paths point back at the fixtures.
pub fn lm_config(dir: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(fixture("lm/lm-student.toml")).unwrap();
    for name in ["lm-train.txt", "lm-test.txt", "tokenizer.json"] {
        text = text.replace(&format!("\"{name}\""), &format!("{:?}", fixture("lm").join(name)));
    }
    write_edited(dir, text, edits)
}

/// `text` with `edits` (from, to) applied, each once and each required, as `dir/student.toml`.
fn write_edited(dir: &Path, mut text: String, edits: &[(&str, &str)]) -> PathBuf {
    for (from, to) in edits {
        assert!(text.contains(from), "fixture config lacks {from:?}");
        text = text.replacen(from, to, 1);
    }
    let path = dir.join("student.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Serialises the tests that use libtorch's global random generator (weight init, dropout and
/// `randn` all draw from it, and the test harness runs tests on parallel threads).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The student of `spec` with the weights of a `student.safetensors` export, built the way a
/// user who loads the file builds it (the random initialisation it overwrites is drawn under
/// [`serial`], so that it cannot shift a concurrent run's draws).
pub fn load_student(spec: &Config, file: &Path) -> Student {
    let _guard = serial();
    let mut vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), spec).unwrap();
    vs.load(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    student
}

/// The options of a quiet CPU run of `config` into `out`, to adjust before `distill::run`.
pub fn options(teacher: &Path, config: &Path, out: &Path) -> TrainOptions {
    TrainOptions { out: Some(out.to_path_buf()), ..TrainOptions::quiet_cpu(teacher, config) }
}

/// Runs `opts` under [`serial`].
pub fn run(opts: &TrainOptions) -> distill::Result<Report> {
    let _guard = serial();
    distill::run(opts, &distill::data_parallel::Launch::single())
}

/// Trains quietly on CPU into `dir/run` and returns the report.
pub fn train(teacher: &Path, config: &Path, dir: &Path, baseline: bool) -> distill::Result<Report> {
    run(&TrainOptions { overwrite: true, baseline, ..options(teacher, config, &dir.join("run")) })
}

/// Starts a quiet CPU run into `out` that checkpoints and stops after `steps` optimiser steps,
/// and returns its error (an interrupt, to resume with `distill::resume`).
pub fn run_stopped(teacher: &Path, config: &Path, out: &Path, steps: u64) -> distill::DistillError {
    run(&TrainOptions { stop_after: Some(steps), ..options(teacher, config, out) }).unwrap_err()
}

/// Runs `script` with the project's Python and returns its stdout; panics with its stderr.
pub fn python(script: &str, args: &[&str]) -> String {
    let py = root().join(".venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup first", py.display());
    let out = Command::new(&py).arg("-c").arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
