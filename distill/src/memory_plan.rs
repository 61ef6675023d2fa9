//! The memory estimator on the run's device, before training: the device's capacity, the largest
//! micro-batch that fits it (what `train.batch_size = "auto"` resolves to), and the plan at the
//! run's micro-batch with its fit warning. [`crate::config::RunConfig::resolve`] asks; the plan's
//! figures go into the report.
use std::path::Path;

use estimator_wasm::memory::render::human;
use estimator_wasm::schema::catalogue::DEFAULT_CUDA_CONTEXT;
use estimator_wasm::schema::teacher_presets::preset_layers;
use estimator_wasm::schema::{arch, Config, Target};
use estimator_wasm::{estimate, max_batch, DatasetSize, EstimateError, Gpu, Inputs, TeacherModel};
use tch::Device;

use crate::error::{DistillError, Result};
use crate::progress::Progress;

/// The cuBLAS workspace that PyTorch's default `CUBLAS_WORKSPACE_CONFIG` (`:4096:2:16:8`)
/// allocates through the caching allocator: 4096 KiB x 2 + 16 KiB x 8 = 8320 KiB, as the
/// estimator's catalogue prices cards before sm90 (`aten/src/ATen/cuda/CublasHandlePool.cpp`).
/// The run's own CUDA device is priced with it whatever its generation.
pub const CUBLAS_WORKSPACE: u64 = (4096 * 2 + 16 * 8) * 1024;

/// What only the loaded run knows: the teacher's exact parameter count (from its TorchScript
/// file) and the datasets as kept on the device.
#[derive(Debug, Clone, Copy)]
pub struct LoadedSizes {
    pub teacher_params: u64,
    pub dataset: DatasetSize,
}

/// The estimator's plan of the run on its device, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// The device's memory (CUDA total, or RAM available at the start), bytes.
    pub capacity_bytes: u64,
    /// The micro-batch the plan was made for.
    pub batch: u64,
    /// The estimator's peak: everything on the device, and the caching allocator's part, bytes.
    pub predicted_total_bytes: u64,
    pub predicted_allocated_bytes: u64,
}

/// The memory a run may fill on its device: the device's name, and the device as the estimator
/// takes it (its memory, and on CUDA the runtime's context and cuBLAS workspace).
#[derive(Debug, Clone)]
pub struct Capacity {
    /// `cuda:N` or `cpu`.
    pub name: String,
    pub gpu: Gpu,
}

/// The estimator set up for one run on one device: the cfg as the estimator prices it there
/// (`estimate.target` the device's), the loaded sizes, and the device's capacity.
pub struct MemoryPlanner {
    /// A copy of the cfg for the estimator, priced for [`Self::target`].
    priced: Config,
    inputs: Inputs,
    capacity: Capacity,
}

impl MemoryPlanner {
    /// The planner of `spec` on `device`, or `None` where the device's memory is unknown.
    pub fn on(device: Device, spec: &Config, sizes: &LoadedSizes) -> Option<MemoryPlanner> {
        let capacity = device_capacity(device)?;
        let mut priced = spec.clone();
        priced.estimate.target = if device.is_cuda() { Target::Cuda } else { Target::Cpu };
        let inputs = Inputs {
            batch: None,
            teacher: Some(counted_teacher(sizes.teacher_params, spec)),
            dataset: Some(sizes.dataset),
        };
        Some(MemoryPlanner { priced, inputs, capacity })
    }

    /// The estimator's target for this device: `cuda` on a CUDA device, else `cpu`.
    pub fn target(&self) -> Target {
        self.priced.estimate.target
    }

    /// The largest micro-batch that fits the device keeping `estimate.safety_margin` free, at
    /// most the train set.
    ///
    /// # Errors
    /// [`DistillError::Config`] naming `cfg_path` when the estimate fails or not even a batch
    /// of 1 fits.
    pub fn largest_batch(&self, cfg_path: &Path) -> Result<u64> {
        let margin = self.priced.estimate.safety_margin;
        let fit = max_batch(&self.priced, &self.inputs, &self.capacity.gpu, margin)
            .map_err(|e| DistillError::config(cfg_path, e.to_string()))?;
        let Some(b) = fit else {
            return Err(DistillError::config(
                cfg_path,
                format!(
                    "train.batch_size = \"auto\": not even a batch of 1 fits {} ({})",
                    self.capacity.name,
                    human(self.capacity.gpu.memory)
                ),
            ));
        };
        let n = self.inputs.dataset.map(|d| d.train_samples).unwrap_or(b).max(1);
        Ok(b.min(n))
    }

