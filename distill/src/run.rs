//! `distill --teacher t.pt --student cfg.toml`: config -> data -> teacher -> preflight -> the
//! memory plan that resolves the run (`RunSettings`) -> each student (`student_run`) ->
//! report.json, with every input checked before any output exists, and `--resume` continuing an
//! interrupted run from its newest checkpoint.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use estimator_wasm::schema::{BatchSize, Config, Precision};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::config::{RunConfig, RunSettings};
use crate::data::Dataset;
use crate::durable::write_atomic;
use crate::error::{DistillError, Result};
use crate::eval::{accuracy, teacher_outputs};
use crate::fingerprint::{self, Fingerprint};
use crate::memory_plan::{memory_plan, PlanInputs};
use crate::preflight::{
    chance_warning, check_eval_mode, check_not_identical, check_same_range, check_teacher_shape, parse_device,
};
use crate::progress::{Progress, Verbosity};
use crate::report::{DataReport, Report, StudentReport, TeacherReport};
use crate::rundir::RunDir;
use crate::student_run::{build_student, run_student, StudentOutputs};
use crate::teacher::Teacher;
use crate::trainer::{SoftTargets, TrainInputs, Trainer};

/// Set by the binary's Ctrl-C handler: the trainer checkpoints and stops after the current step.
pub static STOP: AtomicBool = AtomicBool::new(false);

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
}

fn quiet() -> Verbosity {
    Verbosity::Quiet
}

/// `run.json` of an unfinished run: what `--resume` needs to continue it.
#[derive(Serialize, Deserialize)]
struct Resumable {
    options: TrainOptions,
    /// The cfg.toml's text when the run started (a resumed run uses this, not the file).
    config: String,
    /// The teacher and data files' contents when the run started (`--resume` refuses changes).
    #[serde(default)]
    inputs: Vec<Fingerprint>,
}

/// Runs a whole distillation and returns its report (also written to `<out>/report.json`).
///
/// # Errors
/// Any [`DistillError`]. Before the first checkpoint nothing is left behind; after it, the
/// `.partial` folder stays and the error says how to resume.
pub fn run(opts: &TrainOptions) -> Result<Report> {
    let cfg = RunConfig::load(&opts.student, &opts.sets)?;
    let out = opts.out.clone().unwrap_or_else(|| default_out(&cfg.path));
    execute(opts, cfg, &out, None)
}

/// Continues the interrupted run whose `--out` was `out`; `teacher`, when given, is where the
/// run's teacher file is now (it was moved or copied elsewhere since the run started).
///
/// # Errors
/// [`DistillError::Usage`] when `out` has no interrupted run; then as [`run`].
pub fn resume(out: &Path, teacher: Option<&Path>, verbosity: Verbosity, stop_after: Option<u64>) -> Result<Report> {
    let rundir = RunDir::reopen(out)?;
    let out = &rundir.out.clone();
    let saved = rundir.path("run.json");
    let text = std::fs::read_to_string(&saved).map_err(|e| DistillError::io(&saved, e))?;
    let saved: Resumable =
        serde_json::from_str(&text).map_err(|e| DistillError::Usage(format!("{}: {e}", saved.display())))?;
    let mut opts = saved.options;
    if let Some(teacher) = teacher {
        opts.teacher = teacher.to_path_buf();
    }
    opts.verbosity = verbosity;
    opts.stop_after = stop_after;
    let spec = Config::from_toml_str(&saved.config).map_err(|e| DistillError::config(&opts.student, e.to_string()))?;
    let cfg = RunConfig::from_spec(&opts.student, spec)?;
    fingerprint::check_unchanged(out, &saved.inputs, &input_files(&opts, &cfg))?;
    execute(&opts, cfg, out, Some(rundir))
}

