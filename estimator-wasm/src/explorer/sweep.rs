//! Everything the explorer shows for one form ([`ExplorerForm`]), computed by the estimator: the
//! breakdown of each student size, memory against micro-batch with the largest batch, the
//! largest batch on every catalogue GPU, and what each lever changes. Every figure is in bytes
//! (or samples for batches); the page only displays them.
use serde::Serialize;

use crate::explorer::form::ExplorerForm;
use crate::explorer::form_field::{FormError, FormField};
use crate::explorer::teacher_folder::{untrainable_with, TeacherFolder};
use crate::memory::batch;
use crate::memory::breakdown::{Cat, Plan};
use crate::schema::catalogue::{catalogue, Gpu};
use crate::schema::limits::MAX_BATCH;
use crate::schema::{Config, OptimizerKind, Precision, PruneMethod, Target};
use crate::MemoryModel;

/// Width factors of the compared students, relative to the chosen width multiplier.
pub const SIZES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Index of the chosen student (factor 1) in [`SIZES`].
pub const CHOSEN: usize = 2;

/// The peak memory in the explorer's eight groups, in bytes; they add up to `total`, the
/// device total (`Totals::total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    /// Student weights and buffers, autocast weight copies, pruning masks, ZeRO-3 gathered units.
    pub weights: u64,
    /// Gradients and DDP all-reduce buckets.
    pub gradients: u64,
    /// OptimizerKind states (moments, master copy), loss scaler and the update's temporaries.
    pub optimizer_states: u64,
    /// Saved activations, the micro-batch and the forward/backward temporaries.
    pub activations: u64,
    /// Teacher weights, its working set and cached logits.
    pub teacher: u64,
    /// Both logits and the fp32 KD/CE loss buffers.
    pub kd_buffers: u64,
    /// The train and test sets `distill` keeps on the device (0 where the scenario's files are
    /// not known, [`crate::explorer::Scenario::dataset`]).
    pub data: u64,
    /// CUDA context, NCCL, cuBLAS workspace, allocator rounding and segments, fragmentation
    /// reserve.
    pub runtime_overhead: u64,
    /// The device total.
    pub total: u64,
}

/// The groups in stacking order: (JSON key, label).
pub const GROUPS: [(&str, &str); 8] = [
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("activations", "activations"),
    ("teacher", "teacher"),
    ("kd_buffers", "KD buffers"),
    ("data", "data on the device"),
    ("runtime_overhead", "runtime overhead"),
];

/// Categories of each group but the runtime overhead, which is the rest of the device total.
const MEMBERS: [&[Cat]; 7] = [
    &[Cat::StudentWeights, Cat::CastCache, Cat::PruneMasks, Cat::ZeroGather],
    &[Cat::Gradients, Cat::DdpBuckets],
    &[Cat::OptimizerStates, Cat::LossScaler, Cat::StepTransient],
    &[Cat::Activations, Cat::Batch, Cat::ForwardTransient, Cat::BackwardTransient],
    &[Cat::TeacherWeights, Cat::TeacherTransient, Cat::TeacherLogitCache],
    &[Cat::Logits, Cat::LossTransient],
    &[Cat::Dataset],
];

impl Breakdown {
    /// Groups the peak of `plan`.
    pub fn of(plan: &Plan) -> Breakdown {
        let sum = |cats: &[Cat]| cats.iter().fold(0u64, |acc, &c| acc.saturating_add(plan.peak.get(c)));
        let [w, g, o, a, t, k, d] = MEMBERS.map(sum);
        let named = [w, g, o, a, t, k, d].iter().fold(0u64, |acc, &v| acc.saturating_add(v));
        Breakdown {
            weights: w,
            gradients: g,
            optimizer_states: o,
            activations: a,
            teacher: t,
            kd_buffers: k,
            data: d,
            runtime_overhead: plan.totals.total.saturating_sub(named),
            total: plan.totals.total,
        }
    }

