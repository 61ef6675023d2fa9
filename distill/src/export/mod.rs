//! Exporting a trained student and measuring the exports: safetensors (for reuse in PyTorch or
//! Rust) and TorchScript (for `torch.jit.load`), both written through a temp name, a flush and a
//! rename (`durable`); then their sizes, CPU latency (when asked: `--latency`) and, when pruned,
//! sparsity and encodings, as the student's section of the report ([`export`]).
//!
//! Structured pruning exports the shrunk student (with its `student.toml`) into the student's
//! folder and the masked dense one under `dense/`. A student with a Hugging Face equivalent is
//! also written as a model folder, `hf/` ([`crate::export::student_folder`]).
//!
//! * `student.safetensors`: every variable under its cfg.toml layer id, e.g. `conv1.weight`,
//!   `conv1_bn.running_mean`, `head.bias`; the same names as a PyTorch module with those
//!   attribute names, so `model.load_state_dict(safetensors.torch.load_file(...), strict=False)`
//!   fills it.
//! * `student.pt`: the eval-mode forward traced into TorchScript on the first test sample. It
//!   takes the model input's tensors ([`ModelInput::tensors`], named by [`ModelInput::names`],
//!   so keyword calls work): images and vectors as `input`, normalised floats [B, ...input_shape]
//!   (see `data.scale/mean/std` in report.json), returning logits [B, classes]; text as
//!   `(input_ids, attention_mask)`, both int64 [B, S] for any B and S up
//!   to `input_shape[0]` (the transformer's forward reads no size, so the trace is not tied to
//!   the traced sample's), returning the embedding [B, classes]. Weights are baked in as
//!   constants, so Python can run it but not fine-tune it.
//!
//! Both are written from a CPU copy of the student ([`cpu_copy`]), so they load on a CPU-only
//! machine (`torch.jit.load` without `map_location`) whatever device trained it.

pub mod bert_student;
pub mod gpt2_student;
pub mod hf_tensors;
pub mod latency;
pub mod llama_student;
pub mod section;
pub mod student_folder;

use std::io::Write;
use std::path::Path;

use estimator_wasm::schema::{Config, KdDivergence, KdObjective, PruneMethod};
use tch::{nn::VarStore, Device, Tensor};

use crate::export::latency::{large_batch, measure, Latency, NOT_MEASURED};
use crate::export::section::{PruneReport, ShrunkReport, StudentReport};
use crate::export::student_folder::write_student_folder;
use crate::host::durable::{create_dir_all, write_atomic, write_atomic_keeping_extension};
use crate::host::error::{DistillError, Result};
use crate::inputs::data::{Dataset, ModelInput};
use crate::prune::shrink::{shrink, zero_dead_inputs};
use crate::prune::{LayerSparsity, Pruner};
use crate::student::Student;
use crate::train::trainer::{TrainInputs, TrainOutcome, Trained};

/// Writes the student of `spec` (variables in `vs`, on any device) to `safetensors` and, traced
/// in eval mode on the model input `example`, to `torchscript`; both from a CPU copy.
///
/// # Errors
/// [`DistillError::Torch`] when libtorch cannot copy, trace or write; I/O errors of the rename.
pub fn save_student(
    spec: &Config,
    vs: &VarStore,
    student: &Student,
    example: &ModelInput,
    safetensors: &Path,
    torchscript: &Path,
) -> Result<()> {
    let (mut cpu, student) = cpu_copy(spec, vs, student)?;
    save_safetensors(&cpu, safetensors)?;
    save_torchscript(&student, &mut cpu, &example.to_device(Device::Cpu), torchscript)
}

/// A copy of `student` (built from `spec`, variables in `vs`) on the CPU: every variable
/// (running statistics included) and every structured-pruning unit mask. The originals are
/// untouched, whatever their device.
///
/// # Errors
/// [`DistillError::Torch`] when `vs` lacks a variable of `spec`'s student.
pub fn cpu_copy(spec: &Config, vs: &VarStore, student: &Student) -> Result<(VarStore, Student)> {
    let mut cpu = VarStore::new(Device::Cpu);
    let mut copy = Student::new(&cpu.root(), spec)?;
    cpu.copy(vs)?;
    if let (Some(copy), Some(student)) = (copy.layered_mut(), student.layered()) {
        copy.unit_masks =
            student.unit_masks.iter().map(|m| m.as_ref().map(|t| t.to_device(Device::Cpu).copy())).collect();
    }
    Ok((cpu, copy))
}

/// Writes `vs` to `path` (a `.safetensors` file).
fn save_safetensors(vs: &VarStore, path: &Path) -> Result<()> {
    write_atomic_keeping_extension(path, |tmp| {
        vs.save(tmp).map_err(|e| DistillError::Torch(format!("writing {}: {e}", path.display())))
    })
}

