//! Distilling one student of a run, from its first step (or its newest checkpoint) through the
//! trainer to its exports and its section of the report: the KD student, then optionally the
//! alpha = 0 baseline.
//!
//! Files, in the student's folder (the run folder, or its `baseline/`): `metrics.jsonl`,
//! `checkpoints/`, the exports (see [`crate::export`]), and `student-report.json`, whose
//! presence marks the student as finished (a resumed run skips it).
use std::io::Write;
use std::path::{Path, PathBuf};

use estimator_wasm::schema::Config;
use tch::{nn::VarStore, Device};

use crate::checkpoint;
use crate::durable::{create_dir_all, write_atomic};
use crate::error::{DistillError, Result};
use crate::export::export;
use crate::metrics::MetricsLog;
use crate::progress::Progress;
use crate::report::StudentReport;
use crate::student::Student;
use crate::trainer::{Checkpoints, RunEnd, TrainInputs, Trainer};

/// Where a student's run writes and how it may stop early.
pub struct StudentOutputs {
    /// The student's folder: the run's `.partial` folder, or its `baseline/` folder.
    pub dir: PathBuf,
    /// Set by Ctrl-C: checkpoint after the current step and stop.
    pub stop: &'static std::sync::atomic::AtomicBool,
    /// `--stop-after-steps`: checkpoint and stop when this student completes that step.
    pub stop_after: Option<u64>,
}

impl StudentOutputs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Trains (or resumes, or reloads when finished) one student and exports it; `name` labels its
/// progress lines (`student`, `alpha=0`).
///
/// # Errors
/// [`DistillError::Interrupted`] when stopped early (a checkpoint is written); training,
/// export and I/O errors otherwise.
pub fn run_student(
    inputs: &TrainInputs,
    out: &StudentOutputs,
    progress: &Progress,
    name: &str,
) -> Result<StudentReport> {
    let done = out.path("student-report.json");
    if done.is_file() {
        let text = std::fs::read_to_string(&done).map_err(|e| DistillError::io(&done, e))?;
        return serde_json::from_str(&text).map_err(|e| DistillError::Usage(format!("{}: {e}", done.display())));
    }
    create_dir_all(&out.path("")).map_err(|e| DistillError::io(&out.path(""), e))?;
    let settings = inputs.settings;
    let (vs, student) = build_student(settings.spec(), settings.cfg_path(), settings.device())?;
    let mut trainer = Trainer::new(inputs, vs, student)?;
    if let Some(note) = trainer.batches().note() {
        progress.line(format!("{name}: {note}"));
    }
    let checkpoints = Checkpoints { dir: out.path("checkpoints"), stop: out.stop, stop_after: out.stop_after };
    let metrics_path = out.path("metrics.jsonl");
    let mut metrics = match checkpoint::resume_newest(&checkpoints.dir, |c| trainer.restore(c))? {
        Some(resumed) => {
            if let Some(line) = resumed.skipped_line(name) {
                progress.warn(line);
            }
            progress.line(format!("{name}: resuming from {} (step {})", resumed.used.display(), trainer.step()));
            let (log, kept) = MetricsLog::resume(&metrics_path, trainer.metrics_lines())?;
            if kept < trainer.metrics_lines() {
                progress.warn(format!(
                    "warning: {name}: {} holds {kept} whole line(s) of the {} up to step {} (cut or removed since); those lines are lost, the rest is appended",
                    metrics_path.display(),
                    trainer.metrics_lines(),
                    trainer.step()
                ));
                trainer.keep_metrics_lines(kept);
            }
            log
        }
        None => {
            // a student that ran before (its log or checkpoint folder is there) starts over: say so
            if metrics_path.exists() || checkpoints.dir.exists() {
                progress.warn(format!(
                    "warning: {name}: no checkpoint in {}; starting from step 0",
                    checkpoints.dir.display()
                ));
            }
            MetricsLog::create(&metrics_path)?
        }
    };
    check_stop_after(out.stop_after, trainer.step(), name)?;
    let outcome = match trainer.run(progress, &mut metrics, name, Some(&checkpoints))? {
        RunEnd::Finished(outcome) => outcome,
        RunEnd::Stopped { step } => return Err(DistillError::Interrupted { step }),
    };
    let report = export(inputs, trainer.into_trained(), &outcome, &out.dir)?;
    let json = serde_json::to_vec_pretty(&report).expect("report serialises");
    write_atomic(&done, |f| f.write_all(&json))?;
    Ok(report)
}

/// `--stop-after-steps N` stops a student when it completes step N: refused when this student
/// already stands at step N or later (a resumed run), where it would never stop.
fn check_stop_after(stop_after: Option<u64>, step: u64, name: &str) -> Result<()> {
    match stop_after {
        Some(n) if n <= step => Err(DistillError::Usage(format!(
            "--stop-after-steps {n}: {name} already stands at step {step}; pass a larger N or leave it out"
        ))),
        _ => Ok(()),
    }
}

/// Seeds libtorch, builds the student and applies `student.init` when set.
pub fn build_student(spec: &Config, cfg_path: &Path, device: Device) -> Result<(VarStore, Student)> {
    tch::manual_seed(spec.train.seed as i64);
    let mut vs = VarStore::new(device);
    let student = Student::new(&vs.root(), spec)?;
    if let Some(init) = &spec.student.init {
        let path = cfg_path.parent().unwrap_or(Path::new(".")).join(init);
        vs.load(&path).map_err(|e| {
            DistillError::config(
                cfg_path,
                format!("student.init = {}: {}", path.display(), crate::error::first_line(&e.to_string())),
            )
        })?;
    }
    Ok((vs, student))
}
