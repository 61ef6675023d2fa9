//! Compiles a `Config` and the caller's [`Inputs`] into a [`MemoryModel`]: everything that does not
//! depend on the micro-batch, so that one estimate at a given batch is a short pass over
//! precomputed per-layer sizes (`crate::memory::moments`).
//!
//! What it fixes here:
//! * the student's layers priced by `crate::memory::layer` along the forward chain, with each saved
//!   storage attributed to the first layer that saves it (a storage saved by several layers is
//!   freed after the backward of that first layer, so the attribution is also its lifetime);
//! * pipeline stages (`arch::split` of the layer list) and checkpoint segments
//!   (`arch::checkpoint_segments`, the trainer's definition) with their kept inputs;
//! * model states per GPU (tensor-parallel split, then ZeRO sharding), masks, buckets;
//! * the teacher (weights, working set), the loss and the per-step batch tensors of `distill`
//!   (`distill/src/trainer.rs`: raw and normalised inputs, labels, indices; logits kept until
//!   after the optimiser step; gradients returned by `run_backward`, none between steps).
use std::ops::Range;

use crate::memory::breakdown::{Cat, Counts, Pruning};
use crate::memory::layer;
use crate::memory::moments::largest_live;
use crate::memory::runtime::{self, add, mul, Pool, Runtime, MIB};
use crate::memory::sizes::{Chain, Ctx, ParamTensor, Priced, Save, Size, StorageId};
use crate::memory::states::{zero_states, ModelStates, PerParam};
use crate::schema::arch::{self, numel, Layer, Op};
use crate::schema::catalogue::{self, Gpu};
use crate::schema::dtype::{DType, Recipe};
use crate::schema::errors::EstimateError;
use crate::schema::limits::MAX_BATCH;
use crate::schema::limits::{self, MAX_LAYER_LIST};
use crate::schema::teacher_presets::{self, TeacherModel};
use crate::schema::{BatchSize, Config, Family, MaskDtype, Precision, PruneMethod, Target};

/// What `distill` (or another caller) knows beyond the cfg.toml.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Micro-batch per GPU; `None` takes `train.batch_size` (an error when it is `"auto"`).
    pub batch: Option<u64>,
    /// The teacher's exact counts (from the TorchScript file), overriding `[teacher]`.
    pub teacher: Option<TeacherModel>,
    /// The datasets `distill` keeps on the device; `None` leaves them (and the size of the
    /// cached teacher logits) out.
    pub dataset: Option<DatasetSize>,
}

/// Train and test sets resident on the device, as `distill` keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatasetSize {
    pub train_samples: u64,
    pub test_samples: u64,
    /// Bytes of one stored input sample (1 per pixel for uint8 images, 4 per value for float).
    pub sample_bytes: u64,
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

/// A run of `MemoryModel::hot_index` (indices into `MemoryModel::hot_unique`).
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
    pub pre: Vec<(Cat, Pool)>,
    /// Static memory added once training starts, by category.
    pub train: Vec<(Cat, Pool)>,
    /// Sum of `pre`.
    pub pre_total: Pool,
    /// Sum of `train` (without `pre`).
    pub train_total: Pool,
    /// Gradients of local layers `l..` (index `l - layers.start`), plus an empty last entry.
    pub grads_suffix: Vec<Pool>,
    pub step_transient: Pool,
    pub cast_cache: Pool,
    pub states: ModelStates,
}

/// The loss on the last stage.
#[derive(Debug, Clone)]
pub(crate) struct LossPlan {
    pub saved: Vec<Size>,
    pub transient: Vec<Size>,
    pub grads: Vec<Size>,
    pub student_logits: Size,
    pub teacher_logits: Option<Size>,
}

/// The teacher, compiled.
#[derive(Debug, Clone)]
pub(crate) struct TeacherPlan {
    /// Per teacher layer: input, output and temporaries of its no-grad forward.
    pub layers: Vec<(String, Vec<Size>)>,
    /// Runs on every step (live soft targets).
    pub live: bool,
    /// Computes the train set's logits once before training.
    pub cache: bool,
}

/// A configuration compiled for estimates at any micro-batch.
#[derive(Debug, Clone)]
pub struct MemoryModel {
    pub(crate) runtime: Runtime,
    pub(crate) gpu: Option<&'static Gpu>,
    pub(crate) target: Target,
    pub(crate) precision: Precision,
    pub(crate) default_batch: Option<u64>,
    pub(crate) safety_margin: f64,
    pub(crate) layers: Vec<LayerPlan>,
    pub(crate) stages: Vec<Stage>,
    pub(crate) loss: LossPlan,
    pub(crate) batch: Vec<Size>,
    pub(crate) teacher: Option<TeacherPlan>,
    /// Evaluation: largest no-grad layer of the student at the eval batch, plus its inputs.
    pub(crate) eval_live: (Option<String>, Pool),
    pub(crate) eval_batch: Pool,
    /// Teacher cache phase: largest teacher layer at the eval batch, the cache being built.
    pub(crate) teacher_eval_live: (Option<String>, Pool),
    pub(crate) cache_build: Pool,
    pub(crate) counts: Counts,
    pub(crate) pruning: Option<Pruning>,
    pub(crate) notes: Vec<String>,
    /// Upper bound of all batch-dependent tensors together: `per_sample * b + fixed` (u128).
    pub(crate) bound: (u128, u128),
    /// `layers`' sizes laid out for the scan: spans of indices into the distinct sizes.
    pub(crate) hot: Vec<HotLayer>,
    /// The loss's saved, transient and gradient tensors, student and teacher logits, and the
    /// batch, as spans.
    pub(crate) hot_loss: [Span; 6],
    pub(crate) hot_index: Vec<u32>,
    /// Every distinct size the scan evaluates (each is rounded once per estimate).
    pub(crate) hot_unique: Vec<Size>,
}

