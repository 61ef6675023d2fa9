//! The pieces a [`crate::memory::MemoryModel`] is compiled into: everything about a step that
//! does not depend on the micro-batch, grouped as the scan reads it: the settings
//! ([`Setup`]), the student ([`StudentPlan`]: layers, pipeline stages, loss, batch tensors), the
//! teacher ([`TeacherPlan`]), the passes at the evaluation batch ([`EvalPlan`]), what the plan
//! reports besides bytes ([`Summary`]) and the sizes laid out for the fast scan ([`ScanLayout`]).
use std::ops::Range;

use crate::memory::breakdown::{Cat, Counts, Pruning};
use crate::memory::runtime::{AllocatorPool, Runtime};
use crate::memory::sizes::Size;
use crate::memory::states::ModelStates;
use crate::schema::catalogue::Gpu;
use crate::schema::{Precision, Target};

/// Per layer of a network: its id and the sizes live during its no-grad forward.
pub(crate) type LiveSets = Vec<(String, Vec<Size>)>;

/// The settings of the estimate: where it runs and what the caller fixed.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub runtime: Runtime,
    pub gpu: Option<Gpu>,
    pub target: Target,
    pub precision: Precision,
    /// The micro-batch the config fixes (or the caller passed); `None` for `"auto"`.
    pub default_batch: Option<u64>,
    /// `train.eval_batch_size`: the rows of the evaluation and of the teacher's cache pass.
    pub eval_batch: u64,
    pub safety_margin: f64,
}

/// The student: its layers, pipeline stages, loss and per-step batch tensors.
#[derive(Debug, Clone)]
pub(crate) struct StudentPlan {
    pub layers: Vec<LayerPlan>,
    pub stages: Vec<Stage>,
    pub loss: LossPlan,
    /// The batch's tensors outside the saved set (first stage), per micro-batch.
    pub batch: Vec<Size>,
}

/// The passes at `train.eval_batch_size` (batch-independent).
#[derive(Debug, Clone)]
pub(crate) struct EvalPlan {
    /// Evaluation: largest no-grad layer of the student at the eval batch, plus its inputs.
    pub live: (Option<String>, AllocatorPool),
    pub batch: AllocatorPool,
    /// Teacher cache moment: largest teacher layer at the eval batch, the cache being built.
    pub teacher_live: (Option<String>, AllocatorPool),
    pub cache_build: AllocatorPool,
}

/// What the plan reports besides bytes.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub counts: Counts,
    pub pruning: Option<Pruning>,
    pub notes: Vec<String>,
}

/// The student's, loss's and batch's sizes laid out for the scan (see [`HotLayer`]), and the
/// bound that keeps every sum of them exact.
#[derive(Debug, Clone)]
pub(crate) struct ScanLayout {
    /// Upper bound of all batch-dependent tensors together: `per_sample * b + fixed` (u128).
    pub bound: (u128, u128),
    /// Per layer: spans of indices into the distinct sizes.
    pub layers: Vec<HotLayer>,
    /// The loss's saved, transient and gradient tensors, student and teacher logits, and the
    /// batch, as spans.
    pub loss: [Span; 6],
    pub index: Vec<u32>,
    /// Every distinct size the scan evaluates (each is rounded once per estimate).
    pub unique: Vec<Size>,
}

/// One student layer, compiled.
#[derive(Debug, Clone)]
pub(crate) struct LayerPlan {
    pub id: String,
    pub kind: &'static str,
    pub output_shape: Vec<u64>,
    /// Parameters on this GPU, in elements.
    pub params: u64,
    pub states: ModelStates,
    /// Storages this layer adds to the saved set (one micro-batch, no checkpointing).
    pub saved: Vec<Size>,
    /// With checkpointing: storages it saves when its segment is recomputed (the segment's
    /// input excluded: it is kept anyway).
    pub recompute: Vec<Size>,
    /// With checkpointing: the segment input kept through the forward, if this layer starts a
    /// segment (and that storage is not kept already).
    pub kept: Option<Size>,
    /// Live besides the saved set during its forward: input (until saved or freed), output, temporaries.
    pub forward_live: Vec<Size>,
    /// Live during a no-grad forward of this layer: input, output, temporaries.
    pub inference_live: Vec<Size>,
    /// With checkpointing the forward runs without grad: `inference_live` without an input
    /// that is a kept segment input.
    pub checkpoint_forward_live: Vec<Size>,
    /// First layer of a checkpoint segment.
    pub segment_start: bool,
    pub backward_scratch: Vec<Size>,
    /// Own saved tensors its backward has freed at its largest moment.
    pub backward_release: Vec<Size>,
}

