//! The memory estimator on the run's device, before training: the device's capacity, the largest
//! micro-batch that fits it (what `train.batch_size = "auto"` resolves to), and the plan at the
//! run's micro-batch with its fit warning ([`resolve`]: the run as resolved on its device); the
//! plan's figures go into the report, with the FLOPs of a training sample for its utilisation
//! (for text, each batch at its own padded width: [`MemoryPlanner::flops_per_sample`]).
use std::collections::BTreeMap;
use std::path::Path;

use estimator_wasm::memory::at_width;
use estimator_wasm::memory::render::human;
use estimator_wasm::schema::catalogue::cuda_device;
use estimator_wasm::schema::{BatchSize, Config, Target};
use estimator_wasm::{
    estimate, max_batch, search_replayed, DatasetSize, EstimateError, Gpu, Inputs, MemoryModel, Plan, StepFlops,
    TeacherModel, TextWidths,
};
use tch::Device;

use crate::config::{RunSettings, WrittenCfg};
use crate::host::error::{DistillError, Result};
use crate::host::progress::Progress;
use crate::inputs::data::widths::{frontier, pass_widths, step_widths, worst_shares, MAX_EPOCHS};
use crate::train::sample_flops::FlopsPerSample;

/// What only the loaded run knows: the teacher's exact parameter count (from its TorchScript
/// file), the datasets as kept on the device, and for text its sentences' lengths.
#[derive(Debug, Clone)]
pub struct LoadedSizes {
    pub teacher_params: u64,
    /// The teacher's layers when the run knows them beyond the cfg (a Hugging Face folder's
    /// `config.json`, [`crate::inputs::hf::plan::layers`]); `None`: the cfg's preset or arch, if any.
    pub teacher_layers: Option<Vec<estimator_wasm::schema::arch::Layer>>,
    pub dataset: DatasetSize,
    /// Text padded per batch (not a language model's full windows); `None` otherwise.
    pub text: Option<TextLengths>,
}

/// The token counts of a text run's sentences (special tokens included, after truncation).
#[derive(Debug, Clone, Default)]
pub struct TextLengths {
    /// Every training sentence's, in file order.
    pub train: Vec<usize>,
    /// Every held-out sentence's.
    pub test: Vec<usize>,
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
    /// What the run needs of the device, bytes, as `"auto"` and the fit warning count it
    /// ([`Plan::fit_total`]): on CUDA the CUDA context and NCCL's buffers plus the allocator's
    /// replayed peak reserved bytes; elsewhere the fast bound's total (the peak moment's
    /// segments plus the `estimate.fragmentation` reserve).
    pub predicted_total_bytes: u64,
    /// The caching allocator's peak `allocated_bytes` over every moment of the run (teacher
    /// pass, steps, evaluation; workspaces included): what `measured_peak_allocated_bytes`
    /// measures, bytes.
    pub predicted_allocated_bytes: u64,
    /// The allocator's peak `reserved_bytes` (its segments), bytes: on CUDA the run's requests
    /// replayed on the caching allocator's model ([`Plan::reserved_replay`]), elsewhere the
    /// peak moment's segments (`totals.reserved`, the fast bound the device total is built on).
    pub predicted_reserved_bytes: u64,
    /// [`Self::predicted_total_bytes`] part by part, each where non-zero: the tensors of the
    /// plan's peak moment by category (`student_weights`, `activations`, ...), then what the
    /// allocator reserves beyond them (`allocator_cache`: rounding, split blocks and cached free
    /// blocks; on CUDA the replayed peak reserved bytes less those tensors, elsewhere the peak
    /// moment's segments less them), the `fragmentation` reserve (only where nothing is
    /// replayed), `cuda_context` and `nccl`. The parts sum to the total, bytes.
    pub predicted_breakdown: Vec<(String, u64)>,
    /// FLOPs of one training sample by part (`estimator_wasm::memory::flops`), the mean over
    /// the run's training rows: for text padded per batch, every batch at its own rows and width
    /// ([`MemoryPlanner::flops_per_sample`]).
    pub flops_per_sample: FlopsPerSample,
    /// How [`Self::flops_per_sample`] was priced, in words (`report.json`'s `utilisation.basis`).
    pub flops_basis: String,
}