/// Traces `student` in eval mode on `example` (its inputs named as [`ModelInput::names`]) and
/// writes TorchScript to `path`, once; the tensors traced in are the student's, so it must be on
/// the CPU ([`cpu_copy`]). Freezes `vs` (tracing cannot capture tensors that require grad).
fn save_torchscript(student: &Student, vs: &mut VarStore, example: &ModelInput, path: &Path) -> Result<()> {
    vs.freeze();
    let module = crate::torch::shim::trace_named(&example.tensors(), &example.names(), |inputs| {
        vec![student.forward(&ModelInput::from_tensors(inputs), false)]
    })?;
    write_atomic_keeping_extension(path, |tmp| module.save(tmp))
}

/// The model input of the first test sample, to trace the student on.
fn first_sample(inputs: &TrainInputs) -> ModelInput {
    inputs.test.chunks(1).next().expect("a test set holds a sample").input
}

/// Size of a file in bytes (0 when it cannot be read).
pub fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Writes the files of a `trained` student into its folder `dir` and measures what the report
/// says about them (sizes, sparsity, the shrunk student; its CPU latency when `latency` asks,
/// `--latency`), with the training's `outcome`.
///
/// # Errors
/// [`DistillError::NonFinite`] for a student with a NaN/inf tensor (nothing is written); libtorch
/// and I/O errors of the writers.
pub fn export(
    inputs: &TrainInputs,
    trained: Trained,
    outcome: &TrainOutcome,
    dir: &Path,
    latency: bool,
) -> Result<StudentReport> {
    let (settings, spec) = (inputs.settings, inputs.settings.resolved_spec());
    let example = first_sample(inputs);
    let Trained { vs, student, pruner } = trained;
    check_finite(&vs)?;
    let structured = pruner.as_ref().filter(|p| p.spec.method == PruneMethod::Structured);
    if let Some(p) = structured {
        zero_dead_inputs(&vs, &student, &p.kept_indices());
    }
    let dense_dir = if structured.is_some() { dir.join("dense/") } else { dir.join("") };
    create_dir_all(&dense_dir).map_err(|e| DistillError::io(&dense_dir, e))?;
    let (dense_st, dense_ts) = (dense_dir.join("student.safetensors"), dense_dir.join("student.pt"));
    save_student(spec, &vs, &student, &example, &dense_st, &dense_ts)?;
    let named = crate::student::trainable(&vs);
    let dense_latency = cpu_latency(spec, &dense_st, inputs.test, latency)?;

    let (st, ts) = (dir.join("student.safetensors"), dir.join("student.pt"));
    let mut exported = spec.clone();
    let (prune, params, latency) = match &pruner {
        Some(p) => {
            let (shrunk, params, latency) = match structured {
                Some(p) => {
                    let (report, narrow) = export_shrunk(inputs, &vs, &student, p, dir)?;
                    let latency = cpu_latency(&narrow, &st, inputs.test, latency)?;
                    exported = narrow;
                    (Some(report.clone()), report.params, latency)
                }
                None => (None, student.params(), dense_latency),
            };
            (Some(prune_report(p, &named, &dense_st, shrunk, dense_latency)), params, latency)
        }
        None => (None, student.params(), dense_latency),
    };
    let hf = write_student_folder(&exported, dir, settings.tokenizer())?;
    let kd = settings.kd();
    let logits = kd.objective == KdObjective::Logits;
    Ok(StudentReport {
        alpha: kd.alpha,
        // the embedding objectives have no temperature: reporting the default would mislead
        temperature: logits.then_some(kd.temperature),
        divergence: logits.then(|| kd.soft_divergence().name().to_string()),
        beta: (logits && kd.soft_divergence() == KdDivergence::Jsd).then(|| kd.jsd_beta()),
        params,
        test_accuracy: outcome.test_accuracy,
        agreement: outcome.agreement,
        objective: kd.objective.name().to_string(),
        agreement_metric: inputs.objective.agreement(),
        spearman: outcome.spearman,
        test_perplexity: outcome.perplexity,
        final_losses: outcome.losses,
        steps: outcome.steps,
        batch_size: settings.train().batch_size as u64,
        samples_per_s: outcome.samples_per_s,
        train_seconds: outcome.train_seconds,
        safetensors_bytes: file_bytes(&st),
        torchscript_bytes: file_bytes(&ts),
        precision: settings.train().precision.name().to_string(),
        teacher_precision: settings.teacher().precision.name().to_string(),
        checkpointing_segments: outcome.segments,
        skipped_steps: outcome.skipped_steps,
        final_loss_scale: outcome.final_scale,
        samples_dropped_per_epoch: outcome.dropped_per_epoch,
        latency_not_measured: latency.is_none().then(|| NOT_MEASURED.to_string()),
        latency,
        prune,
        hf,
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
/// exports it with its cfg; returns what the report says of it and that cfg.
fn export_shrunk(
    inputs: &TrainInputs,
    vs: &VarStore,
    student: &Student,
    pruner: &Pruner,
    dir: &Path,
) -> Result<(ShrunkReport, Config)> {
    let spec = inputs.settings.resolved_spec();
    let shrunk = shrink(spec, vs, student, &pruner.kept_indices(), inputs.settings.device())?;
    let batch = inputs.settings.train().eval_batch_size;
    let max_abs_diff = tch::no_grad(|| {
        inputs
            .test
            .chunks(batch)
            .map(|b| {
                let x = &b.input;
                (shrunk.student.forward(x, false) - student.forward(x, false)).abs().max().double_value(&[])
            })
            .fold(0.0, f64::max)
    });
    let (st, ts) = (dir.join("student.safetensors"), dir.join("student.pt"));
    let example = first_sample(inputs);
    save_student(&shrunk.spec, &shrunk.vs, &shrunk.student, &example, &st, &ts)?;
    let toml = crate::config::with_absolute_files(&shrunk.spec, inputs.settings.cfg_path()).to_toml_string();
    write_atomic(&dir.join("student.toml"), |f| f.write_all(toml.as_bytes()))?;
    let report = ShrunkReport {
        channels: shrunk.spec.student.channels.clone(),
        hidden: shrunk.spec.student.hidden.clone(),
        mlp_width: shrunk.spec.student.transformer.as_ref().and_then(|t| t.mlp_width),
        params: shrunk.student.params(),
        safetensors_bytes: file_bytes(&st),
        torchscript_bytes: file_bytes(&ts),
        max_abs_diff,
    };
    Ok((report, shrunk.spec))
}

fn prune_report(
    p: &Pruner,
    named: &[(String, Tensor)],
    dense_file: &Path,
    shrunk: Option<ShrunkReport>,
    dense_latency: Option<Latency>,
) -> PruneReport {
    let layers: Vec<LayerSparsity> = p.sparsity(named);
    let (dense_w, nonzero_w): (u64, u64) = layers.iter().fold((0, 0), |(d, z), l| (d + l.dense, z + l.nonzero));
    let dense_params: u64 = named.iter().map(|(_, t)| t.numel() as u64).sum();
    let nonzero_params: u64 = named.iter().map(|(_, t)| t.count_nonzero(None::<i64>).int64_value(&[]) as u64).sum();
    PruneReport {
        method: p.spec.method.name().to_string(),
        scope: p.spec.effective_scope().name().to_string(),
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

/// Latency of the student of `spec` loaded from `file` onto the CPU, when `asked` (`--latency`);
/// `None` (nothing loaded, nothing timed) otherwise.
fn cpu_latency(spec: &Config, file: &Path, test: &Dataset, asked: bool) -> Result<Option<Latency>> {
    if !asked {
        return Ok(None);
    }
    let mut vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), spec)?;
    vs.load(file).map_err(|e| DistillError::Torch(format!("{}: {e}", file.display())))?;
    let input = |batch: i64| match test.text_stats() {
        Some(_) => test.chunks(batch as usize).next().expect("a test set holds a sample").input.to_device(Device::Cpu),
        None => student.example_input(batch),
    };
    Ok(Some(crate::host::phase_times::during(crate::host::phase_times::Phase::Latency, || {
        measure(&student, &input, large_batch(spec.train.eval_batch_size))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn cpu_copy_is_a_separate_cpu_student_computing_the_same_function() {
        let _rng = crate::torch::test_rng::lock();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace("family = \"mlp\"", "family = \"cnn\"\nchannels = [3]\nnorm = \"batch\"");
        let spec = Config::from_toml_str(&text).unwrap();
        let vs = VarStore::new(Device::Cpu);
        let mut student = Student::new(&vs.root(), &spec).unwrap();
        let layered = student.layered_mut().unwrap();
        let act = layered.block_index("conv1_act").unwrap();
        layered.unit_masks[act] = Some(Tensor::from_slice(&[1.0f32, 0.0, 1.0]).reshape([1, 3, 1, 1]));
        let (cpu, copy) = cpu_copy(&spec, &vs, &student).unwrap();

        let (src, dst) = (vs.variables(), cpu.variables());
        assert_eq!(src.len(), dst.len());
        // conv1.weight, conv1_bn (4), fc1 (2), fc1_norm (4), head (2).
        assert_eq!(src.len(), 13, "{:?}", src.keys());
        for (name, t) in &src {
            let c = &dst[name];
            assert_eq!(c.device(), Device::Cpu, "{name}");
            assert!(c.equal(t), "{name}");
            assert_ne!(c.data_ptr(), t.data_ptr(), "{name} aliases the original");
        }
        let mask = copy.layered().unwrap().unit_masks[act].as_ref().unwrap();
        assert_eq!(
            (mask.device(), Vec::<f32>::try_from(mask.flatten(0, -1)).unwrap()),
            (Device::Cpu, vec![1.0, 0.0, 1.0])
        );
        let x = Tensor::linspace(-1.0, 1.0, 2 * 64, (Kind::Float, Device::Cpu)).reshape([2, 1, 8, 8]);
        let x = ModelInput::new(x);
        let (a, b) = tch::no_grad(|| (student.forward(&x, false), copy.forward(&x, false)));
        assert!(a.equal(&b));
    }
}