    /// `(key, bytes)` in [`GROUPS`] order.
    pub fn groups(&self) -> [(&'static str, u64); 8] {
        let v = [
            self.weights,
            self.gradients,
            self.optimizer_states,
            self.activations,
            self.teacher,
            self.kd_buffers,
            self.data,
            self.runtime_overhead,
        ];
        let mut out = [("", 0); 8];
        for (i, (key, _)) in GROUPS.iter().enumerate() {
            out[i] = (key, v[i]);
        }
        out
    }
}

/// One student size at the form's micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudentSize {
    /// Width factor relative to the chosen student ([`SIZES`]).
    pub scale: f64,
    /// The absolute width multiplier.
    pub width: f64,
    /// Trainable student parameters, in elements.
    pub params: Option<u64>,
    pub breakdown: Option<Breakdown>,
    /// Whether the device total fits the GPU's memory.
    pub fits: Option<bool>,
    /// Largest micro-batch on the GPU, keeping the safety margin free.
    pub max_batch: Option<u64>,
    /// Why this size cannot be priced.
    pub error: Option<String>,
}

/// The device total at one micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CurvePoint {
    pub batch: u64,
    pub total: u64,
}

/// The largest micro-batch of the chosen student on one catalogue GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuRow {
    pub gpu: &'static str,
    /// Memory in bytes.
    pub memory: u64,
    pub max_batch: Option<u64>,
}

/// The chosen student with one setting changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lever {
    /// The form field changed.
    pub lever: &'static str,
    /// Its new value, in words.
    pub setting: String,
    pub total: Option<u64>,
    /// Bytes less than the reference total (0 when it costs): the current one, or the `versus` lever's.
    pub saves: u64,
    /// Bytes more than the reference total (0 when it saves).
    pub costs: u64,
    /// The setting of the lever this one is compared with (ZeRO against DDP on the same GPUs),
    /// or `None` when it is compared with the current form.
    pub versus: Option<String>,
    pub max_batch: Option<u64>,
    pub error: Option<String>,
}

/// The explorer's whole view of one form.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// The GPU and its memory in bytes (the capacity line).
    pub gpu: &'static str,
    pub capacity: u64,
    /// Capacity less the safety margin: what the largest batch may fill.
    pub budget: u64,
    /// The micro-batch of the bars and the plan.
    pub batch: u64,
    /// One entry per [`SIZES`] factor.
    pub students: Vec<StudentSize>,
    /// Index of the chosen student in `students`.
    pub chosen: usize,
    /// The chosen student's full estimate at `batch` (moments, categories, layers).
    pub plan: Plan,
    /// The chosen student's largest micro-batch on `gpu` (its memory's answer).
    pub max_batch: Option<u64>,
    /// The scenario's training set, where known ([`crate::explorer::Scenario::train_samples`]):
    /// no run cuts a micro-batch larger than it.
    pub train_samples: Option<u64>,
    /// The chosen student's device total against micro-batch (powers of two, `max_batch` and
    /// the batch after it).
    pub curve: Vec<CurvePoint>,
    pub gpus: Vec<GpuRow>,
    pub levers: Vec<Lever>,
    /// Why `distill` cannot train the chosen student's cfg.toml yet (one line naming the keys,
    /// [`crate::schema::untrainable`], and a teacher folder it does not read,
    /// [`crate::explorer::teacher_folder::untrainable_with`]); `None` when it trains it, given
    /// its data and teacher.
    pub untrainable: Option<String>,
    /// The Hugging Face folder the cfg.toml names as its teacher (the scenario's,
    /// [`crate::explorer::Scenario::folder`]): which folder, and where to get it.
    pub folder: Option<TeacherFolder>,
}

impl Sweep {
    /// `batch` (one of this sweep's largest micro-batches, memory's answer) at most the
    /// scenario's training set, [`within_data`].
    pub fn within_data(&self, batch: Option<u64>) -> Option<u64> {
        within_data(batch, self.train_samples)
    }
}

/// A largest micro-batch `batch` at most `train_samples` where that is known: no run cuts a
/// micro-batch larger than its data, as `distill plan` lists "(the whole train set)". `None`
/// (nothing fits) stays `None`.
pub fn within_data(batch: Option<u64>, train_samples: Option<u64>) -> Option<u64> {
    match (batch, train_samples) {
        (Some(b), Some(n)) => Some(b.min(n)),
        (b, _) => b,
    }
}