impl MemoryPlan {
    /// The figures of `plan` on `capacity`'s device, with a sample's FLOPs and their basis.
    fn of(plan: &Plan, capacity: &Capacity, (flops_per_sample, flops_basis): (FlopsPerSample, String)) -> MemoryPlan {
        MemoryPlan {
            device: capacity.name.clone(),
            capacity_bytes: capacity.gpu.memory,
            batch: plan.batch,
            predicted_total_bytes: plan.fit_total(),
            predicted_allocated_bytes: plan.peak_allocated(),
            predicted_reserved_bytes: plan.reserved_replay.unwrap_or(plan.totals.reserved),
            predicted_breakdown: breakdown(plan),
            flops_per_sample,
            flops_basis,
        }
    }
}

/// The plan's device total ([`Plan::fit_total`]) part by part: the peak moment's tensors by
/// category, then what lies outside them, so that the parts sum to the total. With a replay
/// the segments are the replay's peak reserved bytes and no flat fragmentation reserve is
/// added (the replay is what [`Plan::fit_total`] counts).
fn breakdown(plan: &Plan) -> Vec<(String, u64)> {
    let t = &plan.totals;
    let tensors: Vec<(String, u64)> = plan.peak.iter().map(|(cat, b)| (cat.name().to_string(), b)).collect();
    let held: u64 = tensors.iter().map(|(_, b)| b).sum();
    let (segments, fragmentation) = match plan.reserved_replay {
        Some(replayed) => (replayed, 0),
        None => (t.reserved, t.fragmentation),
    };
    let outside = [
        ("allocator_cache", segments.saturating_sub(held)),
        ("fragmentation", fragmentation),
        ("cuda_context", t.cuda_context),
        ("nccl", t.nccl),
    ];
    let outside = outside.into_iter().map(|(n, b)| (n.to_string(), b));
    tensors.into_iter().chain(outside).filter(|&(_, b)| b > 0).collect()
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
    text: Option<TextLengths>,
}

impl MemoryPlanner {
    /// The planner of `spec` on `device` for a job of `world` processes (1 alone) over NCCL
    /// when `nccl` (else Gloo, which holds no device buffers of its own), or `None` where the
    /// device's memory is unknown. The job's own world is priced, whatever
    /// `estimate.data_parallel` says: it is what each rank's batches and NCCL's buffers follow.
    pub fn on(device: Device, spec: &Config, world: usize, nccl: bool, sizes: &LoadedSizes) -> Option<MemoryPlanner> {
        let capacity = device_capacity(device)?;
        let mut priced = spec.clone();
        priced.estimate.target = if device.is_cuda() { Target::Cuda } else { Target::Cpu };
        priced.estimate.data_parallel = world.max(1) as u64;
        if !nccl {
            priced.estimate.nccl_mib = Some(0);
        }
        let inputs = Inputs {
            batch: None,
            teacher: Some(TeacherModel {
                layers: sizes.teacher_layers.clone(),
                ..counted_teacher(sizes.teacher_params, spec)
            }),
            dataset: Some(sizes.dataset),
            device: device.is_cuda().then_some(capacity.gpu),
            text: None,
        };
        let text = sizes.text.clone().filter(|_| !spec.student.is_language_model());
        Some(MemoryPlanner { priced, inputs, capacity, text })
    }

    /// The inputs at micro-batch `batch`: for text, the widths of the batches the run will cut.
    fn inputs_at(&self, batch: u64) -> Inputs {
        let text = self.text.as_ref().map(|t| text_widths(t, &self.priced, Some(batch)));
        Inputs { batch: Some(batch), text, ..self.inputs.clone() }
    }