fn execute(opts: &TrainOptions, cfg: RunConfig, out: &Path, reopened: Option<RunDir>) -> Result<Report> {
    let start = Instant::now();
    let device = parse_device(&opts.device)?;
    check_trainable(&cfg.spec, &cfg.path)?;
    let progress = Progress::new(opts.verbosity);
    let spec = &cfg.spec;

    let train_set = Dataset::load(&cfg.train, &spec.data)?;
    let (train_set, test_set) = match &cfg.test {
        Some(path) => {
            let test_set = Dataset::load(path, &spec.data)?;
            check_same_range(&train_set, &test_set)?;
            (train_set, test_set)
        }
        None => train_set.split(spec.data.holdout.unwrap_or(0.1), spec.train.seed)?,
    };
    let (train_set, test_set) = (train_set.to_device(device), test_set.to_device(device));
    let mut teacher = Teacher::load(&opts.teacher, spec.teacher.output.clone(), spec.teacher.precision, device)?;

    // Preflight on a probe batch: teacher output shape, finite, in eval mode; student != teacher.
    let probe = Tensor::arange(train_set.len().min(8) as i64, (tch::Kind::Int64, device));
    let probe = train_set.batch(&probe);
    let probe_logits = teacher.output(&probe.input)?;
    check_teacher_shape(&teacher, &probe_logits, probe.input.rows(), spec.data.classes)?;
    teacher.check_finite(&probe_logits, &probe.input, &probe.rows, train_set.path())?;
    check_eval_mode(&teacher, &probe.input, &probe_logits)?;
    let (_, student) = build_student(spec, &cfg.path, device)?;
    check_not_identical(&teacher, &probe_logits, &student, &probe.input)?;
    drop(student);

    // The memory plan on this device resolves the run (`batch_size = "auto"` becomes a number).
    let auto = spec.train.batch_size == BatchSize::Auto;
    let planned = PlanInputs { cfg: &cfg, teacher: &teacher, train: &train_set, test: &test_set, device };
    let (planned, memory) = memory_plan(&planned, &progress)?;
    let settings = RunSettings::new(&cfg.path, planned, device)?;
    let spec = settings.spec();

    let rundir = match reopened {
        Some(r) => r,
        None => RunDir::create(out, opts.overwrite)?,
    };
    let files = input_files(opts, &cfg);
    let files: Vec<(&str, &Path)> = files.iter().map(|(role, path)| (*role, path.as_path())).collect();
    let inputs = fingerprint::all(&files)?;
    let resumable = Resumable { options: absolute(opts, out), config: spec.to_toml_string(), inputs };
    let json = serde_json::to_vec_pretty(&resumable).expect("run.json serialises");
    write_atomic(&rundir.path("run.json"), |f| std::io::Write::write_all(f, &json))?;
    rundir.write("config.toml", spec.to_toml_string().as_bytes())?;
    let data = Data { train: &train_set, test: &test_set };
    let students = Students { opts, settings: &settings, rundir: &rundir, progress: &progress, auto_batch: auto };
    match students.distil(&mut teacher, &data) {
        Ok(distilled) => {
            // every fact of the report is known now: it is built once, here
            let report = Report {
                distill_version: env!("CARGO_PKG_VERSION"),
                config: cfg.path.display().to_string(),
                device: format!("{device:?}").to_lowercase(),
                data: data_report(&data, spec),
                compression_ratio: distilled.teacher.params as f64 / distilled.student.params.max(1) as f64,
                kd_gain_points: distilled
                    .baseline
                    .as_ref()
                    .map(|b| 100.0 * (distilled.student.test_accuracy - b.test_accuracy)),
                teacher: distilled.teacher,
                student: distilled.student,
                baseline: distilled.baseline,
                memory: memory.map(|m| m.measured(device)),
                wall_seconds: start.elapsed().as_secs_f64(),
                output_dir: rundir.out.display().to_string(),
            };
            let json = serde_json::to_string_pretty(&report).expect("report serialises");
            rundir.write("report.json", json.as_bytes())?;
            // run.json goes only once the run has its name: a failed rename stays resumable
            let kept = rundir.has_checkpoints();
            let partial = rundir.partial.clone();
            let done = rundir.commit().map_err(|e| if kept { e.resumable(out, &partial) } else { e })?;
            let _ = std::fs::remove_file(done.join("run.json"));
            Ok(report)
        }
        Err(e) if rundir.has_checkpoints() => Err(e.resumable(out, &rundir.partial)),
        Err(e) => Err(e),
    }
}

/// The datasets on the device.
struct Data<'a> {
    train: &'a Dataset,
    test: &'a Dataset,
}

/// The students of a run: the KD student, and with `--baseline` the alpha = 0 one.
struct Students<'a> {
    opts: &'a TrainOptions,
    settings: &'a RunSettings,
    rundir: &'a RunDir,
    progress: &'a Progress,
    /// `train.batch_size = "auto"` was resolved by the memory plan: confirm it with one step.
    auto_batch: bool,
}

/// What the students' runs found: the teacher as measured, and each student's report.
struct Distilled {
    teacher: TeacherReport,
    student: StudentReport,
    baseline: Option<StudentReport>,
}