/// A run of [`ScanLayout::index`] (indices into [`ScanLayout::unique`]).
pub(crate) type Span = (u32, u32);

/// One layer's batch-dependent sizes as spans of one contiguous array, for the scan.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HotLayer {
    pub saved: Span,
    pub kept: Span,
    pub recompute: Span,
    pub forward_live: Span,
    pub checkpoint_forward_live: Span,
    pub backward_scratch: Span,
    pub backward_release: Span,
    pub segment_start: bool,
}

/// One pipeline stage (the whole model without pipelining).
#[derive(Debug, Clone)]
pub(crate) struct Stage {
    pub index: u64,
    pub layers: Range<usize>,
    /// Micro-batches whose activations this stage holds at once (1F1B: p - index).
    pub in_flight: u64,
    pub first: bool,
    pub last: bool,
    pub checkpointing: bool,
    /// Static memory before training (no optimiser state), by category.
    pub pre: Vec<(Cat, AllocatorPool)>,
    /// Static memory added once training starts, by category.
    pub train: Vec<(Cat, AllocatorPool)>,
    /// Sum of `pre`.
    pub pre_total: AllocatorPool,
    /// Sum of `train` (without `pre`).
    pub train_total: AllocatorPool,
    /// Gradients of local layers `l..` (index `l - layers.start`), plus an empty last entry.
    pub grads_suffix: Vec<AllocatorPool>,
    pub step_transient: AllocatorPool,
    pub cast_cache: AllocatorPool,
    pub states: ModelStates,
    /// The same static memory tensor by tensor, for the caching allocator's model.
    pub tensors: StageTensors,
}

/// A stage's static tensors one by one, in bytes, as `crate::memory::alloc_trace` requests
/// them from the caching allocator (the pools of [`Stage`] sum them).
#[derive(Debug, Clone, Default)]
pub(crate) struct StageTensors {
    /// Before the student exists: the teacher's weights and buffers, the datasets.
    pub pre: Vec<u64>,
    /// The student's weights and buffers.
    pub weights: Vec<u64>,
    /// One cuBLAS workspace (0 on CPU).
    pub workspace: u64,
    /// The cached teacher logits (0 without a cache).
    pub logit_cache: u64,
    /// From the first step on: the teacher's test predictions, the loss scaler, pruning masks,
    /// DDP buckets, ZeRO-3 gathers.
    pub train: Vec<u64>,
    /// Optimiser states, made by the first optimiser step.
    pub optimizer: Vec<u64>,
    /// Gradients of each local layer.
    pub grads: Vec<Vec<u64>>,
    /// The optimiser update's temporaries.
    pub step: Vec<u64>,
    /// Autocast's cached 16-bit weight copies.
    pub cast_cache: Vec<u64>,
}

/// The loss on the last stage.
#[derive(Debug, Clone)]
pub(crate) struct LossPlan {
    pub saved: Vec<Size>,
    pub transient: Vec<Size>,
    pub grads: Vec<Size>,
    pub student_logits: Size,
    pub teacher_logits: Option<Size>,
    /// Rows of logits per sample (1, or the sequence length of a language model).
    pub rows: u64,
}

/// The teacher, compiled.
#[derive(Debug, Clone)]
pub(crate) struct TeacherPlan {
    /// Per teacher layer: input, output and temporaries of its no-grad forward.
    pub layers: LiveSets,
    /// Runs on every step (live soft targets).
    pub live: bool,
    /// Computes the train set's logits once before training.
    pub cache: bool,
}
