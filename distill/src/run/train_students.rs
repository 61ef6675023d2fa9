//! The students of a run: the teacher measured once on the held-out set (its soft targets cached
//! or live), an `"auto"` micro-batch confirmed with one step, then each student (the KD student,
//! and with `--baseline` the alpha = 0 one) distilled from its first step (or its newest
//! checkpoint) through the trainer to its exports and its section of the report.
//!
//! Files, in the student's folder (the run folder, or its `baseline/`): `metrics.jsonl`,
//! `checkpoints/`, the exports (see [`crate::export`]), and `student-report.json`, whose
//! presence marks the student as finished (a resumed run skips it). Until the run finishes, its
//! folder also holds [`TEACHER_OUTPUTS`], the cached soft targets a resumed run reads back
//! (and `--teacher-cache` keeps them for other runs: [`teacher_cache`]).
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use tch::{Device, Tensor};

use crate::config::RunSettings;
use crate::export::export;
use crate::export::section::StudentReport;
use crate::host::durable::{create_dir_all, write_atomic};
use crate::host::error::{DistillError, Result};
use crate::host::interrupt::Phase;
use crate::host::phase_times::{during, Phase as Timed};
use crate::host::progress::Progress;
use crate::inputs::data::Dataset;
use crate::inputs::teacher::Teacher;
use crate::inputs::teacher_cache::{self, CacheKey, Keyless};
use crate::report::{Distilled, PaddedVocab, TeacherReport, TrainOutputs};
use crate::run::preflight::{chance_warning, collapse_problem};
use crate::student::build::build_student_from;
use crate::student::TeacherWeights;
use crate::train::checkpoint;
use crate::train::eval::{accuracy, soft_targets, teacher_pass};
use crate::train::metrics::MetricsLog;
use crate::train::objective::Agreement;
use crate::train::trainer::{Checkpoints, RunEnd, SoftTargets, TrainInputs, Trainer};

/// The datasets on the device, and the teacher's weights a student starts from.
pub struct Data<'a> {
    pub train: &'a Dataset,
    pub test: &'a Dataset,
    /// [`crate::student::build::teacher_weights`], for `student.init_from_teacher`.
    pub teacher_weights: Option<&'a TeacherWeights>,
}

/// The students of a run: the KD student, and with `--baseline` the alpha = 0 one.
pub struct Students<'a> {
    pub settings: &'a RunSettings,
    /// The KD student's loss of a batch, built once from `settings`' `[kd]`.
    pub objective: &'a dyn crate::train::objective::Objective,
    /// The run's folder (`.partial` until it finishes); the baseline goes into its `baseline/`.
    pub dir: &'a Path,
    /// Set by Ctrl-C: checkpoint after the current step and stop.
    pub stop: &'static AtomicBool,
    /// `--stop-after-steps`: checkpoint and stop when a student completes that step.
    pub stop_after: Option<u64>,
    /// `--baseline`: also train the alpha = 0 student.
    pub baseline: bool,
    pub progress: &'a Progress,
    /// What the teacher's cached outputs were computed from ([`teacher_cache`]).
    pub cache_key: CacheKey,
    /// `--teacher-cache DIR`: the folder of teacher outputs shared by runs.
    pub teacher_cache: Option<&'a Path>,
    /// Alone, or one rank of a data-parallel job.
    pub strategy: &'a crate::data_parallel::Strategy,
    /// `--sync-batch-norm`: BatchNorm over the job's global batch.
    pub sync_batch_norm: bool,
    /// A resumed job's rank above 0: rank 0's run folder, whose checkpoints it starts from.
    pub restore_from: Option<&'a Path>,
    /// `--latency`: time each exported student on the CPU.
    pub latency: bool,
}

