//! Everything the explorer shows for one form ([`ExplorerForm`]), computed by the estimator: the
//! breakdown of each student size, memory against micro-batch with the largest batch, the
//! largest batch on every catalogue GPU, and what each lever changes. Every figure is in bytes
//! (or samples for batches); the page only displays them.
use serde::Serialize;

use crate::explorer::form::{ExplorerForm, FormError};
use crate::memory::batch;
use crate::memory::breakdown::{Cat, Plan};
use crate::schema::catalogue::{catalogue, Gpu};
use crate::schema::limits::MAX_BATCH;
use crate::schema::{Config, OptimizerKind, Precision, PruneMethod, Target};
use crate::{Inputs, MemoryModel};

/// Width factors of the compared students, relative to the chosen width multiplier.
pub const SIZES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Index of the chosen student (factor 1) in [`SIZES`].
pub const CHOSEN: usize = 2;

/// The peak memory in the explorer's seven groups, in bytes; they add up to `total`, the
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
    /// CUDA context, NCCL, cuBLAS workspace, allocator rounding and segments, fragmentation
    /// reserve (and resident datasets, which the explorer leaves out).
    pub runtime_overhead: u64,
    /// The device total.
    pub total: u64,
}

/// The groups in stacking order: (JSON key, label).
pub const GROUPS: [(&str, &str); 7] = [
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("optimizer_states", "optimizer states"),
    ("activations", "activations"),
    ("teacher", "teacher"),
    ("kd_buffers", "KD buffers"),
    ("runtime_overhead", "runtime overhead"),
];

/// Categories of each group but the runtime overhead, which is the rest of the device total.
const MEMBERS: [&[Cat]; 6] = [
    &[Cat::StudentWeights, Cat::CastCache, Cat::PruneMasks, Cat::ZeroGather],
    &[Cat::Gradients, Cat::DdpBuckets],
    &[Cat::OptimizerStates, Cat::LossScaler, Cat::StepTransient],
    &[Cat::Activations, Cat::Batch, Cat::ForwardTransient, Cat::BackwardTransient],
    &[Cat::TeacherWeights, Cat::TeacherTransient, Cat::TeacherLogitCache],
    &[Cat::Logits, Cat::LossTransient],
];

impl Breakdown {
    /// Groups the peak of `plan`.
    pub fn of(plan: &Plan) -> Breakdown {
        let sum = |cats: &[Cat]| cats.iter().fold(0u64, |acc, &c| acc.saturating_add(plan.peak.get(c)));
        let [w, g, o, a, t, k] = MEMBERS.map(sum);
        let named = [w, g, o, a, t, k].iter().fold(0u64, |acc, &v| acc.saturating_add(v));
        Breakdown {
            weights: w,
            gradients: g,
            optimizer_states: o,
            activations: a,
            teacher: t,
            kd_buffers: k,
            runtime_overhead: plan.totals.total.saturating_sub(named),
            total: plan.totals.total,
        }
    }

    /// `(key, bytes)` in [`GROUPS`] order.
    pub fn groups(&self) -> [(&'static str, u64); 7] {
        let v = [
            self.weights,
            self.gradients,
            self.optimizer_states,
            self.activations,
            self.teacher,
            self.kd_buffers,
            self.runtime_overhead,
        ];
        let mut out = [("", 0); 7];
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
    /// Bytes less than the current total (0 when it costs).
    pub saves: u64,
    /// Bytes more than the current total (0 when it saves).
    pub costs: u64,
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
    /// The chosen student's full estimate at `batch` (phases, categories, layers).
    pub plan: Plan,
    /// The chosen student's largest micro-batch on `gpu`.
    pub max_batch: Option<u64>,
    /// The chosen student's device total against micro-batch (powers of two, `max_batch` and
    /// the batch after it).
    pub curve: Vec<CurvePoint>,
    pub gpus: Vec<GpuRow>,
    pub levers: Vec<Lever>,
}

/// Prices the form: every view of the explorer.
///
/// # Errors
/// The form's or the estimator's error for the chosen student (other sizes and levers carry
/// their own errors instead).
pub fn sweep(form: &ExplorerForm) -> Result<Sweep, FormError> {
    let base = form.base()?;
    let config = form.config_from(base.clone(), 1.0)?;
    let model = MemoryModel::new(&config, &Inputs::default())?;
    let gpu: &Gpu = model.gpu().ok_or_else(|| FormError { field: Some("gpu"), message: "choose a GPU".into() })?;
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
        gpus: gpu_rows(&config, &model, margin)?,
        levers: levers(form, &base, gpu, plan.totals.total),
        plan,
    })
}

