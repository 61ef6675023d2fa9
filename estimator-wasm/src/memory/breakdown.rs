//! The estimator's answer: a breakdown by moment, by category and by layer, serialisable to JSON
//! (where a moment is called a phase: `phases`, `peak_phase`, `phase`).
//! Every figure is in bytes.
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::memory::runtime::AllocatorPool;
use crate::memory::states::ModelStates;
use crate::schema::catalogue::Gpu;
use crate::schema::{Precision, PruneMethod, Target};

/// A moment of the training run whose live memory is priced. The peak is the maximum over
/// them, never their sum (`docs/memory-model.md` section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// Before training: the teacher's logits for the whole train set are computed and cached.
    TeacherCache,
    /// Each step, live soft targets: the teacher's no-grad forward (its largest layer).
    TeacherForward,
    /// The student's forward, at its largest layer.
    Forward,
    /// Forward end: every saved activation plus the loss being built.
    Loss,
    /// The backward: its start (loss gradients) or any layer's backward, whichever is larger.
    Backward,
    /// The optimiser step: all gradients plus the update's temporaries.
    OptimizerStep,
    /// The per-epoch evaluation: a no-grad forward at `train.eval_batch_size`.
    Evaluation,
}

/// A category of live memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cat {
    /// Student parameters and buffers, in the weight dtype.
    StudentWeights,
    Gradients,
    /// AdamW moments or SGD momentum, and an fp32 master copy where the recipe keeps one.
    OptimizerStates,
    /// fp16 loss scale, growth tracker, found-inf flag and inverse scale.
    LossScaler,
    /// Unstructured-pruning masks.
    PruneMasks,
    /// DDP all-reduce buckets (a second copy of the gradients without `bucket_view`).
    DdpBuckets,
    /// ZeRO-3 gathered layer weights and their full gradients.
    ZeroGather,
    /// Teacher parameters and buffers in the teacher's precision.
    TeacherWeights,
    /// Cached teacher logits of the train set and the teacher's test predictions.
    TeacherLogitCache,
    /// Train and test sets resident on the device.
    Dataset,
    /// The micro-batch: raw and normalised inputs, indices (labels are saved by the loss).
    Batch,
    /// Tensors autograd saved for backward (checkpoint boundaries when checkpointing).
    Activations,
    /// Autocast's cast cache: 16-bit weight copies not also saved for backward.
    CastCache,
    /// Student logits and the teacher's soft targets of the batch.
    Logits,
    /// The teacher's working set while it runs.
    TeacherTransient,
    /// The student layer being computed: input, output and temporaries not saved.
    ForwardTransient,
    /// Gradients of a layer's output and input and its internal gradients.
    BackwardTransient,
    /// fp32 copies and temporaries of the loss, and the loss's gradients.
    LossTransient,
    /// Temporaries of the optimiser update.
    StepTransient,
    /// The cuBLAS workspace.
    CublasWorkspace,
}

/// Number of [`Cat`] values.
pub const CATEGORIES: usize = 20;

impl Cat {
    /// Every category, in report order.
    pub const ALL: [Cat; CATEGORIES] = [
        Cat::StudentWeights,
        Cat::Gradients,
        Cat::OptimizerStates,
        Cat::LossScaler,
        Cat::PruneMasks,
        Cat::DdpBuckets,
        Cat::ZeroGather,
        Cat::TeacherWeights,
        Cat::TeacherLogitCache,
        Cat::Dataset,
        Cat::Batch,
        Cat::Activations,
        Cat::CastCache,
        Cat::Logits,
        Cat::TeacherTransient,
        Cat::ForwardTransient,
        Cat::BackwardTransient,
        Cat::LossTransient,
        Cat::StepTransient,
        Cat::CublasWorkspace,
    ];