impl MemoryModel {
    /// Compiles `config` (validated here) with the caller's `inputs`.
    ///
    /// # Errors
    /// [`EstimateError::Spec`] for an invalid config and for inputs that stand for a cfg.toml
    /// key (the batch, the teacher's counts) out of that key's range; [`EstimateError::Invalid`]
    /// for other missing or out-of-range inputs (an unknown teacher size, zero samples) and for
    /// a layer or evaluation pass past 2^64 bytes (on the key that sizes it);
    /// [`EstimateError::Overflow`] for other sizes past 2^64 bytes; [`EstimateError::UnknownGpu`].
    pub fn new(config: &Config, inputs: &Inputs) -> Result<MemoryModel, EstimateError> {
        config.validate()?;
        check_inputs(inputs)?;
        let est = &config.estimate;
        let cuda = est.target == Target::Cuda;
        let gpu = match &est.gpu {
            Some(name) => Some(catalogue::gpu(name)?),
            None => None,
        };
        let parallel = est.data_parallel > 1 || est.tensor_parallel > 1 || est.pipeline_stages > 1;
        let runtime = Runtime {
            cuda,
            cuda_context: if cuda {
                est.cuda_context_mib
                    .map_or(gpu.map_or(catalogue::DEFAULT_CUDA_CONTEXT, |g| g.cuda_context), |m| m * MIB)
            } else {
                0
            },
            cublas_workspace: if cuda {
                gpu.map_or(catalogue::catalogue()[0].cublas_workspace, |g| g.cublas_workspace)
            } else {
                0
            },
            nccl: if cuda { est.nccl_mib.unwrap_or(if parallel { 512 } else { 0 }) * MIB } else { 0 },
            fragmentation_ppm: if cuda { runtime::ppm(est.fragmentation) } else { 0 },
        };
        let mut notes = Vec::new();
        let default_batch = match (inputs.batch, config.train.batch_size) {
            (Some(b), _) => Some(b),
            (None, BatchSize::Fixed(b)) => Some(b),
            (None, BatchSize::Auto) => None,
        };
        let recipe = Recipe::student(config.train.precision);
        let ctx = Ctx { recipe, cuda, tp: est.tensor_parallel };
        notes.extend(precision_notes(config, gpu, cuda));

        // --- the student along the forward chain
        let layers = arch::layers(&config.student, &config.data)?;
        let transformer = config.student.family == Family::Transformer;
        let input_elems = numel(&config.data.input_shape).ok_or_else(|| EstimateError::overflow("the input size"))?;
        let x0 = Chain {
            id: 0,
            elems: input_elems,
            dtype: if transformer { DType::I64 } else { recipe.weight },
            requires_grad: false,
        };
        let mut next_id: StorageId = 0;
        let mut chain = x0;
        let mut priced: Vec<Priced> = Vec::with_capacity(layers.len());
        let mut inputs_of: Vec<Chain> = Vec::with_capacity(layers.len());
        for l in &layers {
            let p = price(l, chain, &mut next_id, &ctx).map_err(|e| layer_error(e, sizing_key("student", &l.id), l))?;
            inputs_of.push(chain);
            chain = p.output;
            priced.push(p);
        }
        let logits = chain;

        // --- pipeline stages and checkpoint segments
        let n = layers.len();
        let p = usize::try_from(est.pipeline_stages).unwrap_or(usize::MAX);
        if p > n {
            return Err(EstimateError::invalid(
                "estimate.pipeline_stages",
                format!("{p} stages for {n} layers: use at most one stage per layer"),
            ));
        }
        let stage_ranges = arch::split(n, p);
        let mut plans: Vec<LayerPlan> = layers
            .iter()
            .zip(&priced)
            .map(|(l, pr)| LayerPlan {
                id: l.id.clone(),
                kind: kind_name(&l.op),
                output_shape: l.output.clone(),
                params: pr.params.iter().fold(0u64, |a, t| a.saturating_add(t.elems)),
                states: ModelStates::default(),
                saved: Vec::new(),
                recompute: Vec::new(),
                kept: None,
                forward_live: Vec::new(),
                inference_live: Vec::new(),
                checkpoint_forward_live: Vec::new(),
                segment_start: false,
                backward_scratch: pr.backward_scratch.clone(),
                backward_release: pr.backward_release.clone(),
            })
            .collect();
        let mut seen = Seen::new(next_id);
        let mut x0_saved = false;
        for range in &stage_ranges {
            // attribution without checkpointing
            x0_saved |= attribute(&priced, range.clone(), None, &mut plans, |lp| &mut lp.saved, &mut seen);
            if let Some(segments) = arch::checkpoint_segments(range.len(), config.student.checkpointing) {
                // chain ids grow along the forward: a segment input kept already is the last one
                let mut last_kept: Option<StorageId> = None;
                for seg in segments {
                    let seg = range.start + seg.start..range.start + seg.end;
                    let input = inputs_of[seg.start];
                    plans[seg.start].segment_start = true;
                    if last_kept != Some(input.id) {
                        last_kept = Some(input.id);
                        plans[seg.start].kept = Some(input.size()?);
                    }
                    attribute(&priced, seg, Some(input.id), &mut plans, |lp| &mut lp.recompute, &mut seen);
                }
            }
        }
        // live sets during forward and no-grad forward
        let mut saved_so_far = Seen::new(next_id);
        for i in 0..n {
            let (x, out) = (inputs_of[i], priced[i].output);
            for s in &priced[i].saves {
                if let Save::Chain(id, _) = s {
                    saved_so_far.insert(*id);
                }
            }
            let lp = &mut plans[i];
            if x.id != out.id {
                if !saved_so_far.contains(x.id) {
                    lp.forward_live.push(x.size()?);
                }
                if !saves(&priced[i], out.id) {
                    lp.forward_live.push(out.size()?);
                }
                lp.inference_live.push(x.size()?);
                lp.inference_live.push(out.size()?);
                if !lp.segment_start {
                    lp.checkpoint_forward_live.push(x.size()?);
                }
                lp.checkpoint_forward_live.push(out.size()?);
            }
            lp.forward_live.extend(priced[i].forward_scratch.iter().copied());
            lp.inference_live.extend(priced[i].inference_scratch.iter().copied());
            lp.checkpoint_forward_live.extend(priced[i].inference_scratch.iter().copied());
        }
        let checkpointing = arch::checkpoint_segments(n, config.student.checkpointing).is_some();

        // --- the loss (distill/src/loss.rs): CE always; KD when alpha > 0 and a teacher exists
        let resolved_teacher = resolve_teacher(config, inputs, &mut notes)?;
        let kd = config.kd.alpha > 0.0 && resolved_teacher.is_some();
        // a transformer head is vocab-parallel under tensor parallelism; an mlp/cnn head is not
        let vocab_parallel = matches!(layers.last().map(|l| &l.op), Some(Op::LmHead { .. }));
        let classes =
            if vocab_parallel { config.data.classes.div_ceil(est.tensor_parallel) } else { config.data.classes };
        let rows = logits.elems / classes.max(1);
        let fp32_logits = Size::per(mul(mul(rows, classes, "loss")?, 4, "loss")?);
        let mut loss_saved: Vec<Size> = vec![fp32_logits, Size::per(mul(rows, 8, "labels")?), Size::fixed(4)];
        let mut transient = vec![fp32_logits];
        if logits.dtype != DType::F32 {
            transient.push(fp32_logits); // student.to_kind(Float)
        }
        let mut grads = vec![fp32_logits, fp32_logits];
        if kd {
            loss_saved.extend([fp32_logits, fp32_logits]); // log_softmax(s/T), exp(log_softmax(t/T))
            transient.extend([fp32_logits, fp32_logits]); // s/T, t/T
            grads.extend([fp32_logits, fp32_logits]);
        }
        let loss = LossPlan {
            saved: loss_saved,
            transient,
            grads,
            student_logits: logits.size()?,
            teacher_logits: kd.then_some(fp32_logits),
        };

        // --- per-step batch tensors not in the saved set (first stage)
        let x0_saved = x0_saved || checkpointing;
        let sample_bytes = match inputs.dataset {
            Some(d) => d.sample_bytes,
            None if transformer => mul(input_elems, 8, "input")?,
            None => mul(input_elems, 4, "input")?,
        };
        let mut batch = vec![Size::per(8)]; // the batch's indices
        if transformer {
            if !x0_saved {
                batch.push(x0.size()?); // token ids
            }
        } else {
            batch.push(Size::per(sample_bytes)); // index_select of the stored inputs
            let normalised = Size::per(mul(input_elems, 4, "input")?);
            if recipe.weight != DType::F32 || !x0_saved {
                batch.push(normalised);
            }
            if recipe.weight != DType::F32 && !x0_saved {
                batch.push(x0.size()?); // the 16-bit copy fed to a pure-bf16 student
            }
        }

        // --- model states per GPU, per stage
        let per = PerParam::of(&recipe, config.train.optimizer, config.train.momentum);
        let moments = PerParam::optimizer_tensors(config.train.optimizer, config.train.momentum, &recipe);
        let n_dp = est.data_parallel;
        let zero = if n_dp > 1 { est.zero_stage } else { 0 };
        let mask_bytes = match (&config.prune, est.prune_mask) {
            (Some(pr), MaskDtype::Bool) if pr.method == PruneMethod::Magnitude => 1,
            (Some(pr), MaskDtype::Float) if pr.method == PruneMethod::Magnitude => 4,
            _ => 0,
        };
        let teacher_plan = resolved_teacher.as_ref().map(|(_, tl)| TeacherPlan {
            layers: tl.clone(),
            live: kd && !config.teacher.cache_logits,
            cache: kd && config.teacher.cache_logits,
        });
        let teacher_dtype = Recipe::teacher_dtype(config.teacher.precision);
        let mut shared_pre: Vec<(Cat, Pool)> = Vec::new();
        let mut shared_train: Vec<(Cat, Pool)> = Vec::new();
        if let Some((t, _)) = &resolved_teacher {
            let mut pool = Pool::default();
            pool.tensor(mul(t.params, teacher_dtype.bytes(), "teacher weights")?, cuda);
            pool.tensor(mul(t.buffers, teacher_dtype.bytes(), "teacher buffers")?, cuda);
            shared_pre.push((Cat::TeacherWeights, pool));
        }
        if cuda {
            let mut ws = Pool::default();
            ws.workspace(runtime.cublas_workspace, true);
            shared_pre.push((Cat::CublasWorkspace, ws));
        }
        let mut cache_build = Pool::default();
        if let Some(d) = inputs.dataset {
            let mut data = Pool::default();
            for samples in [d.train_samples, d.test_samples] {
                data.tensor(mul(samples, d.sample_bytes, "dataset")?, cuda);
                data.tensor(mul(samples, 8, "labels")?, cuda);
            }
            shared_pre.push((Cat::Dataset, data));
            let mut cache = Pool::default();
            if teacher_plan.as_ref().is_some_and(|t| t.cache) {
                let logits_per_sample = mul(rows, config.data.classes, "cached logits")?;
                cache.tensor(mul(mul(d.train_samples, logits_per_sample, "cached logits")?, 4, "cached logits")?, cuda);
                cache_build = cache;
                cache_build.merge(&cache); // the list of chunks and their concatenation
            }
            if resolved_teacher.is_some() {
                cache.tensor(mul(d.test_samples, 8, "teacher predictions")?, cuda);
            }
            shared_train.push((Cat::TeacherLogitCache, cache));
        } else if teacher_plan.as_ref().is_some_and(|t| t.cache) {
            notes.push(
                "the cached teacher logits (train samples x classes x 4 bytes) are left out: pass the dataset size"
                    .into(),
            );
        }
        if recipe.loss_scaling {
            let mut scaler = Pool::default();
            for _ in 0..4 {
                scaler.tensor(4, cuda);
            }
            shared_train.push((Cat::LossScaler, scaler));
        }

        let mut stages = Vec::with_capacity(stage_ranges.len());
        for (j, range) in stage_ranges.iter().enumerate() {
            let local = &priced[range.clone()];
            let params: Vec<&ParamTensor> = local.iter().flat_map(|p| p.params.iter()).collect();
            let total_params = params.iter().try_fold(0u64, |a, t| a.checked_add(t.elems));
            let total_params = total_params.ok_or_else(|| EstimateError::overflow("parameter count"))?;
            let buffers = local.iter().try_fold(0u64, |a, p| a.checked_add(p.buffers));
            let buffers = buffers.ok_or_else(|| EstimateError::overflow("buffer count"))?;
            let states = zero_states(total_params, per, n_dp, zero)?;
            let mut weights = Pool::default();
            let mut optimizer = Pool::default();
            let mut masks = Pool::default();
            if zero >= 3 {
                weights.tensor(states.weights, cuda);
            } else {
                for t in &params {
                    weights.tensor(mul(t.elems, per.weight, "weights")?, cuda);
                }
            }
            weights.tensor(mul(buffers, recipe.weight.bytes(), "buffers")?, cuda);
            if zero >= 1 {
                let shard = total_params.div_ceil(n_dp);
                let each = per.optimizer.checked_div(moments).unwrap_or(0);
                for _ in 0..moments {
                    optimizer.tensor(mul(shard, each, "optimizer states")?, cuda);
                }
            } else {
                for t in &params {
                    let each = per.optimizer.checked_div(moments).unwrap_or(0);
                    for _ in 0..moments {
                        optimizer.tensor(mul(t.elems, each, "optimizer states")?, cuda);
                    }
                }
            }
            for t in params.iter().filter(|t| t.prunable) {
                masks.tensor(mul(t.elems, mask_bytes, "pruning masks")?, cuda);
            }
            // gradients of layers l.. (returned by run_backward, accumulating during backward)
            let mut grads_suffix = vec![Pool::default(); range.len() + 1];
            let mut suffix_elems = 0u64;
            for l in (0..range.len()).rev() {
                let mut g = grads_suffix[l + 1];
                if zero >= 2 {
                    suffix_elems = add(suffix_elems, local[l].params.iter().map(|t| t.elems).sum(), "gradients")?;
                    g = Pool::default();
                    g.tensor(mul(suffix_elems.div_ceil(n_dp), per.grad, "gradients")?, cuda);
                } else {
                    for t in &local[l].params {
                        g.tensor(mul(t.elems, per.grad, "gradients")?, cuda);
                    }
                }
                grads_suffix[l] = g;
            }
            let mut train: Vec<(Cat, Pool)> = shared_train.clone();
            train.push((Cat::OptimizerStates, optimizer));
            if mask_bytes > 0 {
                train.push((Cat::PruneMasks, masks));
            }
            if n_dp > 1 && zero == 0 && !est.bucket_view {
                // bucket_cap_mb = 25: full buckets and one partial bucket
                let mut buckets = Pool::default();
                let grads = mul(total_params, per.grad, "DDP buckets")?;
                buckets.tensors(25 * MIB, grads / (25 * MIB), cuda);
                buckets.tensor(grads % (25 * MIB), cuda);
                train.push((Cat::DdpBuckets, buckets));
            }
            let largest =
                local.iter().map(|p| p.params.iter().fold(0u64, |a, t| a.saturating_add(t.elems))).max().unwrap_or(0);
            if zero >= 3 {
                let mut gather = Pool::default();
                for _ in 0..2 {
                    gather.tensor(mul(largest, per.weight, "ZeRO-3 gathered weights")?, cuda);
                }
                gather.tensor(mul(largest, per.grad, "ZeRO-3 gathered gradients")?, cuda);
                train.push((Cat::ZeroGather, gather));
            }
            let mut pre = vec![(Cat::StudentWeights, weights)];
            pre.extend(shared_pre.iter().copied());
            let largest_tensor = params.iter().map(|t| t.elems).max().unwrap_or(0);
            let mut step_transient = Pool::default();
            for _ in 0..3 {
                step_transient.tensor(mul(largest_tensor, per.grad, "optimizer temporaries")?, cuda);
            }
            let mut cast_cache = Pool::default();
            for p in local {
                cast_cache.tensor(p.cast_cache, cuda);
            }
            let cast_cache = cast_cache.check("the autocast cache")?;
            let step_transient = step_transient.check("optimizer temporaries")?;
            for g in &grads_suffix {
                g.check("gradients")?;
            }
            let pre_total = sum(&pre)?;
            let train_total = sum(&train)?;
            for (i, p) in range.clone().zip(local) {
                let e: u64 = p.params.iter().map(|t| t.elems).sum();
                plans[i].states = ModelStates {
                    weights: mul(e, per.weight, "weights")?,
                    grads: mul(e, per.grad, "gradients")?,
                    optimizer: mul(e, per.optimizer, "optimizer states")?,
                };
            }
            stages.push(Stage {
                index: j as u64,
                layers: range.clone(),
                in_flight: (p - j) as u64,
                first: j == 0,
                last: j + 1 == stage_ranges.len(),
                checkpointing,
                pre,
                train,
                pre_total,
                train_total,
                grads_suffix,
                step_transient,
                cast_cache,
                states,
            });
        }

        // --- evaluation and teacher-cache phases at the eval batch (batch-independent)
        let eval_b = config.train.eval_batch_size;
        let eval_error = |e: EstimateError| match e {
            EstimateError::Overflow { .. } => EstimateError::invalid(
                "train.eval_batch_size",
                format!("{eval_b} samples need more than 16 EiB (2^64 bytes) in the evaluation pass; lower it"),
            ),
            e => e,
        };
        let mut eval_batch = Pool::default();
        for s in &batch {
            eval_batch.tensor(s.at(eval_b).map_err(eval_error)?, cuda);
        }
        if let Some(d) = inputs.dataset {
            eval_batch.tensor(mul(d.test_samples, 8, "predictions")?, cuda);
            eval_batch.tensor(mul(d.test_samples, 8, "predictions")?, cuda);
        }
        let (id, pool) = largest_live(plans.iter().map(|l| (l.id.as_str(), l.inference_live.as_slice())), eval_b, cuda);
        let eval_live = (id.map(str::to_string), pool.check("the evaluation pass").map_err(eval_error)?);
        let teacher_eval_live = match &teacher_plan {
            Some(t) => {
                let (id, pool) = largest_live(t.layers.iter().map(|(id, s)| (id.as_str(), s.as_slice())), eval_b, cuda);
                (id.map(str::to_string), pool.check("the teacher's forward").map_err(eval_error)?)
            }
            None => (None, Pool::default()),
        };
        let eval_batch = eval_batch.check("the evaluation batch").map_err(eval_error)?;
        let cache_build = cache_build.check("the teacher logit cache")?;
        let counts = Counts {
            student: arch::param_count(&layers),
            student_buffers: layers.iter().fold(0u64, |a, l| a.saturating_add(l.op.buffers())),
            teacher: resolved_teacher.as_ref().map_or(0, |(t, _)| t.params),
            teacher_buffers: resolved_teacher.as_ref().map_or(0, |(t, _)| t.buffers),
        };
        let pruning = match &config.prune {
            Some(pr) => Some(pruning(config, pr, per, mask_bytes, &layers)?),
            None => None,
        };
        let bound = bound(
            &plans,
            &stages,
            &loss,
            &batch,
            teacher_plan.as_ref(),
            [&eval_batch, &eval_live.1, &teacher_eval_live.1, &cache_build],
        );
        let (hot, hot_loss, hot_index, hot_unique) = hot_layout(&plans, &loss, &batch);
        Ok(MemoryModel {
            hot,
            hot_loss,
            hot_index,
            hot_unique,
            bound,
            runtime,
            gpu,
            target: est.target,
            precision: config.train.precision,
            default_batch,
            safety_margin: est.safety_margin,
            layers: plans,
            stages,
            loss,
            batch,
            teacher: teacher_plan,
            eval_live,
            eval_batch,
            teacher_eval_live,
            cache_build,
            counts,
            pruning,
            notes,
        })
    }

