//! Static memory per pipeline stage: what every stage holds besides its own layers
//! ([`Shared`]: teacher weights, cuBLAS workspace, datasets, cached logits, loss scaler) and
//! each stage's model states per GPU (tensor-parallel split, then ZeRO sharding), masks, DDP
//! buckets, ZeRO-3 gathers, gradients as the backward returns them and optimiser temporaries.
use std::ops::Range;

use crate::memory::breakdown::Cat;
use crate::memory::compiled::{LayerPlan, Stage, StageTensors, TeacherPlan};
use crate::memory::errors::EstimateError;
use crate::memory::inputs::TeacherModel;
use crate::memory::runtime::{add, mul, AllocatorPool, MIB};
use crate::memory::setup::Compile;
use crate::memory::sizes::ParamTensor;
use crate::memory::states::{zero_states, ModelStates, PerParam};
use crate::memory::student_chain::Forward;
use crate::schema::dtype::Recipe;
use crate::schema::{MaskDtype, PruneMethod};

/// How model states lie on each GPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sharding {
    /// Bytes per parameter of weights, gradients and optimiser states.
    pub per: PerParam,
    /// Optimiser state tensors per parameter tensor (AdamW 2, SGD with momentum 1).
    pub moments: u64,
    /// Data-parallel GPUs.
    pub n_dp: u64,
    /// ZeRO stage in effect (0 without data parallelism).
    pub zero: u64,
    /// Bytes per element of a magnitude-pruning mask (0 without one).
    pub mask_bytes: u64,
}

/// Static memory every stage holds besides its own layers.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// Before training (no optimiser state), by category.
    pub pre: Vec<(Cat, AllocatorPool)>,
    /// Added once training starts, by category.
    pub train: Vec<(Cat, AllocatorPool)>,
    /// The teacher logit cache being built (its chunks and their concatenation).
    pub cache_build: AllocatorPool,
    pub sharding: Sharding,
    /// `pre` and `train` tensor by tensor (workspace and logit cache apart).
    pub tensors: StageTensors,
}

