//! What every CLI test uses: a temp folder with the digits fixtures ([`Case`]), the `distill`
//! commands run on it, teachers scripted with the project's Python, and the metrics log.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tch::Tensor;

#[path = "../../../tests/metrics_jsonl.rs"]
mod metrics_jsonl;

pub use metrics_jsonl::metrics_without_timing;

pub const TEACHER: &str = "teacher-scripted.pt";
pub const CFG: &str = "digits-student.toml";

/// The workspace's test fixtures (`tests/fixtures`).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// A temp folder holding a copy of the digits fixtures and a cfg.toml that points at them.
pub struct Case {
    pub dir: tempfile::TempDir,
}

impl Case {
    /// Waits until a run into `out` has logged a training step in `{out}.partial/metrics.jsonl`
    /// (rank 0's, for a job; at most 120 s): a job's group has formed and its ranks are in the
    /// step loop. A fixed sleep instead killed a rank before the group formed on a loaded
    /// machine, and the other then waited out the 600 s join timeout.
    pub fn wait_for_step(&self, out: &str) {
        let metrics = self.path(&format!("{out}.partial/metrics.jsonl"));
        let started = std::time::Instant::now();
        while !std::fs::read_to_string(&metrics).is_ok_and(|t| t.contains("\"kind\":\"step\"")) {
            assert!(started.elapsed().as_secs() < 120, "no training step in {} after 120 s", metrics.display());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        for f in ["digits-train.npz", "digits-test.npz", "teacher-scripted.pt", "digits-student.toml"] {
            std::fs::copy(fixtures().join(f), dir.path().join(f)).unwrap();
        }
        Case { dir }
    }

    /// A case that also holds the language-model fixture (`lm/`: `lm-student.toml`, its Llama
    /// teacher `lm-teacher.pt`, KJV text and tokenizer).
    pub fn with_lm() -> Case {
        let case = Case::new();
        let lm = fixtures().join("lm");
        for f in ["lm-student.toml", "lm-teacher.pt", "lm-train.txt", "lm-test.txt", "tokenizer.json"] {
            std::fs::copy(lm.join(f), case.path(f)).unwrap();
        }
        case
    }

    /// A new case whose cfg.toml has `from` replaced by `to`.
    pub fn edited(from: &str, to: &str) -> Case {
        let case = Case::new();
        case.edit_config(from, to);
        case
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces `from` by `to` in the cfg.toml.
    pub fn edit_config(&self, from: &str, to: &str) {
        let cfg = self.path("digits-student.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(text.contains(from), "fixture config lacks {from:?}");
        std::fs::write(&cfg, text.replacen(from, to, 1)).unwrap();
    }

    /// `distill --teacher <teacher> --student <config> --out <out> --device cpu --quiet`, all
    /// three files in the case's folder.
    pub fn command(&self, teacher: &str, config: &str, out: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_distill"));
        c.args(["--teacher", self.path(teacher).to_str().unwrap()])
            .args(["--student", self.path(config).to_str().unwrap()])
            .args(["--out", self.path(out).to_str().unwrap(), "--device", "cpu", "--quiet"]);
        c
    }

    /// Runs distill with the case's teacher/config (overridable) and returns (code, stderr).
    pub fn run(&self, teacher: &str, config: &str) -> (i32, String) {
        let out = self.command(teacher, config, "run").output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Asserts a clean failure whose one line contains every `needle`.
    pub fn fails_with(&self, teacher: &str, config: &str, needles: &[&str]) {
        let (code, stderr) = self.run(teacher, config);
        assert_eq!(code, 2, "exit code; stderr: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "exactly one error line, got: {stderr}");
        assert!(lines[0].starts_with("error: "), "{stderr}");
        for needle in needles {
            assert!(lines[0].contains(needle), "expected {needle:?} in: {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!self.path("run").exists() && !self.path("run.partial").exists(), "no output folder may remain");
    }

    pub fn write_npz(&self, name: &str, x: &Tensor, y: &Tensor) {
        Tensor::write_npz(&[("x", x), ("y", y)], self.path(name)).unwrap();
    }

    /// `distill --resume <case>/<out> --quiet extra...`.
    pub fn resume(&self, out: &str, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["--resume", self.path(out).to_str().unwrap(), "--quiet"])
            .args(extra)
            .output()
            .unwrap()
    }

    /// (exit code, stderr) of [`Case::resume`].
    pub fn resume_run(&self, out: &str, extra: &[&str]) -> (i32, String) {
        let out = self.resume(out, extra);
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Starts a run of the case into `out` and stops it after `steps` optimiser steps: a stop
    /// that was asked for, exit 0 with one line saying so and how to continue (it was exit 130
    /// and an `error:` line, as for a failure).
    pub fn stopped_run(&self, out: &str, steps: &str) {
        let stopped = self.command(TEACHER, CFG, out).args(["--stop-after-steps", steps]).output().unwrap();
        let stderr = String::from_utf8_lossy(&stopped.stderr);
        assert_eq!(stopped.status.code(), Some(0), "{stderr}");
        let (out, partial) = (self.path(out), self.path(&format!("{out}.partial")));
        assert_eq!(
            stderr,
            format!(
                "stopped after step {steps} as --stop-after-steps asked, with a checkpoint; checkpoints kept in {}: continue with `distill --resume {}`\n",
                partial.display(),
                out.display()
            )
        );
    }
}

/// Runs `script` with the project's Python (the `.venv` that scripts/setup makes), in `dir`.
pub fn python(dir: &Path, script: &str) {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup first", py.display());
    // a file, not `-c`: torch.jit.script reads the source of the classes it compiles
    std::fs::write(dir.join("make.py"), script).unwrap();
    let out = Command::new(&py).arg("make.py").current_dir(dir).output().unwrap();
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Scripts into `dir/name` a teacher whose forward is `logits = base(x)['logits']` (the fixture
/// teacher) followed by the Python line `body`, which returns the output.
pub fn wrapped_teacher(dir: &Path, name: &str, body: &str) {
    python(
        dir,
        &format!(
            "import torch
class T(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.jit.load('teacher-scripted.pt')
    def forward(self, x):
        logits = self.base(x)['logits']
        {body}
torch.jit.script(T().eval()).save('{name}')"
        ),
    );
}

/// The digits train inputs [1437, 1, 8, 8] (uint8, 0..16) and labels.
pub fn digits_train() -> (Tensor, Tensor) {
    let arrays = Tensor::read_npz(fixtures().join("digits-train.npz")).unwrap();
    let get = |name: &str| arrays.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    (get("x"), get("y"))
}

/// Asserts that the runs in `a` and `b` logged the same lines, timing fields aside.
pub fn same_metrics(case: &Case, a: &str, b: &str) {
    let lines = |run: &str| metrics_without_timing(&case.path(run).join("metrics.jsonl"));
    assert_eq!(lines(a), lines(b));
}
