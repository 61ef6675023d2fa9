//! One student of a run, from its first step (or its newest checkpoint) to its exports and its
//! section of the report: the KD student, then optionally the alpha = 0 baseline.
//!
//! Files, under the run folder and a phase prefix (`""` or `"baseline/"`): `metrics.jsonl`,
//! `checkpoints/`, `student.safetensors`, `student.pt`, and `student-report.json`, whose presence
//! marks the phase as finished (a resumed run skips it). Structured pruning exports the shrunk
//! student there (with its `student.toml`) and the masked dense one under `dense/`.
use std::io::Write;
use std::path::{Path, PathBuf};

use estimator_wasm::schema::arch;
use estimator_wasm::schema::{Config, PruneMethod};
use tch::{nn::VarStore, Device, Tensor};

use crate::checkpoint;
use crate::durable::create_dir_all;
use crate::error::{DistillError, Result};
use crate::export::{file_bytes, save_student};
use crate::latency::{measure, Latency};
use crate::metrics::MetricsLog;
use crate::progress::Progress;
use crate::prune::{LayerSparsity, Pruner};
use crate::report::{PruneReport, ShrunkReport, StudentReport};
use crate::rundir::{write_atomic, RunDir};
use crate::shrink::{shrink, zero_dead_inputs};
use crate::student::Student;
use crate::trainer::{Checkpoints, RunEnd, TrainInputs, TrainOutcome, Trainer};

/// Where a phase writes and how it may stop early.
pub struct PhaseOutputs<'a> {
    pub rundir: &'a RunDir,
    /// `""` for the KD student, `"baseline/"` for the alpha = 0 one.
    pub prefix: &'a str,
    pub stop: &'static std::sync::atomic::AtomicBool,
    pub stop_after: Option<u64>,
}

impl PhaseOutputs<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.rundir.path(&format!("{}{name}", self.prefix))
    }
}