    /// The estimator's target for this device: `cuda` on a CUDA device, else `cpu`.
    pub fn target(&self) -> Target {
        self.priced.estimate.target
    }

    /// The largest micro-batch that fits the device keeping `estimate.safety_margin` free, at
    /// most the train set. On CUDA the fit is the allocator's replay of the run
    /// ([`Plan::replayed_total`]: the peak reserved bytes over the run plus the context, not the
    /// fast bound's flat `estimate.fragmentation` reserve), searched from the fast bound's batch
    /// ([`search_replayed`]); text is priced at the widths of the batches each size cuts.
    ///
    /// # Errors
    /// [`DistillError::Config`] naming `cfg_path` when the estimate fails or not even a batch
    /// of 1 fits.
    pub fn largest_batch(&self, cfg_path: &Path) -> Result<u64> {
        let margin = self.priced.estimate.safety_margin;
        let fit = max_batch(&self.priced, &self.inputs, &self.capacity.gpu, margin)
            .map_err(|e| DistillError::config(cfg_path, e.to_string()))?;
        let none_fits = || {
            DistillError::config(
                cfg_path,
                format!(
                    "train.batch_size = \"auto\": not even a batch of 1 fits {} ({})",
                    self.capacity.name,
                    human(self.capacity.gpu.memory)
                ),
            )
        };
        let b = fit.ok_or_else(none_fits)?;
        let n = self.rank_samples().unwrap_or(b).max(1);
        let replayed = self.priced.estimate.target == Target::Cuda;
        if !replayed && (self.text.is_none() || b >= n) {
            return Ok(b.min(n));
        }
        // Text: the fast search prices every row at the widest batch's width, which few batches
        // have; the batches the run will cut at each size fit more. CUDA: the replay's fit.
        let budget = self.capacity.gpu.memory - (self.capacity.gpu.memory as f64 * margin).ceil() as u64;
        let found = search_replayed(|b| estimate(&self.priced, &self.inputs_at(b)), budget, b.min(n), n)
            .map_err(|e| DistillError::config(cfg_path, e.to_string()))?;
        found.batch.ok_or_else(none_fits)
    }

    /// The most samples a rank's batch can hold: the train set's share of each of the job's
    /// processes, rounded up ([`crate::train::batches`] cuts global batches at `min(batch x
    /// world, n)` and shares them out); `None` when the train set's size is unknown.
    fn rank_samples(&self) -> Option<u64> {
        let n = self.inputs.dataset.map(|d| d.train_samples).filter(|&n| n > 0)?;
        Some(n.div_ceil(self.priced.estimate.data_parallel.max(1)))
    }

    /// The plan at micro-batch `batch`, or at a rank's share of the train set when that is
    /// smaller (the largest batch the run makes, [`Self::rank_samples`]); warns when an `auto`
    /// batch is the whole train set (full-batch training), and with the breakdown when the plan
    /// does not fit the device ([`Plan::fit_total`]: on CUDA by its replay).
    ///
    /// # Errors
    /// [`DistillError::Config`] naming `cfg_path` when the estimate fails.
    pub fn plan(&self, batch: u64, auto: bool, cfg_path: &Path, progress: &Progress) -> Result<MemoryPlan> {
        let most = self.rank_samples();
        let batch = most.map_or(batch, |n| batch.min(n));
        let plan = estimate(&self.priced, &self.inputs_at(batch))
            .map_err(|e: EstimateError| DistillError::config(cfg_path, e.to_string()))?;
        let capacity = &self.capacity;
        if auto && most.is_some_and(|n| plan.batch >= n) {
            progress.warn(format!(
                "warning: train.batch_size = \"auto\" chose the whole train set ({}) on {}: that is full-batch training; set a number for mini-batches",
                plan.batch, capacity.name
            ));
        }
        if plan.fit_total() > capacity.gpu.memory {
            progress.warn(format!(
                "warning: the estimator expects this run to need {} but {} has {}; expect an out-of-memory error (lower train.batch_size, use precision = \"bf16\" or student.checkpointing)\n{}",
                human(plan.fit_total()),
                capacity.name,
                human(capacity.gpu.memory),
                plan.to_table()
            ));
        }
        let flops = self.flops_per_sample(plan.batch).map_err(|e| DistillError::config(cfg_path, e.to_string()))?;
        Ok(MemoryPlan::of(&plan, capacity, flops))
    }