    /// The plan at micro-batch `batch`, or at the train set's size when that is smaller (the
    /// largest batch the run makes: [`crate::batches`] cuts batches at `min(batch, n)`); warns
    /// when an `auto` batch is the whole train set (full-batch training), and with the breakdown
    /// when the plan does not fit the device.
    ///
    /// # Errors
    /// [`DistillError::Config`] naming `cfg_path` when the estimate fails.
    pub fn plan(&self, batch: u64, auto: bool, cfg_path: &Path, progress: &Progress) -> Result<MemoryPlan> {
        let train_samples = self.inputs.dataset.map_or(0, |d| d.train_samples);
        let batch = if train_samples > 0 { batch.min(train_samples) } else { batch };
        let inputs = Inputs { batch: Some(batch), ..self.inputs.clone() };
        let plan = estimate(&self.priced, &inputs)
            .map_err(|e: EstimateError| DistillError::config(cfg_path, e.to_string()))?;
        let capacity = &self.capacity;
        if auto && plan.batch >= train_samples {
            progress.warn(format!(
                "warning: train.batch_size = \"auto\" chose the whole train set ({}) on {}: that is full-batch training; set a number for mini-batches",
                plan.batch, capacity.name
            ));
        }
        if plan.totals.total > capacity.gpu.memory {
            progress.warn(format!(
                "warning: the estimator expects this run to need {} but {} has {}; expect an out-of-memory error (lower train.batch_size, use precision = \"bf16\" or student.checkpointing)\n{}",
                human(plan.totals.total),
                capacity.name,
                human(capacity.gpu.memory),
                plan.to_table()
            ));
        }
        Ok(MemoryPlan {
            device: capacity.name.clone(),
            capacity_bytes: capacity.gpu.memory,
            batch: plan.batch,
            predicted_total_bytes: plan.totals.total,
            predicted_allocated_bytes: plan.totals.allocated,
        })
    }
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

/// The memory `distill` may fill on `device`: the CUDA device's total memory (with the CUDA
/// runtime's context, [`DEFAULT_CUDA_CONTEXT`], and cuBLAS workspace, [`CUBLAS_WORKSPACE`]), or
/// the memory the OS reports available for the CPU (no runtime outside the allocator).
pub fn device_capacity(device: Device) -> Option<Capacity> {
    let (name, memory, cuda) = match device {
        Device::Cuda(i) => {
            let (_, total) = crate::shim::cuda_mem_info(i).ok()?;
            (format!("cuda:{i}"), total, true)
        }
        _ => ("cpu".to_string(), available_ram()?, false),
    };
    let gpu = Gpu {
        // the estimator names a device in one message only, for a CPU-priced run on a GPU,
        // which a device's own target never is; `Capacity::name` is the device's name
        name: if cuda { "cuda" } else { "cpu" },
        memory,
        cuda_context: if cuda { DEFAULT_CUDA_CONTEXT } else { 0 },
        cublas_workspace: if cuda { CUBLAS_WORKSPACE } else { 0 },
        bf16: true,
        mig_of: None,
    };
    Some(Capacity { name, gpu })
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn available_ram() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planner of a small MLP over `train_samples` samples on a device of `memory` bytes.
    fn planner(train_samples: u64, memory: u64) -> MemoryPlanner {
        let text = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256]\n";
        let spec = Config::from_toml_str(text).unwrap();
        let sizes = LoadedSizes {
            teacher_params: 100_000,
            dataset: DatasetSize { train_samples, test_samples: 10, sample_bytes: 784 },
        };
        let mut planner = MemoryPlanner::on(Device::Cpu, &spec, &sizes).unwrap();
        planner.capacity.gpu.memory = memory;
        planner
    }

    #[test]
    fn a_batch_larger_than_the_train_set_is_planned_at_the_train_set() {
        let quiet = Progress::new(crate::progress::Verbosity::Quiet);
        let small = planner(100, u64::MAX);
        let asked = small.plan(1_000_000, false, Path::new("cfg.toml"), &quiet).unwrap();
        let real = small.plan(100, false, Path::new("cfg.toml"), &quiet).unwrap();
        assert_eq!(asked.batch, 100);
        assert_eq!(asked, real);
        // The same batch on a train set that holds it is priced as asked, and costs more.
        let big = planner(2_000_000, u64::MAX).plan(1_000_000, false, Path::new("cfg.toml"), &quiet).unwrap();
        assert_eq!(big.batch, 1_000_000);
        assert!(big.predicted_total_bytes > asked.predicted_total_bytes);
    }

    #[test]
    fn the_cuda_runtime_is_priced_as_the_catalogue_prices_a_card_before_sm90() {
        let t4 = estimator_wasm::gpu("T4").unwrap();
        assert_eq!(CUBLAS_WORKSPACE, t4.cublas_workspace);
        assert_eq!(DEFAULT_CUDA_CONTEXT, t4.cuda_context);
    }
}