/// Trains (or resumes, or reloads when finished) one student and exports it.
///
/// # Errors
/// [`DistillError::Interrupted`] when stopped early (a checkpoint is written); training,
/// export and I/O errors otherwise.
pub fn run_phase(
    inputs: &TrainInputs,
    cfg_path: &Path,
    out: &PhaseOutputs,
    progress: &Progress,
    name: &str,
) -> Result<StudentReport> {
    let done = out.path("student-report.json");
    if done.is_file() {
        let text = std::fs::read_to_string(&done).map_err(|e| DistillError::io(&done, e))?;
        return serde_json::from_str(&text).map_err(|e| DistillError::Usage(format!("{}: {e}", done.display())));
    }
    create_dir_all(&out.path("")).map_err(|e| DistillError::io(&out.path(""), e))?;
    let (vs, student) = build_student(inputs.spec, cfg_path, inputs.device)?;
    let mut trainer = Trainer::new(inputs, vs, student)?;
    if let Some(note) = trainer.batches.note() {
        progress.line(format!("{name}: {note}"));
    }
    let checkpoints = Checkpoints { dir: out.path("checkpoints"), stop: out.stop, stop_after: out.stop_after };
    let metrics_path = out.path("metrics.jsonl");
    let mut metrics = match checkpoint::resume_newest(&checkpoints.dir, |c| trainer.restore(c))? {
        Some(resumed) => {
            if let Some(line) = resumed.skipped_line(name) {
                progress.warn(line);
            }
            progress.line(format!("{name}: resuming from {} (step {})", resumed.used.display(), trainer.state.step));
            let (log, kept) = MetricsLog::resume(&metrics_path, trainer.state.metrics_lines)?;
            if kept < trainer.state.metrics_lines {
                progress.warn(format!(
                    "warning: {name}: {} holds {kept} whole line(s) of the {} up to step {} (cut or removed since); those lines are lost, the rest is appended",
                    metrics_path.display(),
                    trainer.state.metrics_lines,
                    trainer.state.step
                ));
                trainer.state.metrics_lines = kept;
            }
            log
        }
        None => {
            // a phase that ran before (its log or checkpoint folder is there) starts over: say so
            if metrics_path.exists() || checkpoints.dir.exists() {
                progress.warn(format!(
                    "warning: {name}: no checkpoint in {}; starting from step 0",
                    checkpoints.dir.display()
                ));
            }
            MetricsLog::create(&metrics_path)?
        }
    };
    check_stop_after(out.stop_after, trainer.state.step, name)?;
    let outcome = match trainer.run(progress, &mut metrics, name, Some(&checkpoints))? {
        RunEnd::Finished(outcome) => outcome,
        RunEnd::Stopped { step } => return Err(DistillError::Interrupted { step }),
    };
    let report = export(inputs, trainer, &outcome, out)?;
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

/// Writes the student's files and measures what the report says about them.
fn export(inputs: &TrainInputs, trainer: Trainer, outcome: &TrainOutcome, out: &PhaseOutputs) -> Result<StudentReport> {
    let spec = inputs.spec;
    let example = inputs.norm.apply(&inputs.test.x.narrow(0, 0, 1));
    let Trainer { vs, student, pruner, .. } = trainer;
    check_finite(&vs)?;
    let structured = pruner.as_ref().filter(|p| p.spec.method == PruneMethod::Structured);
    if let Some(p) = structured {
        zero_dead_inputs(&vs, &student, &p.kept_indices());
    }
    let dense_dir = if structured.is_some() { out.path("dense/") } else { out.path("") };
    create_dir_all(&dense_dir).map_err(|e| DistillError::io(&dense_dir, e))?;
    let (dense_st, dense_ts) = (dense_dir.join("student.safetensors"), dense_dir.join("student.pt"));
    save_student(spec, &vs, &student, &example, &dense_st, &dense_ts)?;
    let named: Vec<(String, Tensor)> = vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
    let dense_latency = cpu_latency(spec, &dense_st)?;

    let prune = match &pruner {
        Some(p) => {
            let shrunk = match structured {
                Some(p) => Some(export_shrunk(inputs, &vs, &student, p, out)?),
                None => None,
            };
            Some(prune_report(p, &named, &dense_st, shrunk, dense_latency))
        }
        None => None,
    };
    let (st, ts) = (out.path("student.safetensors"), out.path("student.pt"));
    let (params, latency) = match prune.as_ref().and_then(|p| p.shrunk.as_ref()) {
        Some(s) => (s.params, cpu_latency(&shrunk_spec(spec, s), &st)?),
        None => (student.params(), dense_latency),
    };
    Ok(StudentReport {
        alpha: spec.kd.alpha,
        temperature: spec.kd.temperature,
        params,
        test_accuracy: outcome.test_accuracy,
        agreement: outcome.agreement,
        final_loss: outcome.loss,
        final_kd: outcome.kd,
        final_ce: outcome.ce,
        steps: outcome.steps,
        batch_size: crate::trainer::batch_size(spec) as u64,
        samples_per_s: outcome.samples_per_s,
        train_seconds: outcome.train_seconds,
        safetensors_bytes: file_bytes(&st),
        torchscript_bytes: file_bytes(&ts),
        precision: name_of(&spec.train.precision),
        teacher_precision: name_of(&spec.teacher.precision),
        checkpointing_segments: outcome.segments,
        skipped_steps: outcome.skipped_steps,
        final_loss_scale: outcome.final_scale,
        samples_dropped_per_epoch: outcome.dropped_per_epoch,
        latency,
        prune,
    })
}

/// Refuses to export a student with a NaN/inf parameter or buffer (BatchNorm running
/// statistics included), naming the first such tensor in name order.
///
/// # Errors
/// [`DistillError::NonFinite`] with the tensor's name and how many of its values are not finite.
pub fn check_finite(vs: &VarStore) -> Result<()> {
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, t) in vars {
        let count = t.isfinite().logical_not().sum(tch::Kind::Int64).int64_value(&[]);
        if count > 0 {
            return Err(DistillError::NonFinite { name, count, numel: t.numel() as i64 });
        }
    }
    Ok(())
}

