//! `distill --teacher t.pt --student cfg.toml`: config -> data -> teacher -> preflight ->
//! student -> training -> export -> report, with every input checked before any output exists.
use std::path::{Path, PathBuf};
use std::time::Instant;

use estimator_wasm::spec::Config;
use tch::{nn::VarStore, Device, Tensor};

use crate::config::RunConfig;
use crate::data::{Dataset, Normalizer};
use crate::error::{DistillError, Result};
use crate::eval::{accuracy, teacher_logits};
use crate::export::{file_bytes, save_safetensors, save_torchscript};
use crate::metrics::MetricsLog;
use crate::optim::Optimizer;
use crate::preflight::{check_not_identical, check_teacher_logits, parse_device};
use crate::progress::{Progress, Verbosity};
use crate::report::{DataReport, Report, StudentReport, TeacherReport};
use crate::rundir::RunDir;
use crate::student::Student;
use crate::teacher::Teacher;
use crate::trainer::{batch_size, train, SoftTargets, TrainInputs};

/// What the command line asks of a training run.
#[derive(Debug, Clone)]
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
    pub verbosity: Verbosity,
}

/// Runs a whole distillation and returns its report (also written to `<out>/report.json`).
///
/// # Errors
/// Any [`DistillError`]; then no output folder is left behind and an earlier one is untouched.
pub fn run(opts: &TrainOptions) -> Result<Report> {
    let start = Instant::now();
    let cfg = RunConfig::load(&opts.student)?;
    let spec = &cfg.spec;
    let device = parse_device(&opts.device)?;
    let batch = batch_size_or_error(spec, &cfg.path)?;

    let train_set = Dataset::load(&cfg.train, &spec.data)?;
    let (train_set, test_set) = match &cfg.test {
        Some(path) => (train_set, Dataset::load(path, &spec.data)?),
        None => train_set.split(spec.data.holdout.unwrap_or(0.1), spec.train.seed)?,
    };
    let (train_set, test_set) = (train_set.to_device(device), test_set.to_device(device));
    let norm = Normalizer::new(&spec.data, device);
    let mut teacher = Teacher::load(&opts.teacher, spec.teacher.output.clone(), device)?;

    // Preflight on a probe batch: teacher output shape, then student != teacher.
    let probe = Tensor::arange(train_set.len().min(8) as i64, (tch::Kind::Int64, device));
    let probe_x = norm.apply(&train_set.batch(&probe).0);
    let probe_logits = teacher.logits(&probe_x)?;
    check_teacher_logits(&teacher, &probe_logits, probe.size()[0], spec.data.classes)?;
    let (vs, student) = build_student(spec, &cfg.path, device)?;
    check_not_identical(&teacher, &probe_logits, &student, &probe_x)?;

    let out = opts.out.clone().unwrap_or_else(|| default_out(&cfg.path));
    let rundir = RunDir::create(&out, opts.overwrite)?;
    rundir.write("config.toml", spec.to_toml_string().as_bytes())?;

    let progress = Progress::new(opts.verbosity);
    let eval_batch = spec.train.eval_batch_size as usize;
    let teacher_test = teacher_logits(&teacher, &test_set, &norm, eval_batch)?.argmax(-1, false);
    let teacher_accuracy = accuracy(&teacher_test, &test_set.y);
    progress.line(format!("teacher: {} parameters, test accuracy {:.4}", teacher.params, teacher_accuracy));
    teacher.ensure_eval()?;
    let targets = match (spec.kd.alpha > 0.0, spec.teacher.cache_logits) {
        (false, _) => SoftTargets::None,
        (true, true) => SoftTargets::Cached(teacher_logits(&teacher, &train_set, &norm, eval_batch)?),
        (true, false) => SoftTargets::Live(&teacher),
    };
    let inputs = TrainInputs {
        spec,
        train: &train_set,
        test: &test_set,
        norm: &norm,
        targets,
        teacher_test_preds: Some(&teacher_test),
        device,
    };
    let student_report = fit_and_export(&inputs, vs, student, &rundir, "", &progress, "student", batch)?;

    let baseline = if opts.baseline {
        let mut base_spec = spec.clone();
        base_spec.kd.alpha = 0.0;
        let (vs, student) = build_student(&base_spec, &cfg.path, device)?;
        let inputs = TrainInputs { spec: &base_spec, targets: SoftTargets::None, ..inputs };
        std::fs::create_dir_all(rundir.path("baseline")).map_err(|e| DistillError::io(&rundir.path("baseline"), e))?;
        Some(fit_and_export(&inputs, vs, student, &rundir, "baseline/", &progress, "alpha=0", batch)?)
    } else {
        None
    };

    let report = Report {
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
        },
        compression_ratio: teacher.params as f64 / student_report.params.max(1) as f64,
        kd_gain_points: baseline.as_ref().map(|b| 100.0 * (student_report.test_accuracy - b.test_accuracy)),
        student: student_report,
        baseline,
        wall_seconds: start.elapsed().as_secs_f64(),
        output_dir: out.display().to_string(),
    };
    let json = serde_json::to_string_pretty(&report).expect("report serialises");
    rundir.write("report.json", json.as_bytes())?;
    rundir.commit()?;
    Ok(report)
}

/// Seeds libtorch, builds the student and applies `student.init` when set.
fn build_student(spec: &Config, cfg_path: &Path, device: Device) -> Result<(VarStore, Student)> {
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

/// Trains one student, writes its metrics and exports, and reports on it.
#[allow(clippy::too_many_arguments)]
fn fit_and_export(
    inputs: &TrainInputs,
    mut vs: VarStore,
    student: Student,
    rundir: &RunDir,
    prefix: &str,
    progress: &Progress,
    name: &str,
    batch: usize,
) -> Result<StudentReport> {
    let params: Vec<(String, Tensor)> = vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
    let mut opt = Optimizer::new(params, &inputs.spec.train);
    let mut metrics = MetricsLog::create(&rundir.path(&format!("{prefix}metrics.jsonl")))?;
    let outcome = train(inputs, &student, &mut opt, progress, &mut metrics, name)?;
    let safetensors = rundir.path(&format!("{prefix}student.safetensors"));
    save_safetensors(&vs, &safetensors)?;
    let example = inputs.norm.apply(&inputs.test.x.narrow(0, 0, 1));
    let torchscript = rundir.path(&format!("{prefix}student.pt"));
    save_torchscript(&student, &mut vs, &example, &torchscript)?;
    Ok(StudentReport {
        alpha: inputs.spec.kd.alpha,
        temperature: inputs.spec.kd.temperature,
        params: student.params(),
        test_accuracy: outcome.test_accuracy,
        agreement: outcome.agreement,
        final_loss: outcome.loss,
        final_kd: outcome.kd,
        final_ce: outcome.ce,
        steps: outcome.steps,
        batch_size: batch as u64,
        samples_per_s: outcome.samples_per_s,
        train_seconds: outcome.train_seconds,
        safetensors_bytes: file_bytes(&safetensors),
        torchscript_bytes: file_bytes(&torchscript),
    })
}

fn batch_size_or_error(spec: &Config, path: &Path) -> Result<usize> {
    match spec.train.batch_size {
        estimator_wasm::spec::BatchSize::Auto => {
            Err(DistillError::config(path, "train.batch_size = \"auto\" is not supported yet: set a number"))
        }
        _ => Ok(batch_size(spec)),
    }
}

/// `runs/<cfg stem>-<UTC time>`.
fn default_out(cfg: &Path) -> PathBuf {
    let stem = cfg.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
    PathBuf::from("runs").join(format!("{stem}-{now}"))
}