    /// The FLOPs of a training sample at micro-batch `batch`, and how they were priced. Text
    /// padded per batch: every training batch the run cuts ([`step_widths`]: the trainer's
    /// orders of its first `min(train.epochs, MAX_EPOCHS)` epochs) at its own rows and width,
    /// each distinct width priced once by the estimator at one row (FLOPs are linear in the
    /// rows at a fixed width, attention's `q k^T` and `probs v` quadratic in the width) and
    /// weighted by the rows its batches hold ([`FlopsPerSample::mean`]): the run's padded-token
    /// FLOPs over its rows, not every row at the widest batch's width. Anything else (images,
    /// features, a language model's full windows) has one shape: the cfg's row.
    ///
    /// # Errors
    /// As [`MemoryModel::new`].
    pub fn flops_per_sample(&self, batch: u64) -> std::result::Result<(FlopsPerSample, String), EstimateError> {
        let row = |config: &Config| Ok::<_, EstimateError>(MemoryModel::new(config, &self.inputs)?.flops(1));
        let Some(text) = &self.text else {
            let basis = "exact: the estimator's step at the run's micro-batch".to_string();
            return Ok((FlopsPerSample::mean(&[(batch, row(&self.priced)?)]), basis));
        };
        let train = &self.priced.train;
        let bucket = self.priced.data.bucket_by_length;
        let world = self.priced.estimate.data_parallel as usize;
        let steps = step_widths(&text.train, batch as usize, world, train.epochs, train.seed, bucket);
        let mut rows_at: BTreeMap<u64, u64> = BTreeMap::new();
        for &(rows, width) in &steps {
            *rows_at.entry(width).or_insert(0) += rows;
        }
        let pairs = rows_at
            .iter()
            .map(|(&width, &rows)| Ok((rows, row(&at_width(&self.priced, width))?)))
            .collect::<std::result::Result<Vec<(u64, StepFlops)>, EstimateError>>()?;
        let all_rows = rows_at.values().sum::<u64>().max(1);
        let mean_width = rows_at.iter().map(|(&w, &r)| (w * r) as f64).sum::<f64>() / all_rows as f64;
        let widest = rows_at.keys().next_back().copied().unwrap_or(0);
        let epochs = match train.epochs.clamp(1, MAX_EPOCHS) {
            1 => "its epoch".to_string(),
            n if n == train.epochs => format!("its {n} epochs"),
            n => format!("its first {n} epochs"),
        };
        let batches = match world {
            1 => format!("each of the {} training batches of {epochs}", steps.len()),
            w => format!("each rank's share of the {} steps of {epochs} over {w} processes", steps.len() / w),
        };
        let basis = format!(
            "exact over the epochs' padded batches: {batches} (the trainer's order) at its own rows and width; {mean_width:.1} padded tokens per row on average, the widest batch {widest}"
        );
        Ok((FlopsPerSample::mean(&pairs), basis))
    }
}