    /// The micro-batch the config fixes (or the caller passed), if any.
    pub fn default_batch(&self) -> Option<u64> {
        self.default_batch
    }

    /// The GPU the config names, if any.
    pub fn gpu(&self) -> Option<&'static Gpu> {
        self.gpu
    }

    /// Checks that every tensor of the plan at micro-batch `b`, all together and each rounded
    /// up by a segment, stays below 2^62 bytes, so that every partial sum is exact in u64.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] otherwise (a plan of exbibytes).
    pub(crate) fn check_bound(&self, b: u64) -> Result<(), EstimateError> {
        let (per_sample, fixed) = self.bound;
        let total = per_sample.checked_mul(u128::from(b)).and_then(|v| v.checked_add(fixed));
        match total {
            Some(t) if t < 1 << 62 => Ok(()),
            _ => Err(EstimateError::overflow(format!("the step at micro-batch {b}"))),
        }
    }
}

/// The caller's [`Inputs`] under the rules the cfg.toml keys they stand for follow: the batch
/// as `train.batch_size`, the teacher's counts as `teacher.params` and `teacher.buffers`, its layer list at most
/// [`MAX_LAYER_LIST`] long.
fn check_inputs(inputs: &Inputs) -> Result<(), EstimateError> {
    if let Some(b) = inputs.batch {
        limits::within("train.batch_size", b, 1, MAX_BATCH)?;
    }
    if let Some(t) = &inputs.teacher {
        crate::schema::check_teacher_counts(t.params, t.buffers)?;
        if let Some(n) = t.layers.as_ref().map(Vec::len).filter(|&n| n > MAX_LAYER_LIST) {
            return Err(EstimateError::invalid("teacher", format!("has {n} layers; at most {MAX_LAYER_LIST}")));
        }
    }
    if let Some(d) = inputs.dataset {
        if d.train_samples == 0 || d.sample_bytes == 0 {
            return Err(EstimateError::invalid("dataset", "train_samples and sample_bytes must be >= 1"));
        }
    }
    Ok(())
}

