//! The memory estimator on the run's device, before training: the device's capacity, the plan
//! of the run on it, `train.batch_size = "auto"` (the largest micro-batch that fits), and the fit
//! warning. What it returns becomes the run's [`crate::config::RunSettings`].
use std::path::Path;

use estimator_wasm::memory::render::human;
use estimator_wasm::schema::teacher_presets::preset_layers;
use estimator_wasm::schema::{BatchSize, Config, Target};
use estimator_wasm::{
    estimate, max_batch, schema::arch, DatasetSize as EstDataset, EstimateError, Gpu, Inputs, Plan, TeacherModel,
};
use tch::Device;

use crate::config::RunConfig;
use crate::data::Dataset;
use crate::error::{DistillError, Result};
use crate::progress::Progress;
use crate::report::MemoryReport;
use crate::teacher::Teacher;

/// What [`memory_plan`] plans for: the run's cfg and the facts only the loaded run knows.
pub struct PlanInputs<'a> {
    pub cfg: &'a RunConfig,
    pub teacher: &'a Teacher,
    /// The datasets as loaded (their sizes and bytes per sample).
    pub train: &'a Dataset,
    pub test: &'a Dataset,
    pub device: tch::Device,
}

/// The estimator's plan for this run on its device (teacher counts from its file, the datasets
/// as loaded): returns the cfg as planned (`estimate.target` set to the device, and
/// `batch_size = "auto"` replaced by the largest micro-batch that fits) with the plan's figures
/// for the report, and warns with the breakdown when the plan does not fit. Where the device's
/// memory is unknown, the cfg comes back as written, without a plan.
///
/// # Errors
/// [`DistillError::Config`] when the estimate fails or not even a batch of 1 fits.
pub fn memory_plan(run: &PlanInputs, progress: &Progress) -> Result<(Config, Option<MemoryReport>)> {
    let PlanInputs { cfg, teacher, train, test, device } = *run;
    let sample_bytes = train.sample_bytes();
    let inputs = Inputs {
        batch: None,
        teacher: Some(counted_teacher(teacher.params, &cfg.spec)),
        dataset: Some(EstDataset { train_samples: train.len() as u64, test_samples: test.len() as u64, sample_bytes }),
    };
    let target = if device.is_cuda() { Target::Cuda } else { Target::Cpu };
    let Some(capacity) = device_capacity(device) else {
        return Ok((cfg.spec.clone(), None));
    };
    let (resolved, plan) = resolve(&cfg.spec, &cfg.path, &inputs, &capacity, target)?;
    if cfg.spec.train.batch_size == BatchSize::Auto && plan.batch >= train.len() as u64 {
        progress.warn(format!(
            "warning: train.batch_size = \"auto\" chose the whole train set ({}) on {}: that is full-batch training; set a number for mini-batches",
            plan.batch, capacity.name
        ));
    }
    if plan.totals.total > capacity.memory {
        progress.warn(format!(
            "warning: the estimator expects this run to need {} but {} has {}; expect an out-of-memory error (lower train.batch_size, use precision = \"bf16\" or student.checkpointing)\n{}",
            human(plan.totals.total),
            capacity.name,
            human(capacity.memory),
            plan.to_table()
        ));
    }
    Ok((
        resolved,
        Some(MemoryReport {
            device: capacity.name.to_string(),
            capacity_bytes: capacity.memory,
            batch: plan.batch,
            predicted_total_bytes: plan.totals.total,
            predicted_allocated_bytes: plan.totals.allocated,
            measured_peak_allocated_bytes: None,
        }),
    ))
}

/// A teacher of `params` parameters, with the cfg's layer description when it has one.
pub fn counted_teacher(params: u64, spec: &Config) -> TeacherModel {
    let layers = match (&spec.teacher.preset, &spec.teacher.arch) {
        (Some(name), _) => preset_layers(name, &spec.data).ok(),
        (None, Some(a)) => arch::layers(a, &spec.data).ok(),
        _ => None,
    };
    TeacherModel { params, buffers: spec.teacher.buffers.unwrap_or(0), layers }
}

/// The memory `distill` may fill on `device`: the CUDA device's total memory, or the memory
/// the OS reports available for the CPU.
pub fn device_capacity(device: Device) -> Option<Gpu> {
    let (name, memory, target_cuda) = match device {
        Device::Cuda(i) => {
            let (_, total) = crate::shim::cuda_mem_info(i).ok()?;
            (format!("cuda:{i}"), total, true)
        }
        _ => ("cpu".to_string(), available_ram()?, false),
    };
    let template = estimator_wasm::catalogue()[0];
    Some(Gpu {
        name: Box::leak(name.into_boxed_str()),
        memory,
        cuda_context: if target_cuda { template.cuda_context } else { 0 },
        cublas_workspace: if target_cuda { template.cublas_workspace } else { 0 },
        bf16: true,
        mig_of: None,
    })
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn available_ram() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The plan of a run about to start on `capacity`, with `train.batch_size` resolved: `"auto"`
/// takes the largest micro-batch that fits (keeping `estimate.safety_margin` free), at most the
/// train set. Returns the resolved spec and the plan at its batch.
///
/// # Errors
/// [`DistillError::Config`] when the estimate fails or not even a batch of 1 fits.
fn resolve(spec: &Config, cfg_path: &Path, inputs: &Inputs, capacity: &Gpu, target: Target) -> Result<(Config, Plan)> {
    let mut spec = spec.clone();
    spec.estimate.target = target;
    let bad = |e: EstimateError| DistillError::config(cfg_path, e.to_string());
    let b = match spec.train.batch_size {
        BatchSize::Fixed(b) => b,
        BatchSize::Auto => {
            let fit = max_batch(&spec, inputs, capacity, spec.estimate.safety_margin).map_err(bad)?;
            let Some(b) = fit else {
                return Err(DistillError::config(
                    cfg_path,
                    format!(
                        "train.batch_size = \"auto\": not even a batch of 1 fits {} ({})",
                        capacity.name,
                        human(capacity.memory)
                    ),
                ));
            };
            let n = inputs.dataset.map(|d| d.train_samples).unwrap_or(b).max(1);
            b.min(n)
        }
    };
    spec.train.batch_size = BatchSize::Fixed(b);
    let plan = estimate(&spec, &Inputs { batch: Some(b), ..inputs.clone() }).map_err(bad)?;
    Ok((spec, plan))
}