impl Students<'_> {
    /// Measures the teacher, then distils each student into its folder.
    ///
    /// # Errors
    /// As [`run_student`]; [`DistillError::Config`] when an `"auto"` micro-batch fails its
    /// confirming step.
    pub fn distil(&self, teacher: &mut Teacher, data: &Data) -> Result<Distilled> {
        let (settings, progress) = (self.settings, self.progress);
        let (train_set, test_set) = (data.train, data.test);
        let eval_batch = settings.train().eval_batch_size;
        let objective = self.objective;
        let scored = objective.agreement().classifies();
        let bar = progress.samples("teacher", test_set.len() as u64);
        crate::host::interrupt::enter(Phase::Teacher);
        let teacher_pass =
            during(Timed::TeacherPass, || teacher_pass(teacher, test_set, objective, eval_batch, &bar, self.stop))?;
        let teacher_test = teacher_pass.predictions;
        let teacher_accuracy = test_set.labels().filter(|_| scored).map(|y| accuracy(&teacher_test, y));
        let perplexity = teacher_pass.perplexity.map(|p| format!(", test perplexity {p:.3}")).unwrap_or_default();
        let (chance_accuracy, warning) = match teacher_accuracy {
            Some(a) => {
                progress.line(format!("teacher: {}, test accuracy {a:.4}{perplexity}", teacher.params_text()));
                let (chance, warning) = chance_warning(a, test_set, settings.data().classes);
                (Some(chance), warning)
            }
            None => {
                progress.line(format!("teacher: {}", teacher.params_text()));
                (None, None)
            }
        };
        if let Some(w) = &warning {
            progress.warn(w.clone());
        }
        if objective.agreement() == Agreement::Cosine {
            collapse_problem(&teacher_test).map_or(Ok(()), |p| Err(DistillError::teacher(&teacher.path, p)))?;
        }
        if objective.agreement() == Agreement::Cosine && test_set.len() < 3 {
            progress.warn(format!(
                "warning: {} holds {} sentence(s): the Spearman of pair cosines needs 3 or more (2 pairs with spread), so report.json will have none",
                test_set.path().display(),
                test_set.len()
            ));
        }
        teacher.ensure_eval()?;
        if self.teacher_cache.is_some() && !(settings.kd().alpha > 0.0 && settings.teacher().cache_logits) {
            progress.warn(
                "--teacher-cache has no effect: this run caches no teacher outputs (kd.alpha = 0 or teacher.cache_logits = false)"
                    .into(),
            );
        }
        // hidden pairs read the teacher's hidden states, also at alpha = 0 (CE and the pairs)
        let kd_live = (settings.kd().alpha > 0.0, settings.teacher().cache_logits);
        let (soft_targets, train_outputs, train_outputs_seconds) = match kd_live {
            (false, _) if !settings.kd().hidden.is_empty() => {
                progress.line(
                    "teacher: runs on every batch for its hidden states ([[kd.hidden]]; kd.alpha = 0: no soft term)"
                        .into(),
                );
                (SoftTargets::Live(teacher), TrainOutputs::Live, None)
            }
            (false, _) => (SoftTargets::None, TrainOutputs::NoTeacher, None),
            (true, true) if !settings.kd().hidden.is_empty() => {
                progress.line("teacher: runs on every batch ([[kd.hidden]] reads its hidden states, which are not cached; teacher.cache_logits is not used)".into());
                (SoftTargets::Live(teacher), TrainOutputs::Live, None)
            }
            // a language model's logits [N, S, vocab] are far too large to keep
            (true, true) if settings.student().is_language_model() => {
                let cache = if self.teacher_cache.is_some() { "; --teacher-cache is not used" } else { "" };
                progress
                    .line(format!("teacher: runs on every batch (a language model's logits are not cached{cache})"));
                (SoftTargets::Live(teacher), TrainOutputs::Live, None)
            }
            (true, true) => {
                let start = std::time::Instant::now();
                let (outputs, how) =
                    during(Timed::TeacherPass, || self.cached_soft_targets(teacher, train_set, eval_batch))?;
                (SoftTargets::Cached(outputs), how, Some(start.elapsed().as_secs_f64()))
            }
            (true, false) => (SoftTargets::Live(teacher), TrainOutputs::Live, None),
        };
        let inputs = TrainInputs {
            settings,
            objective,
            train: train_set,
            test: test_set,
            soft_targets,
            teacher_test_preds: Some(&teacher_test),
            teacher_weights: data.teacher_weights,
            strategy: self.strategy,
            sync_batch_norm: self.sync_batch_norm,
        };
        if settings.auto_batch() {
            confirm_batch(&inputs)?;
            progress.line(format!(
                "train.batch_size = \"auto\": {} fits the device (confirmed with one step)",
                settings.train().batch_size
            ));
        }
        let outputs = |folder: &str| StudentOutputs {
            dir: self.dir.join(folder),
            source: self.restore_from.unwrap_or(self.dir).join(folder),
            stop: self.stop,
            stop_after: self.stop_after,
            latency: self.latency,
        };
        let student = run_student(&inputs, &outputs(""), progress, "student")?;

        let baseline = if self.baseline {
            let labels_only = settings.labels_only();
            // alpha = 0 asks for the objective of labels alone
            let objective = crate::train::objective::from_spec(labels_only.kd());
            let inputs = TrainInputs {
                settings: &labels_only,
                objective: objective.as_ref(),
                soft_targets: SoftTargets::None,
                ..inputs
            };
            Some(run_student(&inputs, &outputs("baseline/"), progress, "alpha=0")?)
        } else {
            None
        };
        // the finished run needs the cache no more (it is the size of the train set's outputs)
        let _ = std::fs::remove_file(self.dir.join(TEACHER_OUTPUTS));
        let teacher = TeacherReport {
            path: teacher.path.display().to_string(),
            params: teacher.params,
            params_source: Some(teacher.params_source),
            file_bytes: teacher.file_bytes,
            test_accuracy: teacher_accuracy,
            chance_accuracy,
            warning,
            train_outputs: Some(train_outputs),
            train_outputs_seconds,
            test_perplexity: teacher_pass.perplexity,
            padded_vocab: teacher.padded_vocab.map(|(logits, shared)| PaddedVocab { logits, shared }),
        };
        Ok(Distilled { teacher, student, baseline })
    }

    /// The teacher's outputs on the train set [N, ...] in row order, on the run's device. Computed
    /// once and written to the run folder's [`TEACHER_OUTPUTS`], so that a resumed run, whose
    /// teacher and data its fingerprint proves unchanged, reads them back instead of running the
    /// teacher again (the same soft targets, bit for bit, and none of the time: 4-8 minutes for
    /// the text demo's sentences on 2 cores); removed when the run finishes. With
    /// `--teacher-cache DIR` they are also looked up in, and written to, `DIR` under the run's
    /// [`CacheKey`], so that other runs on the same teacher and data skip the teacher's pass.
    ///
    /// # Errors
    /// The teacher's errors; [`DistillError::Io`] naming the file when it cannot be written.
    /// Returns the outputs and how they were had ([`TrainOutputs::Read`] or
    /// [`TrainOutputs::Computed`]).
    fn cached_soft_targets(
        &self,
        teacher: &Teacher,
        train: &Dataset,
        eval_batch: usize,
    ) -> Result<(Tensor, TrainOutputs)> {
        let (progress, n, key) = (self.progress, train.len(), &self.cache_key);
        let path = self.dir.join(TEACHER_OUTPUTS);
        let device = self.settings.device();
        let shared = self.teacher_cache.map(|dir| key.file_in(dir));
        let in_run = teacher_cache::read(&path, key, n, Keyless::Trusted);
        let in_shared = || shared.as_ref().and_then(|p| teacher_cache::read(p, key, n, Keyless::Refused));
        let found = match in_run {
            Some(outputs) => Some((outputs, &path)),
            None => in_shared().map(|outputs| (outputs, shared.as_ref().expect("read from it"))),
        };
        // a data-parallel job's other ranks keep no run folder of use (rank 0 writes the run)
        let in_run_folder = self.strategy.writes_run_folder();
        if let Some((outputs, from)) = found {
            progress.line(format!("teacher: outputs of {n} train samples read from {}", from.display()));
            // each place that should hold them and does not gets them
            if *from != path && in_run_folder {
                teacher_cache::write(&path, key, &outputs)?;
            }
            if let Some(shared) = shared.as_ref().filter(|p| *p != from && in_shared().is_none()) {
                self.keep_shared(shared, &outputs);
            }
            return Ok((outputs.to_device(device), TrainOutputs::Read));
        }
        let start = std::time::Instant::now();
        let bar = progress.samples("cache", n as u64);
        let outputs = soft_targets(teacher, train, eval_batch, &bar, self.stop)?;
        let s = start.elapsed().as_secs_f64();
        progress.line(format!(
            "teacher: outputs of {n} train samples cached in {s:.1} s ({:.0} samples/s)",
            n as f64 / s.max(1e-9)
        ));
        let on_cpu = outputs.to_device(Device::Cpu);
        if in_run_folder {
            teacher_cache::write(&path, key, &on_cpu)?;
        }
        if let Some(shared) = &shared {
            self.keep_shared(shared, &on_cpu);
        }
        Ok((outputs, TrainOutputs::Computed))
    }

    /// Writes the outputs to the `--teacher-cache` file `shared`; the cache is optional, so a
    /// failure is a warning and the run goes on.
    fn keep_shared(&self, shared: &Path, outputs: &Tensor) {
        match teacher_cache::write(shared, &self.cache_key, outputs) {
            Ok(()) => self.progress.line(format!("teacher: outputs kept for other runs in {}", shared.display())),
            Err(e) => self.progress.warn(format!("--teacher-cache: {e}; the run goes on without keeping them")),
        }
    }
}