    /// The snake_case name used in JSON and tables.
    pub const fn name(self) -> &'static str {
        match self {
            Cat::StudentWeights => "student_weights",
            Cat::Gradients => "gradients",
            Cat::OptimizerStates => "optimizer_states",
            Cat::LossScaler => "loss_scaler",
            Cat::PruneMasks => "prune_masks",
            Cat::DdpBuckets => "ddp_buckets",
            Cat::ZeroGather => "zero_gather",
            Cat::TeacherWeights => "teacher_weights",
            Cat::TeacherLogitCache => "teacher_logit_cache",
            Cat::Dataset => "dataset",
            Cat::Batch => "batch",
            Cat::Activations => "activations",
            Cat::CastCache => "cast_cache",
            Cat::Logits => "logits",
            Cat::TeacherTransient => "teacher_transient",
            Cat::ForwardTransient => "forward_transient",
            Cat::BackwardTransient => "backward_transient",
            Cat::LossTransient => "loss_transient",
            Cat::StepTransient => "step_transient",
            Cat::CublasWorkspace => "cublas_workspace",
        }
    }
}

/// Bytes by category (each tensor rounded to 512 B on CUDA). Serialises as a map from the
/// category's name to its bytes, zero categories left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Categories(pub(crate) [u64; CATEGORIES]);

impl Categories {
    pub fn get(&self, cat: Cat) -> u64 {
        self.0[cat as usize]
    }

    /// `(category, bytes)` for every non-zero category, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Cat, u64)> + '_ {
        Cat::ALL.iter().map(|&c| (c, self.get(c))).filter(|&(_, v)| v > 0)
    }
}

impl Serialize for Categories {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (cat, bytes) in self.iter() {
            map.serialize_entry(cat.name(), &bytes)?;
        }
        map.end()
    }
}

/// Live memory at the largest point of one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MomentBytes {
    /// The moment (JSON: `phase`).
    #[serde(rename = "phase")]
    pub moment: Moment,
    /// The layer at which the moment peaks (forward, backward, teacher and evaluation passes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// Pipeline stage (0-based) this figure belongs to.
    pub stage: u64,
    pub categories: Categories,
    /// Exact tensor bytes.
    pub requested: u64,
    /// After 512-byte rounding (CUDA).
    pub allocated: u64,
    /// Allocator segments holding them (CUDA), before the fragmentation reserve.
    pub reserved: u64,
}

impl MomentBytes {
    pub(crate) fn new(
        moment: Moment,
        layer: Option<String>,
        stage: u64,
        categories: Categories,
        pool: &AllocatorPool,
        reserved: u64,
    ) -> Self {
        MomentBytes { moment, layer, stage, categories, requested: pool.requested, allocated: pool.allocated, reserved }
    }
}

/// The device total at the peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Exact tensor bytes at the peak.
    pub requested: u64,
    /// Allocator `allocated_bytes` at the peak.
    pub allocated: u64,
    /// Allocator `reserved_bytes` at the peak (segments).
    pub reserved: u64,
    /// Fragmentation reserve on top of `reserved`.
    pub fragmentation: u64,
    /// CUDA context outside the allocator.
    pub cuda_context: u64,
    /// NCCL buffers outside the allocator.
    pub nccl: u64,
    /// What the process needs on the device: `reserved + fragmentation + cuda_context + nccl`.
    pub total: u64,
}

/// Parameter and buffer counts, in elements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Trainable student parameters (whole model, before any sharding).
    pub student: u64,
    pub student_buffers: u64,
    pub teacher: u64,
    pub teacher_buffers: u64,
}

/// One row of the by-layer table, for one micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerRow {
    pub id: String,
    /// The op, as in `arch::Op` (`linear`, `conv2d`, `self_attention`, ..., `loss`).
    pub kind: &'static str,
    /// Output shape per sample.
    pub output: Vec<u64>,
    /// Parameters on this GPU (after tensor-parallel splitting), in elements.
    pub params: u64,
    pub weight_bytes: u64,
    pub grad_bytes: u64,
    pub optimizer_bytes: u64,
    /// Bytes this layer adds to the saved set (tensors already saved by an earlier layer are
    /// counted there), without checkpointing.
    pub saved_bytes: u64,
    /// With checkpointing: the segment input this layer keeps through the forward.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_bytes: Option<u64>,
    pub stage: u64,
}