/// [`layer::price`] with the layer's output size checked too (every later per-layer size is
/// then exact).
fn price(l: &Layer, x: Chain, next: &mut StorageId, ctx: &Ctx) -> Result<Priced, EstimateError> {
    let p = layer::price(l, x, next, ctx)?;
    p.output.size()?;
    Ok(p)
}

/// The key of an architecture under `prefix` (`student`, `teacher.arch`) whose entry made
/// layer `id` (`arch`'s ids): `conv{i}*` -> `channels`, `fc{j}*` -> `hidden`, a transformer's
/// `embed*` and `blk{i}*` -> `transformer`, `head` -> `data.classes`; else `data.input_shape`.
fn sizing_key(prefix: &str, id: &str) -> String {
    let list = [("conv", ".channels"), ("fc", ".hidden"), ("blk", ".transformer"), ("embed", ".transformer")];
    match list.iter().find(|(start, _)| id.starts_with(start)) {
        Some((_, k)) => format!("{prefix}{k}"),
        None if id == "head" => "data.classes".to_string(),
        None => "data.input_shape".to_string(),
    }
}

/// An overflow while pricing layer `l` as an error on `key` naming the layer.
fn layer_error(e: EstimateError, key: String, l: &Layer) -> EstimateError {
    let EstimateError::Overflow { .. } = e else { return e };
    let message = format!("layer {} needs more than 16 EiB (2^64 bytes); make it smaller", l.id);
    EstimateError::Invalid { key, message }
}

