//! `distill --teacher t.pt --student cfg.toml`: config -> data -> teacher -> preflight ->
//! students (`phase`) -> report, with every input checked before any output exists, and
//! `--resume` continuing an interrupted run from its newest checkpoint.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use estimator_wasm::memory::render::human;
use estimator_wasm::schema::{BatchSize, Config, Precision, Target};
use estimator_wasm::{DatasetSize as EstDataset, Inputs};
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::config::RunConfig;
use crate::data::{Dataset, Normalizer};
use crate::error::{DistillError, Result};
use crate::eval::{accuracy, teacher_logits};
use crate::fingerprint::{self, Fingerprint};
use crate::phase::{build_student, run_phase, PhaseOutputs};
use crate::plan::{counted_teacher, device_capacity, resolve};
use crate::preflight::{
    chance_warning, check_eval_mode, check_finite_logits, check_not_identical, check_same_range, check_teacher_shape,
    parse_device,
};
use crate::progress::{Progress, Verbosity};
use crate::report::{DataReport, MemoryReport, Report, TeacherReport};
use crate::rundir::{write_atomic, RunDir};
use crate::teacher::Teacher;
use crate::trainer::{batch_size, SoftTargets, TrainInputs, Trainer};

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

fn execute(opts: &TrainOptions, mut cfg: RunConfig, out: &Path, reopened: Option<RunDir>) -> Result<Report> {
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
    let norm = Normalizer::new(&spec.data, device);
    let mut teacher = Teacher::load(&opts.teacher, spec.teacher.output.clone(), spec.teacher.precision, device)?;

    // Preflight on a probe batch: teacher output shape, finite, in eval mode; student != teacher.
    let probe = Tensor::arange(train_set.len().min(8) as i64, (tch::Kind::Int64, device));
    let probe_x = norm.apply(&train_set.batch(&probe).0);
    let probe_logits = teacher.logits(&probe_x)?;
    check_teacher_shape(&teacher, &probe_logits, probe.size()[0], spec.data.classes)?;
    check_finite_logits(&teacher, &probe_logits, &probe_x, &train_set.file_rows(&probe), &train_set.path)?;
    check_eval_mode(&teacher, &probe_x, &probe_logits)?;
    let (_, student) = build_student(spec, &cfg.path, device)?;
    check_not_identical(&teacher, &probe_logits, &student, &probe_x)?;
    drop(student);

    // The memory plan on this device; `batch_size = "auto"` is resolved here.
    let auto = spec.train.batch_size == BatchSize::Auto;
    let memory = memory_plan(&mut cfg, &teacher, &train_set, &test_set, device, &progress)?;
    let spec = &cfg.spec;

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
    let data = Data { train: &train_set, test: &test_set, norm: &norm };
    let result = train_all(opts, &cfg, &rundir, device, &mut teacher, &data, &progress, auto).map(|report| Report {
        memory: memory.clone().map(|m| m.measured(device)),
        wall_seconds: start.elapsed().as_secs_f64(),
        ..report
    });
    match result {
        Ok(report) => {
            let json = serde_json::to_string_pretty(&report).expect("report serialises");
            rundir.write("report.json", json.as_bytes())?;
            // run.json goes only once the run has its name: a failed rename stays resumable
            let kept = rundir.has_checkpoints();
            let done = rundir.commit().map_err(|e| if kept { e.resumable(out) } else { e })?;
            let _ = std::fs::remove_file(done.join("run.json"));
            Ok(report)
        }
        Err(e) if rundir.has_checkpoints() => Err(e.resumable(out)),
        Err(e) => Err(e),
    }
}

/// The datasets on the device and their normalisation.
struct Data<'a> {
    train: &'a Dataset,
    test: &'a Dataset,
    norm: &'a Normalizer,
}