impl Students<'_> {
    /// Measures the teacher, then distils each student into its folder.
    fn distil(&self, teacher: &mut Teacher, data: &Data) -> Result<Distilled> {
        let (settings, progress) = (self.settings, self.progress);
        let (spec, train_set, test_set) = (settings.spec(), data.train, data.test);
        let eval_batch = spec.train.eval_batch_size as usize;
        let objective = crate::objective::from_spec(&spec.kd);
        let teacher_test = objective.predictions(&teacher_outputs(teacher, test_set, eval_batch)?);
        let teacher_accuracy = test_set.labels().map_or(f64::NAN, |y| accuracy(&teacher_test, y));
        progress.line(format!("teacher: {} parameters, test accuracy {:.4}", teacher.params, teacher_accuracy));
        let (chance_accuracy, warning) = chance_warning(teacher_accuracy, test_set, spec.data.classes);
        if let Some(w) = &warning {
            progress.warn(w.clone());
        }
        teacher.ensure_eval()?;
        let targets = match (spec.kd.alpha > 0.0, spec.teacher.cache_logits) {
            (false, _) => SoftTargets::None,
            (true, true) => SoftTargets::Cached(teacher_outputs(teacher, train_set, eval_batch)?),
            (true, false) => SoftTargets::Live(teacher),
        };
        let inputs = TrainInputs {
            settings,
            train: train_set,
            test: test_set,
            targets,
            teacher_test_preds: Some(&teacher_test),
        };
        if self.auto_batch {
            confirm_batch(&inputs)?;
            progress.line(format!(
                "train.batch_size = \"auto\": {} fits the device (confirmed with one step)",
                settings.batch_size()
            ));
        }
        let outputs =
            |prefix| StudentOutputs { dir: self.rundir.path(prefix), stop: &STOP, stop_after: self.opts.stop_after };
        let student = run_student(&inputs, &outputs(""), progress, "student")?;

        let baseline = if self.opts.baseline {
            let labels_only = settings.labels_only();
            let inputs = TrainInputs { settings: &labels_only, targets: SoftTargets::None, ..inputs };
            Some(run_student(&inputs, &outputs("baseline/"), progress, "alpha=0")?)
        } else {
            None
        };
        let teacher = TeacherReport {
            path: teacher.path.display().to_string(),
            params: teacher.params,
            file_bytes: teacher.file_bytes,
            test_accuracy: teacher_accuracy,
            chance_accuracy,
            warning,
        };
        Ok(Distilled { teacher, student, baseline })
    }
}

/// The data section of the report: the datasets as trained on and their normalisation.
fn data_report(data: &Data, spec: &Config) -> DataReport {
    DataReport {
        train_samples: data.train.len() as u64,
        test_samples: data.test.len() as u64,
        input_shape: spec.data.input_shape.clone(),
        classes: spec.data.classes,
        scale: spec.data.scale,
        mean: spec.data.mean.clone(),
        std: spec.data.std.clone(),
    }
}

/// One forward and backward at the resolved batch on a scratch student, so that an
/// over-optimistic `"auto"` fails now, with advice, rather than mid-run.
fn confirm_batch(inputs: &TrainInputs) -> Result<()> {
    let settings = inputs.settings;
    let cfg_path = settings.cfg_path();
    let (vs, student) = build_student(settings.spec(), cfg_path, settings.device())?;
    let trainer = Trainer::new(inputs, vs, student)?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trainer.probe()));
    let b = settings.batch_size();
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(DistillError::config(
            cfg_path,
            format!("train.batch_size = \"auto\" chose {b}, but one step failed: {e}; set a smaller number"),
        )),
        Err(panic) => {
            let why = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            let why = crate::error::first_line(why.unwrap_or("a panic"));
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

/// Refuses what the estimator can plan but the trainer cannot train, before any work.
fn check_trainable(spec: &Config, path: &Path) -> Result<()> {
    for (key, precision) in [("train.precision", spec.train.precision), ("teacher.precision", spec.teacher.precision)] {
        if matches!(precision, Precision::PureBf16 | Precision::Bf16Master) {
            return Err(DistillError::config(
                path,
                format!(
                    "{key}: distill runs \"fp32\", \"fp16\" or \"bf16\" (the other recipes are for `distill plan`)"
                ),
            ));
        }
    }
    Ok(())
}

/// The files whose content a resumed run must find unchanged, by role.
fn input_files(opts: &TrainOptions, cfg: &RunConfig) -> Vec<(&'static str, PathBuf)> {
    let mut files = vec![("teacher", opts.teacher.clone()), ("data.train", cfg.train.clone())];
    files.extend(cfg.test.clone().map(|test| ("data.test", test)));
    // read when a student starts from step 0: the baseline of a resumed run, or a run resumed
    // before its first checkpoint (same folder rule as `student_run::build_student`)
    let folder = cfg.path.parent().unwrap_or(Path::new("."));
    files.extend(cfg.spec.student.init.as_ref().map(|init| ("student.init", folder.join(init))));
    files
}

/// Options with absolute paths, so `--resume` works from any folder.
fn absolute(opts: &TrainOptions, out: &Path) -> TrainOptions {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    TrainOptions { teacher: abs(&opts.teacher), student: abs(&opts.student), out: Some(abs(out)), ..opts.clone() }
}

/// `runs/<cfg stem>-<UTC time>`.
fn default_out(cfg: &Path) -> PathBuf {
    let stem = cfg.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
    PathBuf::from("runs").join(format!("{stem}-{now}"))
}