/// Lays the layers' (and the loss's and batch's) sizes out as spans of indices into the list of
/// sizes the scan evaluates (see [`HotLayer`]). A size equal to one of the last 64 listed
/// reuses it (repeated blocks share their few sizes), which keeps the layout linear in the
/// number of sizes.
#[allow(clippy::type_complexity)]
fn hot_layout(plans: &[LayerPlan], loss: &LossPlan, batch: &[Size]) -> (Vec<HotLayer>, [Span; 6], Vec<u32>, Vec<Size>) {
    let mut unique: Vec<Size> = Vec::new();
    let mut index: Vec<u32> = Vec::new();
    let mut span = |v: &[Size]| {
        let start = index.len() as u32;
        for s in v {
            let n = unique.len();
            let i = match unique.iter().rev().take(64).position(|u| u == s) {
                Some(back) => n - 1 - back,
                None => {
                    unique.push(*s);
                    n
                }
            };
            index.push(i as u32);
        }
        (start, index.len() as u32)
    };
    let hot = plans
        .iter()
        .map(|l| HotLayer {
            saved: span(&l.saved),
            kept: span(l.kept.as_slice()),
            recompute: span(&l.recompute),
            forward_live: span(&l.forward_live),
            checkpoint_forward_live: span(&l.checkpoint_forward_live),
            backward_scratch: span(&l.backward_scratch),
            backward_release: span(&l.backward_release),
            segment_start: l.segment_start,
        })
        .collect();
    let loss_spans = [
        span(&loss.saved),
        span(&loss.transient),
        span(&loss.grads),
        span(&[loss.student_logits]),
        span(loss.teacher_logits.as_slice()),
        span(batch),
    ];
    (hot, loss_spans, index, unique)
}
/// A set of storage ids emptied in constant time: `clear` starts a new generation.
struct Seen {
    stamp: Vec<u32>,
    generation: u32,
}