#[allow(clippy::too_many_arguments)]
fn train_all(
    opts: &TrainOptions,
    cfg: &RunConfig,
    rundir: &RunDir,
    device: tch::Device,
    teacher: &mut Teacher,
    data: &Data,
    progress: &Progress,
    auto_batch: bool,
) -> Result<Report> {
    let (spec, train_set, test_set, norm) = (&cfg.spec, data.train, data.test, data.norm);
    let eval_batch = spec.train.eval_batch_size as usize;
    let teacher_test = teacher_logits(teacher, test_set, norm, eval_batch)?.argmax(-1, false);
    let teacher_accuracy = accuracy(&teacher_test, &test_set.y);
    progress.line(format!("teacher: {} parameters, test accuracy {:.4}", teacher.params, teacher_accuracy));
    let (chance_accuracy, warning) = chance_warning(teacher_accuracy, test_set, norm, spec.data.classes);
    if let Some(w) = &warning {
        progress.warn(w.clone());
    }
    teacher.ensure_eval()?;
    let targets = match (spec.kd.alpha > 0.0, spec.teacher.cache_logits) {
        (false, _) => SoftTargets::None,
        (true, true) => SoftTargets::Cached(teacher_logits(teacher, train_set, norm, eval_batch)?),
        (true, false) => SoftTargets::Live(teacher),
    };
    let inputs = TrainInputs {
        spec,
        train: train_set,
        test: test_set,
        norm,
        targets,
        teacher_test_preds: Some(&teacher_test),
        device,
    };
    if auto_batch {
        confirm_batch(&inputs, &cfg.path)?;
        progress.line(format!(
            "train.batch_size = \"auto\": {} fits the device (confirmed with one step)",
            batch_size(spec)
        ));
    }
    let phase = |prefix| PhaseOutputs { rundir, prefix, stop: &STOP, stop_after: opts.stop_after };
    let student = run_phase(&inputs, &cfg.path, &phase(""), progress, "student")?;

    let baseline = if opts.baseline {
        let mut base_spec = spec.clone();
        base_spec.kd.alpha = 0.0;
        let inputs = TrainInputs { spec: &base_spec, targets: SoftTargets::None, ..inputs };
        Some(run_phase(&inputs, &cfg.path, &phase("baseline/"), progress, "alpha=0")?)
    } else {
        None
    };

    Ok(Report {
        distill_version: env!("CARGO_PKG_VERSION"),
        config: cfg.path.display().to_string(),
        device: format!("{device:?}").to_lowercase(),
        data: DataReport {
            train_samples: train_set.len() as u64,
            test_samples: test_set.len() as u64,
            input_shape: spec.data.input_shape.clone(),
            classes: spec.data.classes,
            scale: spec.data.scale,
            mean: spec.data.mean.clone(),
            std: spec.data.std.clone(),
        },
        teacher: TeacherReport {
            path: teacher.path.display().to_string(),
            params: teacher.params,
            file_bytes: teacher.file_bytes,
            test_accuracy: teacher_accuracy,
            chance_accuracy,
            warning,
        },
        compression_ratio: teacher.params as f64 / student.params.max(1) as f64,
        kd_gain_points: baseline.as_ref().map(|b| 100.0 * (student.test_accuracy - b.test_accuracy)),
        student,
        baseline,
        memory: None,
        wall_seconds: 0.0,
        output_dir: rundir.out.display().to_string(),
    })
}

/// The estimator's plan for this run on `device` (teacher counts from its file, the datasets
/// as loaded); resolves `batch_size = "auto"` into `cfg`, and warns with the breakdown when the
/// plan does not fit.
fn memory_plan(
    cfg: &mut RunConfig,
    teacher: &Teacher,
    train: &Dataset,
    test: &Dataset,
    device: tch::Device,
    progress: &Progress,
) -> Result<Option<MemoryReport>> {
    let sample_bytes = (train.x.numel() / train.len().max(1)) as u64 * train.x.kind().elt_size_in_bytes() as u64;
    let inputs = Inputs {
        batch: None,
        teacher: Some(counted_teacher(teacher.params, &cfg.spec)),
        dataset: Some(EstDataset { train_samples: train.len() as u64, test_samples: test.len() as u64, sample_bytes }),
    };
    let target = if device.is_cuda() { Target::Cuda } else { Target::Cpu };
    let Some(capacity) = device_capacity(device) else {
        if cfg.spec.train.batch_size == BatchSize::Auto {
            return Err(DistillError::config(
                &cfg.path,
                "train.batch_size = \"auto\": the device's memory is unknown here; set a number",
            ));
        }
        return Ok(None);
    };
    let (resolved, plan) = resolve(&cfg.spec, &cfg.path, &inputs, &capacity, target)?;
    if cfg.spec.train.batch_size == BatchSize::Auto && plan.batch >= train.len() as u64 {
        progress.warn(format!(
            "warning: train.batch_size = \"auto\" chose the whole train set ({}) on {}: that is full-batch training; set a number for mini-batches",
            plan.batch, capacity.name
        ));
    }
    cfg.spec = resolved;
    if plan.totals.total > capacity.memory {
        progress.warn(format!(
            "warning: the estimator expects this run to need {} but {} has {}; expect an out-of-memory error (lower train.batch_size, use precision = \"bf16\" or student.checkpointing)\n{}",
            human(plan.totals.total),
            capacity.name,
            human(capacity.memory),
            plan.to_table()
        ));
    }
    Ok(Some(MemoryReport {
        device: capacity.name.to_string(),
        capacity_bytes: capacity.memory,
        batch: plan.batch,
        predicted_total_bytes: plan.totals.total,
        predicted_allocated_bytes: plan.totals.allocated,
        measured_peak_allocated_bytes: None,
    }))
}

/// One forward and backward at the resolved batch on a scratch student, so that an
/// over-optimistic `"auto"` fails now, with advice, rather than mid-run.
fn confirm_batch(inputs: &TrainInputs, cfg_path: &Path) -> Result<()> {
    let (vs, student) = build_student(inputs.spec, cfg_path, inputs.device)?;
    let trainer = Trainer::new(inputs, vs, student)?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trainer.probe()));
    let b = batch_size(inputs.spec);
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
    // read when a phase starts from step 0: the baseline of a resumed run, or a run resumed
    // before its first checkpoint (same folder rule as `phase::build_student`)
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