/// The run folder's copy of the teacher's outputs on the train set, while the run is unfinished.
pub const TEACHER_OUTPUTS: &str = "teacher-outputs.safetensors";

/// `--baseline` trains the student on labels alone: refused (before any output) where the run's
/// objective, whose predictions are `agreement`'s, scores no classes or the `train` set has no
/// labels.
///
/// # Errors
/// [`DistillError::Usage`] saying to leave `--baseline` out.
pub fn check_baseline(baseline: bool, agreement: Agreement, train: &Dataset) -> Result<()> {
    let scored = agreement.classifies();
    if baseline && !(scored && train.labels().is_some()) {
        return Err(DistillError::Usage(
            "--baseline trains the student on labels alone, but this run has none to train on (unlabelled data or an embedding objective): leave --baseline out".into(),
        ));
    }
    Ok(())
}

/// One forward and backward at the resolved batch on a scratch student, so that an
/// over-optimistic `"auto"` fails now, with advice, rather than mid-run.
fn confirm_batch(inputs: &TrainInputs) -> Result<()> {
    let settings = inputs.settings;
    let cfg_path = settings.cfg_path();
    let (vs, student, _) = build_student_from(settings.resolved_spec(), inputs.init(), cfg_path, settings.device())?;
    let trainer = Trainer::new(inputs, vs, student)?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trainer.probe()));
    let b = settings.train().batch_size;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(DistillError::config(
            cfg_path,
            format!("train.batch_size = \"auto\" chose {b}, but one step failed: {e}; set a smaller number"),
        )),
        Err(panic) => {
            let why = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            let why = crate::host::error::first_line(why.unwrap_or("a panic"));
            // only an allocation failure is blamed on the batch size
            let oom = ["out of memory", "can't allocate memory", "alloc"].iter().any(|s| why.contains(s));
            Err(DistillError::config(
                cfg_path,
                if oom {
                    format!("train.batch_size = \"auto\" chose {b}, but one step ran out of memory ({why}); set a smaller number or raise estimate.safety_margin")
                } else {
                    format!("train.batch_size = \"auto\" chose {b}, but one step failed ({why}); set train.batch_size to a number")
                },
            ))
        }
    }
}