/// The widths of the batches a text run of `spec` cuts from sentences of `lengths` at
/// micro-batch `batch` on each of its `estimate.data_parallel` ranks: the training batches
/// that can peak on any rank over the epochs' own orders ([`frontier`] of [`step_widths`]), the
/// first epoch's every step in the trainer's order at its largest share (for the allocator's
/// replay, [`worst_shares`]), and the batches of its passes in length order ([`pass_widths`]);
/// without a batch, every training batch is priced at `data.input_shape[0]`.
pub fn text_widths(lengths: &TextLengths, spec: &Config, batch: Option<u64>) -> TextWidths {
    let (train, bucket) = (&spec.train, spec.data.bucket_by_length);
    let world = spec.estimate.data_parallel as usize;
    let eval_b = train.eval_batch_size as usize;
    let (frontier, steps) = match batch {
        None => (Vec::new(), Vec::new()),
        Some(b) => {
            let b = b.max(1) as usize;
            let all = step_widths(&lengths.train, b, world, train.epochs, train.seed, bucket);
            let first = step_widths(&lengths.train, b, world, 1, train.seed, bucket);
            (frontier(all), worst_shares(&first, world))
        }
    };
    TextWidths {
        train: frontier,
        steps,
        teacher_pass: pass_widths(&lengths.train, eval_b),
        evaluation: pass_widths(&lengths.test, eval_b),
    }
}

/// A teacher of `params` parameters (and the cfg's `teacher.buffers`); the estimator takes its
/// layers from the cfg's `preset` or `arch`, at each width it prices.
pub fn counted_teacher(params: u64, spec: &Config) -> TeacherModel {
    TeacherModel { params, buffers: spec.teacher.buffers.unwrap_or(0), layers: None }
}

/// The memory `distill` may fill on `device`: the CUDA device's total memory, priced with the
/// CUDA runtime's context and the cuBLAS workspace its compute capability and
/// `CUBLAS_WORKSPACE_CONFIG` give ([`cuda_device`]), or the memory the OS reports available
/// for the CPU (no runtime outside the allocator).
pub fn device_capacity(device: Device) -> Option<Capacity> {
    match device {
        Device::Cuda(i) => {
            let (_, total) = crate::torch::shim::cuda_mem_info(i).ok()?;
            let (major, _) = crate::torch::shim::cuda_capability(i).ok()?;
            let config = std::env::var("CUBLAS_WORKSPACE_CONFIG").ok();
            Some(Capacity { name: format!("cuda:{i}"), gpu: cuda_device(total, major, config.as_deref()) })
        }
        _ => {
            let gpu = Gpu {
                name: "cpu",
                memory: available_ram()?,
                cuda_context: 0,
                cublas_workspace: 0,
                bf16: true,
                mig_of: None,
            };
            Some(Capacity { name: "cpu".to_string(), gpu })
        }
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn available_ram() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The run `cfg` on `device`: `train.batch_size` as written, or for `"auto"` the largest
/// micro-batch that fits the device by its memory plan; returns the plan too (`None` where the
/// device's memory is unknown).
///
/// # Errors
/// [`DistillError::Config`] when the estimate fails, when not even a batch of 1 fits, or for
/// `"auto"` on a device whose memory is unknown.
pub fn resolve(
    cfg: WrittenCfg,
    device: Device,
    (world, nccl): (usize, bool),
    sizes: &LoadedSizes,
    progress: &Progress,
) -> Result<(RunSettings, Option<MemoryPlan>)> {
    let planner = MemoryPlanner::on(device, &cfg.spec, world, nccl, sizes);
    let auto = cfg.spec.train.batch_size == BatchSize::Auto;
    let batch_size = match (cfg.spec.train.batch_size, &planner) {
        (BatchSize::Fixed(n), _) => n,
        (BatchSize::Auto, Some(planner)) => planner.largest_batch(&cfg.path)?,
        (BatchSize::Auto, None) => return Err(cfg.auto_unplanned()),
    };
    let memory = planner.as_ref().map(|p| p.plan(batch_size, auto, &cfg.path, progress)).transpose()?;
    // the estimator's target: the device's where it was planned, else as written
    let target = planner.map_or(cfg.spec.estimate.target, |p| p.target());
    Ok((cfg.settle(batch_size as usize, auto, target, device), memory))
}

#[cfg(test)]
#[path = "memory_plan_tests.rs"]
mod tests;