/// Prices the form: every view of the explorer.
///
/// # Errors
/// The form's or the estimator's error for the chosen student (other sizes and levers carry
/// their own errors instead).
pub fn sweep(form: &ExplorerForm) -> Result<Sweep, FormError> {
    let base = form.base()?;
    let config = form.config_from(base.clone(), 1.0)?;
    let model = MemoryModel::new(&config, &form.inputs(&config))?;
    let gpu: &Gpu = model.gpu().ok_or_else(|| FormError::on(FormField::Gpu, "choose a GPU"))?;
    let margin = config.estimate.safety_margin;
    let plan = model.plan(form.batch)?;
    let search = batch::search(&model, gpu, margin)?;
    let students =
        SIZES
            .iter()
            .map(|&scale| {
                if scale == 1.0 {
                    chosen_size(form, &plan, search.batch)
                } else {
                    size(form, &base, scale, gpu, margin)
                }
            })
            .collect();
    Ok(Sweep {
        gpu: gpu.name,
        capacity: gpu.memory,
        budget: search.budget,
        batch: form.batch,
        students,
        chosen: CHOSEN,
        curve: curve(&model, search.batch),
        max_batch: search.batch,
        train_samples: crate::explorer::scenarios::scenario(&form.teacher).and_then(|s| s.train_samples),
        gpus: gpu_rows(form, &config, &model, margin)?,
        levers: levers(form, &base, gpu, plan.totals.total),
        untrainable: untrainable_with(crate::schema::untrainable(&config), form.folder().as_ref()),
        folder: form.folder(),
        plan,
    })
}

/// The largest micro-batch on every catalogue GPU, as [`crate::max_batch_per_gpu`] finds it,
/// with one compiled model per distinct runtime: a GPU enters `MemoryModel::new` only through its CUDA
/// context and cuBLAS workspace (the batch search reads its memory), so the catalogue needs two
/// models, not sixteen (the test `gpu_rows_equal_max_batch_per_gpu` holds this to the estimator's
/// own answer).
fn gpu_rows(form: &ExplorerForm, config: &Config, chosen: &MemoryModel, margin: f64) -> Result<Vec<GpuRow>, FormError> {
    let runtime = |g: &Gpu| (g.cuda_context, g.cublas_workspace);
    let mut models: Vec<((u64, u64), MemoryModel)> = Vec::new();
    if let Some(g) = chosen.gpu() {
        models.push((runtime(g), chosen.clone()));
    }
    let mut rows = Vec::with_capacity(catalogue().len());
    for g in catalogue() {
        let i = match models.iter().position(|(k, _)| *k == runtime(g)) {
            Some(i) => i,
            None => {
                let mut c = config.clone();
                c.estimate.gpu = Some(g.name.to_string());
                c.estimate.target = Target::Cuda;
                models.push((runtime(g), MemoryModel::new(&c, &form.inputs(&c))?));
                models.len() - 1
            }
        };
        rows.push(GpuRow { gpu: g.name, memory: g.memory, max_batch: batch::search(&models[i].1, g, margin)?.batch });
    }
    Ok(rows)
}

fn chosen_size(form: &ExplorerForm, plan: &Plan, max_batch: Option<u64>) -> StudentSize {
    StudentSize {
        scale: 1.0,
        width: form.width,
        params: Some(plan.params.student),
        breakdown: Some(Breakdown::of(plan)),
        fits: plan.fit.map(|f| f.fits),
        max_batch,
        error: None,
    }
}

fn size(form: &ExplorerForm, base: &Config, scale: f64, gpu: &Gpu, margin: f64) -> StudentSize {
    let priced = (|| {
        let config = form.config_from(base.clone(), scale)?;
        let model = MemoryModel::new(&config, &form.inputs(&config))?;
        let plan = model.plan(form.batch)?;
        let search = batch::search(&model, gpu, margin)?;
        Ok::<_, FormError>((plan, search.batch))
    })();
    match priced {
        Ok((plan, max_batch)) => {
            StudentSize { scale, width: form.width * scale, ..chosen_size(form, &plan, max_batch) }
        }
        Err(e) => StudentSize {
            scale,
            width: form.width * scale,
            params: None,
            breakdown: None,
            fits: None,
            max_batch: None,
            error: Some(e.message),
        },
    }
}

/// Device totals at powers of two up to twice past the largest batch (64 when none fits),
/// plus the largest batch and the one after it.
fn curve(model: &MemoryModel, max_batch: Option<u64>) -> Vec<CurvePoint> {
    let top = max_batch.map_or(64, |m| m.saturating_add(1).next_power_of_two().saturating_mul(2)).min(MAX_BATCH);
    let mut batches: Vec<u64> =
        std::iter::successors(Some(1u64), |b| b.checked_mul(2)).take_while(|&b| b <= top).collect();
    if let Some(m) = max_batch {
        batches.extend([m, m.saturating_add(1)]);
    }
    batches.sort_unstable();
    batches.dedup();
    batches.into_iter().map_while(|b| model.totals(b).ok().map(|t| CurvePoint { batch: b, total: t.total })).collect()
}