/// What pruning changes (`[prune]`): masks during training, the student at the end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pruning {
    pub method: PruneMethod,
    /// Final sparsity s_f.
    pub sparsity: f64,
    /// Bytes of the unstructured masks held during training (0 for structured pruning).
    pub mask_bytes: u64,
    /// Dense parameters of the student at the start, in elements.
    pub dense_params: u64,
    /// Parameters left at the end: structured pruning removes neurons and channels
    /// (`arch::structured`), magnitude pruning only zeroes weights (the tensors keep their shape).
    pub final_params: u64,
    /// Non-zero parameters at the end.
    pub nonzero_params: u64,
    /// Model states of the final student on one GPU (structured pruning shrinks them; the
    /// training peak is at the dense start).
    pub final_model_states: ModelStates,
}

/// Whether a device total fits a GPU. [`Plan::fit`] holds the fast bound's (`totals.total`,
/// the figure the browser build shows and its sweeps compare); the text table and `distill`
/// judge [`Plan::fit_total`] (the replayed total where the plan has a replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fit {
    pub gpu: Gpu,
    /// The GPU's memory, in bytes.
    pub capacity: u64,
    /// `capacity - total` when it fits, else 0.
    pub free: u64,
    /// `total - capacity` when it does not fit, else 0.
    pub short: u64,
    pub fits: bool,
}

impl Fit {
    /// A device total of `total` bytes on `gpu`.
    pub(crate) fn of(gpu: Gpu, total: u64) -> Fit {
        Fit {
            gpu,
            capacity: gpu.memory,
            free: gpu.memory.saturating_sub(total),
            short: total.saturating_sub(gpu.memory),
            fits: total <= gpu.memory,
        }
    }
}

/// The estimate for one micro-batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Micro-batch per GPU.
    pub batch: u64,
    pub target: Target,
    pub precision: Precision,
    pub params: Counts,
    /// Student model states on the peak GPU (after tensor-parallel splitting and sharding).
    pub model_states: ModelStates,
    /// The moment of the peak (JSON: `peak_phase`).
    #[serde(rename = "peak_phase")]
    pub peak_moment: Moment,
    /// Categories at the peak.
    pub peak: Categories,
    pub totals: Totals,
    /// Each moment at its largest point (on the pipeline stage that peaks; JSON: `phases`).
    #[serde(rename = "phases")]
    pub moments: Vec<MomentBytes>,
    /// Per layer, then the loss (`id = "loss"`).
    pub layers: Vec<LayerRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pruning: Option<Pruning>,
    /// FLOPs of one step at this micro-batch (`crate::memory::flops`).
    pub flops: crate::memory::flops::StepFlops,
    /// Assumptions and warnings, one sentence each.
    pub notes: Vec<String>,
    /// The caching allocator's reserved bytes, replayed: its peak `reserved_bytes` over the
    /// whole run (the teacher's pass, the steps, the evaluations), from the run's requests
    /// replayed on the model of `c10/cuda/CUDACachingAllocator.cpp`
    /// (`crate::memory::caching_allocator`), cached free blocks included; what
    /// `torch.cuda.max_memory_reserved` measures. `None` on the CPU. [`Totals::reserved`] is
    /// the fast bound the batch search and the sweeps use (the peak moment's segments), and the
    /// device total is built on it (`docs/memory-model.md` section 7c).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_replay: Option<u64>,
}

impl Plan {
    /// The device memory the plan's replay of the run needs, bytes: the allocator's replayed
    /// peak reserved bytes plus the CUDA context and NCCL's buffers (what the device's memory
    /// must hold besides); `None` where nothing is replayed (the CPU, the browser build).
    pub fn replayed_total(&self) -> Option<u64> {
        let t = &self.totals;
        self.reserved_replay.map(|r| r.saturating_add(t.cuda_context).saturating_add(t.nccl))
    }

    /// [`Self::replayed_total`] where the plan has a replay, else the fast bound's device total
    /// (`totals.total`, with its fragmentation reserve).
    pub fn fit_total(&self) -> u64 {
        self.replayed_total().unwrap_or(self.totals.total)
    }

    /// The caching allocator's peak `allocated_bytes` over every moment of the plan (the
    /// teacher's pass, the step, the evaluation): what `torch.cuda.max_memory_allocated`
    /// measures over a run. The device total's moment ([`Plan::peak_moment`]) is the one whose
    /// segments peak, which may hold fewer allocated bytes.
    pub fn peak_allocated(&self) -> u64 {
        self.moments.iter().map(|m| m.allocated).max().unwrap_or(self.totals.allocated).max(self.totals.allocated)
    }
}