impl Seen {
    /// An empty set for ids below `ids`.
    fn new(ids: StorageId) -> Seen {
        Seen { stamp: vec![0; ids as usize + 1], generation: 1 }
    }

    fn clear(&mut self) {
        self.generation += 1;
    }

    /// Adds `id`; whether it was not in the set.
    fn insert(&mut self, id: StorageId) -> bool {
        let new = !self.contains(id);
        self.stamp[id as usize] = self.generation;
        new
    }

    fn contains(&self, id: StorageId) -> bool {
        self.stamp[id as usize] == self.generation
    }
}

/// The pruning summary: masks of magnitude pruning, the shrunk student of structured pruning.
fn pruning(
    config: &Config,
    pr: &crate::schema::PruneSpec,
    per: PerParam,
    mask_bytes: u64,
    layers: &[Layer],
) -> Result<Pruning, EstimateError> {
    let prunable = layers.iter().fold(0u64, |acc, l| acc.saturating_add(l.op.prunable()));
    let dense = arch::param_count(layers);
    let (final_params, nonzero) = match pr.method {
        PruneMethod::Magnitude => {
            let zeroed = (prunable as f64 * pr.sparsity).floor() as u64;
            (dense, dense.saturating_sub(zeroed))
        }
        PruneMethod::Structured => {
            let shrunk = arch::layers(&arch::structured(&config.student, pr.sparsity), &config.data)?;
            let p = arch::param_count(&shrunk);
            (p, p)
        }
    };
    Ok(Pruning {
        method: pr.method,
        sparsity: pr.sparsity,
        mask_bytes: mul(prunable, mask_bytes, "pruning masks")?,
        dense_params: dense,
        final_params,
        nonzero_params: nonzero,
        final_model_states: ModelStates {
            weights: mul(final_params, per.weight, "weights")?,
            grads: mul(final_params, per.grad, "gradients")?,
            optimizer: mul(final_params, per.optimizer, "optimizer states")?,
        },
    })
}