/// The chosen student with each lever moved once: precision, checkpointing, micro-batch,
/// optimizer, pruning and ZeRO. On one GPU, ZeRO comes as two levers compared like with like:
/// 8 GPUs with DDP against the current form (what 8 replicas cost: NCCL, buckets), then ZeRO-3
/// against DDP on those 8 GPUs (what sharding saves).
fn levers(form: &ExplorerForm, base: &Config, gpu: &Gpu, current: u64) -> Vec<Lever> {
    let mut variants: Vec<(&'static str, String, ExplorerForm)> = Vec::new();
    let mut push = |lever, setting: String, change: &dyn Fn(&mut ExplorerForm)| {
        let mut e = form.clone();
        change(&mut e);
        variants.push((lever, setting, e));
    };
    const DDP: &str = "8 GPUs, DDP";
    let precision = match form.precision {
        Precision::Fp32 if gpu.bf16 => Precision::Bf16,
        Precision::Fp32 => Precision::Fp16,
        _ => Precision::Fp32,
    };
    push("precision", format!("{precision:?}").to_ascii_lowercase(), &|e| e.precision = precision);
    let checkpointing = if form.checkpointing == "none" { "sqrt" } else { "none" };
    push("checkpointing", checkpointing.into(), &|e| e.checkpointing = checkpointing.into());
    if form.batch > 1 {
        push("batch", format!("micro-batch {}", form.batch / 2), &|e| e.batch /= 2);
    }
    let optimizer = if form.optimizer == OptimizerKind::Adamw { OptimizerKind::Sgd } else { OptimizerKind::Adamw };
    push("optimizer", format!("{optimizer:?}").to_ascii_lowercase(), &|e| e.optimizer = optimizer);
    if form.sparsity > 0.0 {
        push("sparsity", "no pruning".into(), &|e| e.sparsity = 0.0);
    } else {
        push("sparsity", "50% magnitude pruning".into(), &|e| {
            e.sparsity = 0.5;
            e.prune = PruneMethod::Magnitude;
        });
    }
    if form.data_parallel == 1 {
        push("data_parallel", DDP.into(), &|e| {
            e.data_parallel = 8;
            e.zero_stage = 0;
        });
        push("zero_stage", "ZeRO-3 on the same 8 GPUs".into(), &|e| {
            e.data_parallel = 8;
            e.zero_stage = 3;
        });
    } else {
        let stage = (form.zero_stage + 1) % 4;
        push("zero_stage", format!("ZeRO-{stage}"), &|e| e.zero_stage = stage);
    }
    let mut levers: Vec<Lever> = Vec::with_capacity(variants.len());
    for (lever, setting, e) in variants {
        let priced = (|| {
            let config = e.config_from(base.clone(), 1.0)?;
            let model = MemoryModel::new(&config, &e.inputs(&config))?;
            let total = model.totals(e.batch)?.total;
            Ok::<_, FormError>((total, batch::search(&model, gpu, config.estimate.safety_margin)?.batch))
        })();
        let ddp = levers.iter().find(|l| l.setting == DDP && lever == "zero_stage");
        let (reference, versus) = match ddp {
            Some(l) => (l.total, Some(DDP.to_string())),
            None => (Some(current), None),
        };
        levers.push(match (priced, reference) {
            (Ok((total, max_batch)), Some(reference)) => Lever {
                lever,
                setting,
                total: Some(total),
                saves: reference.saturating_sub(total),
                costs: total.saturating_sub(reference),
                versus,
                max_batch,
                error: None,
            },
            (Ok((total, max_batch)), None) => Lever {
                lever,
                setting,
                total: Some(total),
                saves: 0,
                costs: 0,
                versus,
                max_batch,
                error: Some(format!("{DDP} cannot be priced to compare with")),
            },
            (Err(err), _) => Lever {
                lever,
                setting,
                total: None,
                saves: 0,
                costs: 0,
                versus,
                max_batch: None,
                error: Some(err.message),
            },
        });
    }
    levers
}

#[cfg(test)]
#[path = "sweep_tests.rs"]
mod tests;