/// Shrinks a structured-pruned student, checks it against the masked one on the test set, and
/// exports it with its cfg.
fn export_shrunk(
    inputs: &TrainInputs,
    vs: &VarStore,
    student: &Student,
    pruner: &Pruner,
    out: &PhaseOutputs,
) -> Result<ShrunkReport> {
    let shrunk = shrink(inputs.spec, vs, student, &pruner.kept_indices(), inputs.device)?;
    let batch = inputs.spec.train.eval_batch_size as usize;
    let max_abs_diff = tch::no_grad(|| {
        inputs
            .test
            .chunks(batch)
            .map(|(x, _)| {
                let x = inputs.norm.apply(&x);
                (shrunk.student.forward(&x, false) - student.forward(&x, false)).abs().max().double_value(&[])
            })
            .fold(0.0, f64::max)
    });
    let (st, ts) = (out.path("student.safetensors"), out.path("student.pt"));
    let example = inputs.norm.apply(&inputs.test.x.narrow(0, 0, 1));
    save_student(&shrunk.spec, &shrunk.vs, &shrunk.student, &example, &st, &ts)?;
    let toml = shrunk.spec.to_toml_string();
    write_atomic(&out.path("student.toml"), |f| f.write_all(toml.as_bytes()))?;
    Ok(ShrunkReport {
        channels: shrunk.spec.student.channels.clone(),
        hidden: shrunk.spec.student.hidden.clone(),
        params: shrunk.student.params(),
        safetensors_bytes: file_bytes(&st),
        torchscript_bytes: file_bytes(&ts),
        max_abs_diff,
    })
}

fn prune_report(
    p: &Pruner,
    named: &[(String, Tensor)],
    dense_file: &Path,
    shrunk: Option<ShrunkReport>,
    dense_latency: Latency,
) -> PruneReport {
    let layers: Vec<LayerSparsity> = p.sparsity(named);
    let (dense_w, nonzero_w): (u64, u64) = layers.iter().fold((0, 0), |(d, z), l| (d + l.dense, z + l.nonzero));
    let dense_params: u64 = named.iter().map(|(_, t)| t.numel() as u64).sum();
    let nonzero_params: u64 = named.iter().map(|(_, t)| t.count_nonzero(None::<i64>).int64_value(&[]) as u64).sum();
    PruneReport {
        method: name_of(&p.spec.method),
        scope: name_of(&p.spec.effective_scope()),
        target_sparsity: p.spec.sparsity,
        schedule: p.schedule,
        weight_sparsity: 1.0 - nonzero_w as f64 / dense_w.max(1) as f64,
        layers,
        dense_params,
        nonzero_params,
        dense_file_bytes: file_bytes(dense_file),
        gzip_file_bytes: gzip_bytes(dense_file),
        csr_bytes: csr_bytes(named),
        shrunk,
        dense_latency,
    }
}

/// Bytes of a CSR encoding: conv/linear weights as [rows, cols] with fp32 values, int32 column
/// indices and int32 row pointers; every other tensor dense fp32.
fn csr_bytes(named: &[(String, Tensor)]) -> u64 {
    named
        .iter()
        .map(|(name, t)| {
            if name.ends_with(".weight") && t.dim() >= 2 {
                let rows = t.size()[0] as u64;
                let nnz = t.count_nonzero(None::<i64>).int64_value(&[]) as u64;
                8 * nnz + 4 * (rows + 1)
            } else {
                4 * t.numel() as u64
            }
        })
        .sum()
}

fn gzip_bytes(path: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = enc.write_all(&bytes);
    enc.finish().map(|v| v.len() as u64).unwrap_or(0)
}

/// Latency of the student of `spec` loaded from `file` onto the CPU.
fn cpu_latency(spec: &Config, file: &Path) -> Result<Latency> {
    let mut vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), spec)?;
    vs.load(file).map_err(|e| DistillError::Torch(format!("{}: {e}", file.display())))?;
    Ok(measure(&student, &spec.data.input_shape))
}

fn shrunk_spec(spec: &Config, s: &ShrunkReport) -> Config {
    let mut narrow = spec.clone();
    narrow.student.channels = s.channels.clone();
    narrow.student.hidden = s.hidden.clone();
    debug_assert!(arch::layers(&narrow.student, &narrow.data).is_ok());
    narrow
}

/// The cfg.toml spelling of an enum value (`"bf16"`, `"structured"`, `"global"`).
fn name_of<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}