/// The largest micro-batch on every catalogue GPU, as [`crate::max_batch_per_gpu`] finds it,
/// with one compiled model per distinct runtime: a GPU enters `MemoryModel::new` only through its CUDA
/// context and cuBLAS workspace (the batch search reads its memory), so the catalogue needs two
/// models, not sixteen (the test `gpu_rows_equal_max_batch_per_gpu` holds this to the estimator's
/// own answer).
fn gpu_rows(config: &Config, chosen: &MemoryModel, margin: f64) -> Result<Vec<GpuRow>, FormError> {
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
                models.push((runtime(g), MemoryModel::new(&c, &Inputs::default())?));
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
        let model = MemoryModel::new(&form.config_from(base.clone(), scale)?, &Inputs::default())?;
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
/// optimizer, pruning and ZeRO.
fn levers(form: &ExplorerForm, base: &Config, gpu: &Gpu, current: u64) -> Vec<Lever> {
    let mut variants: Vec<(&'static str, String, ExplorerForm)> = Vec::new();
    let mut push = |lever, setting: String, change: &dyn Fn(&mut ExplorerForm)| {
        let mut e = form.clone();
        change(&mut e);
        variants.push((lever, setting, e));
    };
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
        push("zero_stage", "8 GPUs, ZeRO-3".into(), &|e| {
            e.data_parallel = 8;
            e.zero_stage = 3;
        });
    } else {
        let stage = (form.zero_stage + 1) % 4;
        push("zero_stage", format!("ZeRO-{stage}"), &|e| e.zero_stage = stage);
    }
    variants
        .into_iter()
        .map(|(lever, setting, e)| {
            let priced = (|| {
                let config = e.config_from(base.clone(), 1.0)?;
                let model = MemoryModel::new(&config, &Inputs::default())?;
                let total = model.totals(e.batch)?.total;
                Ok::<_, FormError>((total, batch::search(&model, gpu, config.estimate.safety_margin)?.batch))
            })();
            match priced {
                Ok((total, max_batch)) => Lever {
                    lever,
                    setting,
                    total: Some(total),
                    saves: current.saturating_sub(total),
                    costs: total.saturating_sub(current),
                    max_batch,
                    error: None,
                },
                Err(err) => {
                    Lever { lever, setting, total: None, saves: 0, costs: 0, max_batch: None, error: Some(err.message) }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::Just;

    use super::*;
    use crate::explorer::form::{scenario, SCENARIOS};
    use crate::{estimate, max_batch};

    #[test]
    fn groups_cover_every_category_once_and_add_up_to_the_total() {
        let mut seen: Vec<Cat> = MEMBERS.iter().flat_map(|m| m.iter().copied()).collect();
        seen.extend([Cat::CublasWorkspace, Cat::Dataset]); // in the runtime overhead
        seen.sort_by_key(|&c| c as usize);
        assert_eq!(seen, Cat::ALL.to_vec());
        for s in &SCENARIOS {
            let form = ExplorerForm::for_scenario(s, "H200");
            let plan = estimate(&form.config().unwrap(), &Inputs::default()).unwrap();
            let b = Breakdown::of(&plan);
            let sum: u64 = b.groups().iter().map(|g| g.1).sum();
            assert_eq!(sum, plan.totals.total, "{}", s.key);
            // the six named groups are the allocated tensors less the cuBLAS workspace
            let cublas = plan.peak.get(Cat::CublasWorkspace);
            assert_eq!(sum - b.runtime_overhead, plan.totals.allocated - cublas, "{}", s.key);
            if s.key == "gpt2" {
                assert!(b.weights > 0 && b.activations > 0 && b.teacher > 0 && b.kd_buffers > 0, "{b:?}");
            }
        }
    }

    #[test]
    fn the_sweep_equals_the_estimator_on_each_config() {
        let mut form = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
        form.width = 2.0;
        let s = sweep(&form).unwrap();
        assert_eq!(s.students.len(), SIZES.len());
        for st in &s.students {
            let config = form.config_at(st.scale).unwrap();
            let plan = estimate(&config, &Inputs::default()).unwrap();
            assert_eq!(st.breakdown.unwrap().total, plan.totals.total, "scale {}", st.scale);
            assert_eq!(st.params, Some(plan.params.student));
            assert_eq!(st.width, 2.0 * st.scale);
        }
        let config = form.config().unwrap();
        assert_eq!(s.plan, estimate(&config, &Inputs::default()).unwrap());
        let t4 = crate::gpu("T4").unwrap();
        assert_eq!(s.max_batch, max_batch(&config, &Inputs::default(), t4, 0.05).unwrap());
        assert_eq!(s.capacity, t4.memory);
        assert_eq!(s.gpus.len(), crate::catalogue().len());
        assert_eq!(s.gpus[0].max_batch, s.max_batch, "T4 is the first catalogue GPU");
        // wider students never need less memory (the smallest ones share allocator segments)
        let totals: Vec<u64> = s.students.iter().map(|st| st.breakdown.unwrap().total).collect();
        assert!(totals.windows(2).all(|w| w[0] <= w[1]) && totals[0] < totals[4], "{totals:?}");
    }

    #[test]
    fn gpu_rows_equal_max_batch_per_gpu() {
        for s in &SCENARIOS {
            for &family in s.families {
                for gpu in ["T4", "H200"] {
                    let form = ExplorerForm { family, ..ExplorerForm::for_scenario(s, gpu) };
                    let config = form.config().unwrap();
                    let want = crate::max_batch_per_gpu(&config, &Inputs::default(), 0.05).unwrap();
                    let want: Vec<_> = want.iter().map(|(g, b)| (g.name, *b)).collect();
                    let got: Vec<_> = sweep(&form).unwrap().gpus.iter().map(|r| (r.gpu, r.max_batch)).collect();
                    assert_eq!(got, want, "{} {family:?} on {gpu}", s.key);
                }
            }
        }
    }

    #[test]
    fn the_curve_brackets_the_largest_batch() {
        let form = ExplorerForm::default();
        let s = sweep(&form).unwrap();
        let m = s.max_batch.expect("the default student fits its GPU");
        let at = |b: u64| s.curve.iter().find(|p| p.batch == b).map(|p| p.total);
        assert!(at(m).unwrap() <= s.budget);
        assert!(at(m + 1).unwrap() > s.budget);
        assert!(s.curve.windows(2).all(|w| w[0].batch < w[1].batch && w[0].total <= w[1].total));
        assert!(s.curve.last().unwrap().batch >= 2 * m);
    }

    #[test]
    fn levers_are_priced_against_the_current_total() {
        let form = ExplorerForm { precision: Precision::Fp32, ..ExplorerForm::default() };
        let s = sweep(&form).unwrap();
        let now = s.plan.totals.total;
        let lever = |name: &str| s.levers.iter().find(|l| l.lever == name).unwrap();
        for l in &s.levers {
            let total = l.total.unwrap_or_else(|| panic!("{}: {:?}", l.lever, l.error));
            assert_eq!(now - l.saves + l.costs, total, "{}", l.lever);
        }
        assert_eq!(s.levers.len(), 6);
        // each lever is the estimate of the form with that one field changed
        let mut zero = form.clone();
        zero.data_parallel = 8;
        zero.zero_stage = 3;
        let plan = estimate(&zero.config().unwrap(), &Inputs::default()).unwrap();
        assert_eq!(lever("zero_stage").total, Some(plan.totals.total));
        assert!(lever("precision").saves > 0, "bf16 activations are smaller");
        assert!(lever("checkpointing").saves > 0);
        assert!(lever("batch").saves > 0);
        assert!(lever("optimizer").saves > 0, "SGD keeps one moment, AdamW two");
        assert!(lever("sparsity").costs > 0, "masks cost memory while training");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Whatever the form holds, the sweep answers (figures or a message) and never panics.
        #[test]
        fn any_form_gives_an_answer_not_a_panic(
            teacher in 0usize..SCENARIOS.len(),
            family in 0usize..2,
            width in proptest::prop_oneof![Just(-1.0), Just(f64::NAN), 1e-6..80.0f64],
            depth in 1e-3..20.0f64,
            input in proptest::prop_oneof![Just(0u64), 1u64..4096, Just(1 << 20), Just(u64::MAX)],
            batch in proptest::prop_oneof![Just(0u64), 1u64..100_000, Just(MAX_BATCH), Just(u64::MAX)],
            sparsity in -0.5..1.5f64,
            data_parallel in proptest::prop_oneof![Just(0u64), 1u64..64, Just(u64::MAX)],
            zero_stage in 0u64..6,
            checkpointing in proptest::prop_oneof![Just("none"), Just("sqrt"), Just("3"), Just("0"), Just("x")],
            gpu in proptest::prop_oneof![Just("T4"), Just("H200"), Just("A100-40GB-MIG-1g.5gb"), Just("none")],
        ) {
            let s = &SCENARIOS[teacher];
            let form = ExplorerForm {
                family: s.families[family % s.families.len()],
                width, depth, input, batch, sparsity, data_parallel, zero_stage,
                checkpointing: checkpointing.into(),
                ..ExplorerForm::for_scenario(s, gpu)
            };
            match sweep(&form) {
                Ok(sw) => {
                    proptest::prop_assert_eq!(sw.students.len(), SIZES.len());
                    let chosen = sw.students[CHOSEN].breakdown.map(|b| b.total);
                    proptest::prop_assert_eq!(chosen, Some(sw.plan.totals.total));
                }
                Err(e) => proptest::prop_assert!(!e.message.is_empty()),
            }
        }
    }

    #[test]
    fn a_size_that_cannot_be_priced_carries_its_error() {
        // 2^20 x 2^20 images: the chosen student (widths x8) is priced, the two wider ones are not
        let mut form = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
        form.width = 8.0;
        form.input = 1 << 20;
        let s = sweep(&form).unwrap();
        let overflow =
            "the step at micro-batch 128 overflows 64-bit bytes (more than 16 EiB): the plan is too large to price";
        let errors: Vec<Option<&str>> = s.students.iter().map(|st| st.error.as_deref()).collect();
        assert_eq!(errors, [None, None, None, Some(overflow), Some(overflow)]);
        let wide = &s.students[3];
        assert_eq!((wide.width, wide.params, wide.breakdown, wide.max_batch), (16.0, None, None, None));
        assert_eq!(s.students[CHOSEN].params, Some(s.plan.params.student));
        assert_eq!(s.students[CHOSEN].fits, Some(false));
    }
}