/// Where a student's run writes and how it may stop early.
pub struct StudentOutputs {
    /// The student's folder: the run's `.partial` folder, or its `baseline/` folder.
    pub dir: PathBuf,
    /// Where a resumed student reads its checkpoints and finished report: `dir`, or for a
    /// data-parallel job's rank above 0 the same folder of rank 0's run.
    pub source: PathBuf,
    /// Set by Ctrl-C: checkpoint after the current step and stop.
    pub stop: &'static AtomicBool,
    /// `--stop-after-steps`: checkpoint and stop when this student completes that step.
    pub stop_after: Option<u64>,
    /// `--latency`: time the exported student on the CPU ([`crate::export::export`]).
    pub latency: bool,
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
    let done = out.source.join("student-report.json");
    if done.is_file() {
        let text = std::fs::read_to_string(&done).map_err(|e| DistillError::io(&done, e))?;
        return serde_json::from_str(&text).map_err(|e| DistillError::Usage(format!("{}: {e}", done.display())));
    }
    create_dir_all(&out.path("")).map_err(|e| DistillError::io(&out.path(""), e))?;
    let settings = inputs.settings;
    let (vs, student, _) =
        build_student_from(settings.resolved_spec(), inputs.init(), settings.cfg_path(), settings.device())?;
    let mut trainer = Trainer::new(inputs, vs, student)?;
    if let Some(note) = trainer.batches().note() {
        progress.line(format!("{name}: {note}"));
    }
    let checkpoints = Checkpoints {
        dir: out.path("checkpoints"),
        stop: out.stop,
        stop_after: out.stop_after,
        write: inputs.strategy.writes_run_folder(),
    };
    let metrics_path = out.path("metrics.jsonl");
    let restore_dir = out.source.join("checkpoints");
    let mut metrics = match checkpoint::resume_newest(&restore_dir, |c| trainer.restore(c))? {
        // a job's rank above 0: rank 0's checkpoint, and a log of its own
        Some(_) if out.source != out.dir => MetricsLog::create(&metrics_path)?,
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
    crate::host::interrupt::enter(Phase::Training);
    let outcome = match during(Timed::Training, || trainer.run(progress, &mut metrics, name, Some(&checkpoints)))? {
        RunEnd::Finished(outcome) => outcome,
        RunEnd::Stopped { step } => return Err(DistillError::stopped(step, out.stop_after)),
    };
    crate::host::interrupt::enter(Phase::Finishing);
    during(Timed::Export, || {
        let report = export(inputs, trainer.into_trained(), &outcome, &out.dir, out.latency)?;
        let json = serde_json::to_vec_pretty(&report).expect("report serialises");
        // into this rank's own folder (`done` may be rank 0's)
        write_atomic(&out.path("student-report.json"), |f| f.write_all(&json))?;
        Ok(report)
    })
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