/// The bound of [`MemoryModel::check_bound`]: every size any moment can hold (times the in-flight
/// micro-batches), plus 2 MiB of rounding per tensor, plus every static pool.
fn bound(
    layers: &[LayerPlan],
    stages: &[Stage],
    loss: &LossPlan,
    batch: &[Size],
    teacher: Option<&TeacherPlan>,
    constants: [&Pool; 4],
) -> (u128, u128) {
    let mut sizes: Vec<&Size> = Vec::new();
    for l in layers {
        for v in [&l.saved, &l.recompute, &l.forward_live, &l.checkpoint_forward_live, &l.backward_scratch] {
            sizes.extend(v.iter());
        }
        sizes.extend(l.kept.iter());
    }
    for v in [&loss.saved, &loss.transient, &loss.grads, batch] {
        sizes.extend(v.iter());
    }
    sizes.push(&loss.student_logits);
    sizes.extend(loss.teacher_logits.iter());
    if let Some(t) = teacher {
        sizes.extend(t.layers.iter().flat_map(|(_, s)| s.iter()));
    }
    let in_flight = u128::from(stages.iter().map(|s| s.in_flight).max().unwrap_or(1));
    let slack = u128::from(runtime::LARGE_ROUND);
    let per_sample: u128 = sizes.iter().map(|s| u128::from(s.per_sample)).sum::<u128>() * in_flight;
    let mut fixed: u128 = sizes.iter().map(|s| u128::from(s.fixed) + slack).sum::<u128>() * in_flight;
    for s in stages {
        let statics = [&s.pre_total, &s.train_total, &s.cast_cache, &s.step_transient, &s.grads_suffix[0]];
        fixed += statics.iter().map(|p| p.bound()).sum::<u128>();
    }
    fixed += constants.iter().map(|p| p.bound()).sum::<u128>();
    (per_sample, fixed)
}

/// Attributes each saved storage of `range` to the first layer that saves it (`skip`: a
/// storage counted elsewhere), appending to `field`; returns whether the input (storage 0) is
/// among them. `seen` is cleared first.
fn attribute(
    priced: &[Priced],
    range: Range<usize>,
    skip: Option<StorageId>,
    plans: &mut [LayerPlan],
    field: impl Fn(&mut LayerPlan) -> &mut Vec<Size>,
    seen: &mut Seen,
) -> bool {
    seen.clear();
    if let Some(id) = skip {
        seen.insert(id);
    }
    for i in range {
        for s in &priced[i].saves {
            match *s {
                Save::Chain(id, size) => {
                    if seen.insert(id) {
                        field(&mut plans[i]).push(size);
                    }
                }
                Save::Own(size) => field(&mut plans[i]).push(size),
            }
        }
    }
    skip != Some(0) && seen.contains(0)
}

fn saves(p: &Priced, id: StorageId) -> bool {
    p.saves.iter().any(|s| matches!(s, Save::Chain(i, _) if *i == id))
}

fn sum(parts: &[(Cat, Pool)]) -> Result<Pool, EstimateError> {
    let total = parts.iter().fold(Pool::default(), |acc, (_, p)| acc.plus(p));
    total.check(parts.first().map_or("static memory", |(c, _)| c.name()))
}

