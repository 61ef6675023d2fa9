//! Compiles a `Config` and the caller's [`Inputs`] into a [`MemoryModel`]: everything that does
//! not depend on the micro-batch, so that one estimate at a given batch is a short pass over
//! precomputed per-layer sizes (`crate::memory::moments`).
//!
//! The steps, each in its own file:
//! * `Setup`: the runtime costs of the device and the batch the caller fixed (`setup`);
//! * the student's layers priced by `crate::memory::layer` along the forward chain, with each
//!   saved storage attributed to the first layer that saves it, per pipeline stage
//!   (`arch::split` of the layer list) and checkpoint segment (`student_chain`);
//! * the teacher (weights, working set: `teacher_plan`), the loss and the per-step batch
//!   tensors of `distill` (`distill/src/train/trainer.rs`: raw and normalised inputs, labels, indices;
//!   logits kept until after the optimiser step: `step_tensors`);
//! * model states per GPU (tensor-parallel split, then ZeRO sharding), masks, buckets, and the
//!   memory every stage shares (`stage_plan`); gradients are returned by `run_backward`, none
//!   are kept between steps;
//! * the FLOPs of a step per sample (`flop_plan`, counted by `crate::memory::flops`);
//! * the passes at the evaluation batch (`eval_plan`), counts and notes (`summary`), and the
//!   layout of the fast scan (`scan_layout`).
use std::ops::Range;

use crate::memory::compiled::{EvalPlan, ScanLayout, Setup, StudentPlan, Summary, TeacherPlan};
use crate::memory::errors::EstimateError;
use crate::memory::flops::FlopPlan;
use crate::memory::inputs::Inputs;
use crate::memory::setup::Compile;
use crate::memory::student_chain::Forward;
use crate::schema::arch;
use crate::schema::catalogue::Gpu;
use crate::schema::Config;

/// A configuration compiled for estimates at any micro-batch.
#[derive(Debug, Clone)]
pub struct MemoryModel {
    pub(crate) setup: Setup,
    pub(crate) student: StudentPlan,
    pub(crate) teacher: Option<TeacherPlan>,
    pub(crate) eval: EvalPlan,
    pub(crate) summary: Summary,
    pub(crate) layout: ScanLayout,
    /// Per-sample FLOPs of a step (`crate::memory::flops`).
    pub(crate) flops: FlopPlan,
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
        inputs.check()?;
        let setup = Setup::of(config, inputs)?;
        let mut c = Compile::new(config, inputs, &setup);
        let mut forward = Forward::price(config, &c.ctx)?;
        let ranges = stage_ranges(config, forward.layers.len())?;
        let (mut layers, x0_saved) = forward.layer_plans(&ranges, config.student.checkpointing)?;
        if c.recipe.autocast {
            // distill evaluates without autocast (`distill/src/train/eval.rs`): the no-grad forward
            // runs in the weights' dtype, which sizes its activations and attention scores
            let mut ctx = c.ctx;
            ctx.recipe.autocast = false;
            ctx.recipe.compute = ctx.recipe.weight;
            let lives = Forward::price(config, &ctx)?.inference_lives()?;
            for (lp, live) in layers.iter_mut().zip(lives) {
                lp.inference_live = live;
            }
        }
        let checkpointing = arch::checkpoint_segments(forward.layers.len(), config.student.checkpointing).is_some();
        let teacher = c.teacher()?;
        let kd = config.kd.alpha > 0.0 && teacher.is_some();
        let mut loss = c.loss(&forward, kd)?;
        c.hidden(&mut forward, &mut layers, &mut loss, teacher.as_ref().map(|(t, _)| t))?;
        let batch = c.batch_tensors(&forward, x0_saved || checkpointing)?;
        // a language model's teacher runs on every batch: its logits [N, S, vocab] are not
        // cached, whatever teacher.cache_logits says (as distill trains it)
        // hidden-state pairs ([[kd.hidden]]) need the teacher's hidden states: it runs live too
        let cache = config.teacher.cache_logits && !config.student.is_language_model() && config.kd.hidden.is_empty();
        // at alpha = 0 hidden pairs still run the teacher, for its hidden states alone
        let runs = kd || (teacher.is_some() && !config.kd.hidden.is_empty());
        let teacher_plan = teacher.as_ref().map(|(_, live)| TeacherPlan {
            layers: live.clone(),
            live: runs && !cache,
            cache: kd && cache,
        });
        let teacher = teacher.map(|(t, _)| t);
        let online = teacher_plan.as_ref().is_some_and(|t| t.live);
        let flops = c.flops(&forward, &ranges, teacher.as_ref(), online, kd, loss.rows);
        let shared = c.shared(teacher.as_ref(), teacher_plan.as_ref(), loss.rows)?;
        let stages = c.stages(&forward, &ranges, &mut layers, &shared, checkpointing)?;
        let student = StudentPlan { layers, stages, loss, batch };
        let eval = c.eval(&student, teacher_plan.as_ref(), shared.cache_build)?;
        let summary = c.summary(&forward.layers, teacher.as_ref(), &shared.sharding)?;
        let layout = ScanLayout::of(&student, teacher_plan.as_ref(), &eval);
        Ok(MemoryModel { setup, student, teacher: teacher_plan, eval, summary, layout, flops })
    }

    /// The micro-batch the config fixes (or the caller passed), if any.
    pub fn default_batch(&self) -> Option<u64> {
        self.setup.default_batch
    }

    /// The GPU the plan fits: the caller's device, else the one the config names, if any.
    pub fn gpu(&self) -> Option<&Gpu> {
        self.setup.gpu.as_ref()
    }

    /// The fraction of the GPU's memory `estimate.safety_margin` keeps free.
    pub fn safety_margin(&self) -> f64 {
        self.setup.safety_margin
    }

    /// Checks that every tensor of the plan at micro-batch `b`, all together and each rounded
    /// up by a segment, stays below 2^62 bytes, so that every partial sum is exact in u64.
    ///
    /// # Errors
    /// [`EstimateError::Overflow`] otherwise (a plan of exbibytes).
    pub(crate) fn check_bound(&self, b: u64) -> Result<(), EstimateError> {
        let (per_sample, fixed) = self.layout.bound;
        let total = per_sample.checked_mul(u128::from(b)).and_then(|v| v.checked_add(fixed));
        match total {
            Some(t) if t < 1 << 62 => Ok(()),
            _ => Err(EstimateError::overflow(format!("the step at micro-batch {b}"))),
        }
    }
}

/// The layers of each pipeline stage (`estimate.pipeline_stages` over `n` layers).
///
/// # Errors
/// [`EstimateError::Invalid`] on `estimate.pipeline_stages` for more stages than layers.
fn stage_ranges(config: &Config, n: usize) -> Result<Vec<Range<usize>>, EstimateError> {
    let p = usize::try_from(config.estimate.pipeline_stages).unwrap_or(usize::MAX);
    if p > n {
        return Err(EstimateError::invalid(
            "estimate.pipeline_stages",
            format!("{p} stages for {n} layers: use at most one stage per layer"),
        ));
    }
    Ok(arch::split(n, p))
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<MemoryModel>();
}