impl Compile<'_> {
    /// The sharding of model states `config` asks for.
    pub(crate) fn sharding(&self) -> Sharding {
        let (config, est) = (self.config, &self.config.estimate);
        let n_dp = est.data_parallel;
        let mask_bytes = match (&config.prune, est.prune_mask) {
            (Some(pr), MaskDtype::Bool) if pr.method == PruneMethod::Magnitude => 1,
            (Some(pr), MaskDtype::Float) if pr.method == PruneMethod::Magnitude => 4,
            _ => 0,
        };
        Sharding {
            per: PerParam::of(&self.recipe, config.train.optimizer, config.train.momentum),
            moments: PerParam::optimizer_tensors(config.train.optimizer, config.train.momentum, &self.recipe),
            n_dp,
            zero: if n_dp > 1 { est.zero_stage } else { 0 },
            mask_bytes,
        }
    }

    /// What every stage holds besides its layers, for `teacher` (run as `teacher_plan`) and
    /// logits of `rows` rows per sample.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
    pub(crate) fn shared(
        &mut self,
        teacher: Option<&TeacherModel>,
        teacher_plan: Option<&TeacherPlan>,
        rows: u64,
    ) -> Result<Shared, EstimateError> {
        let (config, cuda) = (self.config, self.cuda);
        let teacher_dtype = Recipe::teacher_dtype(config.teacher.precision);
        let mut shared_pre: Vec<(Cat, AllocatorPool)> = Vec::new();
        let mut shared_train: Vec<(Cat, AllocatorPool)> = Vec::new();
        let mut tensors = StageTensors { workspace: self.runtime.cublas_workspace, ..StageTensors::default() };
        if let Some(t) = teacher {
            let mut pool = AllocatorPool::default();
            for bytes in [
                mul(t.params, teacher_dtype.bytes(), "teacher weights")?,
                mul(t.buffers, teacher_dtype.bytes(), "teacher buffers")?,
            ] {
                pool.tensor(bytes, cuda);
                tensors.pre.push(bytes);
            }
            shared_pre.push((Cat::TeacherWeights, pool));
        }
        if cuda {
            // one workspace per (cuBLAS handle, stream): the main thread's from its first
            // matmul on, and from the first backward on a second one, autograd's device
            // thread's (it takes a handle of its own: measured, docs/memory-model.md section 7)
            // (the first opens a segment of its own; the second is an ordinary request, which
            // below 10 MiB fits in the first one's 20 MiB segment)
            let mut ws = AllocatorPool::default();
            ws.workspace(self.runtime.cublas_workspace, true);
            shared_pre.push((Cat::CublasWorkspace, ws));
            let mut autograd = AllocatorPool::default();
            autograd.tensor(self.runtime.cublas_workspace, true);
            shared_train.push((Cat::CublasWorkspace, autograd));
        }
        let mut cache_build = AllocatorPool::default();
        if let Some(d) = self.inputs.dataset {
            // images and vectors stay on the device with their int64 labels; text stays on the
            // host (`distill/src/inputs/data/text.rs` pads each batch there), only a language model's
            // next-token labels [N, S] int64 go to the device
            let seq = config.data.input_shape.first().copied().unwrap_or(1);
            let (input_bytes, label_bytes) = match (config.data.tokenizer.is_some(), config.student.is_language_model())
            {
                (false, _) => (d.sample_bytes, 8),
                (true, true) => (0, mul(seq, 8, "labels")?),
                (true, false) => (0, 0),
            };
            let mut data = AllocatorPool::default();
            for samples in [d.train_samples, d.test_samples] {
                if input_bytes > 0 {
                    data.tensor(mul(samples, input_bytes, "dataset")?, cuda);
                    tensors.pre.push(samples * input_bytes);
                }
                if label_bytes > 0 {
                    data.tensor(mul(samples, label_bytes, "labels")?, cuda);
                    tensors.pre.push(samples * label_bytes);
                }
            }
            shared_pre.push((Cat::Dataset, data));
            let mut cache = AllocatorPool::default();
            if teacher_plan.is_some_and(|t| t.cache) {
                let logits_per_sample = mul(rows, config.data.classes, "cached logits")?;
                let bytes = mul(mul(d.train_samples, logits_per_sample, "cached logits")?, 4, "cached logits")?;
                cache.tensor(bytes, cuda);
                tensors.logit_cache = bytes;
                cache_build = cache;
                cache_build.merge(&cache); // the list of chunks and their concatenation
            }
            if teacher.is_some() {
                cache.tensor(mul(d.test_samples, 8, "teacher predictions")?, cuda);
                tensors.train.push(d.test_samples * 8);
            }
            shared_train.push((Cat::TeacherLogitCache, cache));
        } else if teacher_plan.is_some_and(|t| t.cache) {
            self.notes.push(
                "the cached teacher logits (train samples x classes x 4 bytes) are left out: the train set's size is not known"
                    .into(),
            );
        }
        if self.recipe.loss_scaling {
            let mut scaler = AllocatorPool::default();
            for _ in 0..4 {
                scaler.tensor(4, cuda);
                tensors.train.push(4);
            }
            shared_train.push((Cat::LossScaler, scaler));
        }
        Ok(Shared { pre: shared_pre, train: shared_train, cache_build, sharding: self.sharding(), tensors })
    }

    /// The pipeline stages of `ranges`, filling in each layer's model states in `plans`.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
    pub(crate) fn stages(
        &self,
        forward: &Forward,
        ranges: &[Range<usize>],
        plans: &mut [LayerPlan],
        shared: &Shared,
        checkpointing: bool,
    ) -> Result<Vec<Stage>, EstimateError> {
        let (cuda, est, priced) = (self.cuda, &self.config.estimate, &forward.priced);
        let Sharding { per, moments, n_dp, zero, mask_bytes } = shared.sharding;
        let p = ranges.len();
        let stage_ranges = ranges;
        let mut stages = Vec::with_capacity(p);
        for (j, range) in stage_ranges.iter().enumerate() {
            let local = &priced[range.clone()];
            let params: Vec<&ParamTensor> = local.iter().flat_map(|p| p.params.iter()).collect();
            let total_params = params.iter().try_fold(0u64, |a, t| a.checked_add(t.elems));
            let total_params = total_params.ok_or_else(|| EstimateError::overflow("parameter count"))?;
            let buffers = local.iter().try_fold(0u64, |a, p| a.checked_add(p.buffers));
            let buffers = buffers.ok_or_else(|| EstimateError::overflow("buffer count"))?;
            let states = zero_states(total_params, per, n_dp, zero)?;
            let mut weights = AllocatorPool::default();
            let mut optimizer = AllocatorPool::default();
            let mut masks = AllocatorPool::default();
            let mut tensors = shared.tensors.clone();
            let push = |pool: &mut AllocatorPool, list: &mut Vec<u64>, bytes: u64| {
                pool.tensor(bytes, cuda);
                list.push(bytes);
            };
            if zero >= 3 {
                push(&mut weights, &mut tensors.weights, states.weights);
            } else {
                for t in &params {
                    push(&mut weights, &mut tensors.weights, mul(t.elems, per.weight, "weights")?);
                }
            }
            push(&mut weights, &mut tensors.weights, mul(buffers, self.recipe.weight.bytes(), "buffers")?);
            if zero >= 1 {
                let shard = total_params.div_ceil(n_dp);
                let each = per.optimizer.checked_div(moments).unwrap_or(0);
                for _ in 0..moments {
                    push(&mut optimizer, &mut tensors.optimizer, mul(shard, each, "optimizer states")?);
                }
            } else {
                for t in &params {
                    let each = per.optimizer.checked_div(moments).unwrap_or(0);
                    for _ in 0..moments {
                        push(&mut optimizer, &mut tensors.optimizer, mul(t.elems, each, "optimizer states")?);
                    }
                }
            }
            for t in params.iter().filter(|t| t.prunable) {
                push(&mut masks, &mut tensors.train, mul(t.elems, mask_bytes, "pruning masks")?);
            }
            // gradients of layers l.. (returned by run_backward, accumulating during backward)
            let mut grads_suffix = vec![AllocatorPool::default(); range.len() + 1];
            tensors.grads = vec![Vec::new(); range.len()];
            let mut suffix_elems = 0u64;
            for l in (0..range.len()).rev() {
                let mut g = grads_suffix[l + 1];
                if zero >= 2 {
                    let elems: u64 = local[l].params.iter().map(|t| t.elems).sum();
                    suffix_elems = add(suffix_elems, elems, "gradients")?;
                    g = AllocatorPool::default();
                    g.tensor(mul(suffix_elems.div_ceil(n_dp), per.grad, "gradients")?, cuda);
                    tensors.grads[l].push(elems.div_ceil(n_dp).saturating_mul(per.grad));
                } else {
                    for t in &local[l].params {
                        push(&mut g, &mut tensors.grads[l], mul(t.elems, per.grad, "gradients")?);
                    }
                }
                grads_suffix[l] = g;
            }
            let mut train: Vec<(Cat, AllocatorPool)> = shared.train.clone();
            train.push((Cat::OptimizerStates, optimizer));
            if mask_bytes > 0 {
                train.push((Cat::PruneMasks, masks));
            }
            if n_dp > 1 && zero == 0 && !est.bucket_view {
                // bucket_cap_mb = 25: full buckets and one partial bucket
                let mut buckets = AllocatorPool::default();
                let grads = mul(total_params, per.grad, "DDP buckets")?;
                buckets.tensors(25 * MIB, grads / (25 * MIB), cuda);
                buckets.tensor(grads % (25 * MIB), cuda);
                tensors.train.extend(std::iter::repeat_n(25 * MIB, (grads / (25 * MIB)) as usize));
                tensors.train.push(grads % (25 * MIB));
                train.push((Cat::DdpBuckets, buckets));
            }
            let largest =
                local.iter().map(|p| p.params.iter().fold(0u64, |a, t| a.saturating_add(t.elems))).max().unwrap_or(0);
            if zero >= 3 {
                let mut gather = AllocatorPool::default();
                for _ in 0..2 {
                    push(&mut gather, &mut tensors.train, mul(largest, per.weight, "ZeRO-3 gathered weights")?);
                }
                push(&mut gather, &mut tensors.train, mul(largest, per.grad, "ZeRO-3 gathered gradients")?);
                train.push((Cat::ZeroGather, gather));
            }
            let mut pre = vec![(Cat::StudentWeights, weights)];
            pre.extend(shared.pre.iter().copied());
            // from ZeRO-1 on, each GPU updates only its shard of every parameter (the ZeRO paper's
            // stage 1, Rajbhandari et al. 2020), so the update's temporaries are a shard's
            let largest_tensor = params.iter().map(|t| t.elems).max().unwrap_or(0);
            let largest_tensor = if zero >= 1 { largest_tensor.div_ceil(n_dp) } else { largest_tensor };
            let mut step_transient = AllocatorPool::default();
            for _ in 0..3 {
                push(&mut step_transient, &mut tensors.step, mul(largest_tensor, per.grad, "optimizer temporaries")?);
            }
            let mut cast_cache = AllocatorPool::default();
            for p in local {
                push(&mut cast_cache, &mut tensors.cast_cache, p.cast_cache);
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
                tensors,
            });
        }
        Ok(stages)
    }
}

fn sum(parts: &[(Cat, AllocatorPool)]) -> Result<AllocatorPool, EstimateError> {
    let total = parts.iter().fold(AllocatorPool::default(), |acc, (_, p)| acc.plus(p));
    total.check(parts.first().map_or("static memory", |(c, _)| c.name()))
}