/// The teacher's counts and its layers' no-grad live sets; `None` when there is no teacher.
#[allow(clippy::type_complexity)]
fn resolve_teacher(
    config: &Config,
    inputs: &Inputs,
    notes: &mut Vec<String>,
) -> Result<Option<(TeacherModel, Vec<(String, Vec<Size>)>)>, EstimateError> {
    let spec = &config.teacher;
    let layers: Option<Vec<Layer>> = match (&inputs.teacher, &spec.preset, &spec.arch) {
        (Some(TeacherModel { layers: Some(l), .. }), _, _) => Some(l.clone()),
        (_, Some(name), _) => Some(teacher_presets::preset_layers(name, &config.data)?),
        (_, _, Some(arch)) => Some(arch::layers(arch, &config.data)?),
        _ => None,
    };
    let from_layers =
        layers.as_ref().map(|l| (arch::param_count(l), l.iter().fold(0u64, |a, l| a.saturating_add(l.op.buffers()))));
    let (params, buffers) = match (&inputs.teacher, spec.params, from_layers) {
        (Some(t), _, _) => (t.params, t.buffers),
        (None, Some(p), _) => (p, spec.buffers.unwrap_or(0)),
        (None, None, Some((p, b))) => (p, spec.buffers.unwrap_or(b)),
        (None, None, None) => {
            if config.kd.alpha > 0.0 {
                return Err(EstimateError::invalid(
                    "teacher",
                    "the teacher's size is unknown: set [teacher] params, preset or arch (distill passes the exact count)",
                ));
            }
            notes.push("no teacher is priced (kd.alpha = 0 and no [teacher] size given)".into());
            return Ok(None);
        }
    };
    let dtype = Recipe::teacher_dtype(spec.precision);
    let ctx = Ctx {
        recipe: Recipe {
            weight: dtype,
            compute: dtype,
            autocast: false,
            optimizer_state: dtype,
            master_copy: false,
            loss_scaling: false,
        },
        cuda: config.estimate.target == Target::Cuda,
        tp: 1,
    };
    let input_elems = numel(&config.data.input_shape).ok_or_else(|| EstimateError::overflow("the input size"))?;
    let mut live: Vec<(String, Vec<Size>)> = Vec::new();
    match &layers {
        Some(layers) => {
            let tokens = matches!(layers.first().map(|l| &l.op), Some(Op::Embedding { .. }));
            let mut chain = Chain {
                id: 0,
                elems: input_elems,
                dtype: if tokens { DType::I64 } else { dtype },
                requires_grad: false,
            };
            let mut next = 0;
            // the key that sizes a teacher layer: the caller's list, the input of a preset, or the arch
            let key = |id: &str| match (&inputs.teacher, &spec.preset) {
                (Some(_), _) => "teacher".to_string(),
                (None, Some(_)) => "data.input_shape".to_string(),
                (None, None) => sizing_key("teacher.arch", id),
            };
            for (i, l) in layers.iter().enumerate() {
                let p = price(l, chain, &mut next, &ctx).map_err(|e| layer_error(e, key(&l.id), l))?;
                let mut sizes = Vec::new();
                if p.output.id != chain.id {
                    sizes.push(chain.size()?);
                    sizes.push(p.output.size()?);
                }
                sizes.extend(p.inference_scratch.iter().copied());
                // the fp32 copy of the logits the teacher returns
                if i + 1 == layers.len() {
                    sizes.push(Size::per(mul(p.output.elems, 4, "teacher logits")?));
                }
                live.push((l.id.clone(), sizes));
                chain = p.output;
            }
        }
        None => {
            notes.push(
                "the teacher's working set is a lower bound (input and logits only): give [teacher] preset or arch"
                    .into(),
            );
            let logits = mul(config.data.classes, 4, "teacher logits")?;
            let input = Size::per(mul(input_elems, dtype.bytes(), "teacher input")?);
            live.push(("teacher".into(), vec![input, Size::per(logits), Size::per(logits)]));
        }
    }
    Ok(Some((TeacherModel { params, buffers, layers }, live)))
}

fn precision_notes(config: &Config, gpu: Option<&'static Gpu>, cuda: bool) -> Vec<String> {
    let mut notes = Vec::new();
    let p = config.train.precision;
    if matches!(p, Precision::PureBf16 | Precision::Bf16Master) {
        notes.push(format!("precision {p:?} is priced for planning; distill trains fp32, fp16 and bf16"));
    }
    if config.student.family == Family::Transformer {
        notes.push("transformer students are priced for planning; distill trains mlp and cnn".into());
    }
    if let Some(g) = gpu {
        let bf16 = matches!(p, Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master)
            || matches!(config.teacher.precision, Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master);
        if bf16 && !g.bf16 {
            notes.push(format!("{} has no native bfloat16: bf16 runs emulated or fails; prefer fp16", g.name));
        }
        if !cuda {
            notes.push("target = \"cpu\": the GPU is ignored (no allocator, context or cuBLAS workspace)".into());
        }
    }
    if let Some(t) = &config.student.transformer {
        if !cuda && t.attention == crate::schema::AttentionKernel::Flash && t.attention_dropout > 0.0 {
            notes.push("on CPU, SDPA with attention dropout runs the math kernel in fp32 (priced as such)".into());
        }
    }
    if config.estimate.zero_stage > 0 && config.estimate.data_parallel > 1 {
        notes.push("ZeRO communication buckets (DeepSpeed reduce/allgather buckets) are not priced".into());
    }
    notes
}

/// The `arch::Op` kind as in its JSON tag.
pub(crate) fn kind_name(op: &Op) -> &'static str {
    match op {
        Op::Conv2d { .. } => "conv2d",
        Op::Linear { .. } => "linear",
        Op::BatchNorm { .. } => "batch_norm",
        Op::LayerNorm { .. } => "layer_norm",
        Op::Activation { .. } => "activation",
        Op::Dropout { .. } => "dropout",
        Op::Pool2d { .. } => "pool2d",
        Op::Flatten => "flatten",
        Op::Embedding { .. } => "embedding",
        Op::SelfAttention { .. } => "self_attention",
        Op::FeedForward { .. } => "feed_forward",
        Op::RmsNorm { .. } => "rms_norm",
        Op::MeanPool => "mean_pool",
        Op::LmHead { .. } => "lm_head",
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<MemoryModel>();
}
