//! Live memory at each moment of a training step; the peak is the maximum over them, never a
//! sum (`memory-model.md` section 8).
//!
//! [`live`] is the single readable definition of what is alive at each moment, by category.
//! [`scan`] is the fast path the estimates use: the same sums streamed over the layers without
//! allocating; a test checks that it finds, phase by phase, exactly what [`live`] gives.
use crate::memory::breakdown::{Cat, Categories, Moment};
use crate::memory::compiled::Stage;
use crate::memory::memory_model::MemoryModel;
use crate::memory::runtime::Pool;
use crate::memory::sizes::{largest_live, pool_of};
use crate::schema::errors::EstimateError;

/// A moment of the step on one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    TeacherCache,
    TeacherForward,
    /// The student's forward at local layer `l`.
    Forward(usize),
    /// Forward end: the loss is built.
    Loss,
    /// The loss's backward: every activation plus the loss gradients.
    BackwardStart,
    /// The backward of local layer `l`.
    Backward(usize),
    OptimizerStep,
    Evaluation,
}

impl At {
    pub(crate) fn phase(self) -> Moment {
        match self {
            At::TeacherCache => Moment::TeacherCache,
            At::TeacherForward => Moment::TeacherForward,
            At::Forward(_) => Moment::Forward,
            At::Loss => Moment::Loss,
            At::BackwardStart | At::Backward(_) => Moment::Backward,
            At::OptimizerStep => Moment::OptimizerStep,
            At::Evaluation => Moment::Evaluation,
        }
    }
}

/// Where memory is added: a plain total, or a breakdown by category.
pub(crate) trait Sink {
    fn add(&mut self, cat: Cat, pool: &Pool);
    /// Takes back tensors added before (freed during a block's backward).
    fn remove(&mut self, cat: Cat, pool: &Pool);
}

impl Sink for Pool {
    #[inline]
    fn add(&mut self, _: Cat, pool: &Pool) {
        self.merge(pool);
    }

    #[inline]
    fn remove(&mut self, _: Cat, pool: &Pool) {
        Pool::remove(self, pool);
    }
}

/// Bytes by category plus the allocator's view of their sum.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    pub categories: Categories,
    pub pool: Pool,
}

impl Sink for Tally {
    fn add(&mut self, cat: Cat, pool: &Pool) {
        let slot = &mut self.categories.0[cat as usize];
        *slot = slot.saturating_add(pool.allocated);
        self.pool.merge(pool);
    }

    fn remove(&mut self, cat: Cat, pool: &Pool) {
        let slot = &mut self.categories.0[cat as usize];
        *slot = slot.saturating_sub(pool.allocated);
        self.pool.remove(pool);
    }
}

fn statics(sink: &mut impl Sink, parts: &[(Cat, Pool)]) {
    for (cat, pool) in parts {
        sink.add(*cat, pool);
    }
}

/// The largest live set of the teacher's no-grad forward at `b` (live soft targets only).
fn teacher_live(m: &MemoryModel, b: u64) -> (Option<&str>, Pool) {
    match &m.teacher {
        Some(t) if t.live => {
            largest_live(t.layers.iter().map(|(id, s)| (id.as_str(), s.as_slice())), b, m.setup.runtime.cuda)
        }
        _ => (None, Pool::default()),
    }
}

/// The teacher layer whose no-grad forward peaks at `b` (live soft targets).
pub(crate) fn largest_live_teacher(m: &MemoryModel, b: u64) -> Option<String> {
    teacher_live(m, b).0.map(str::to_string)
}

/// One stage's batch-dependent tensors at micro-batch `b`, per layer.
#[derive(Debug, Clone)]
pub(crate) struct AtBatch {
    pub batch: Pool,
    pub student_logits: Pool,
    pub teacher_logits: Pool,
    pub teacher_live: Pool,
    /// Saved set of local layers `..=l` (no checkpointing), one micro-batch.
    pub saved_prefix: Vec<Pool>,
    /// Kept segment inputs of local layers `..=l` (checkpointing).
    pub kept_prefix: Vec<Pool>,
    /// Saved set of the recomputed segment of local layer `l`, up to `l`.
    pub recompute_prefix: Vec<Pool>,
    /// What one micro-batch keeps through its forward (saved set, or kept inputs).
    pub resident: Pool,
    /// The resident sets of the other micro-batches in flight (pipeline).
    pub earlier: Pool,
    pub forward_live: Vec<Pool>,
    pub backward: Vec<Pool>,
    pub release: Vec<Pool>,
    pub loss_saved: Pool,
    pub loss_transient: Pool,
    pub loss_grads: Pool,
}

/// The loss's pools on the last stage: saved, transient, gradients, student and teacher logits.
fn loss_pools(m: &MemoryModel, s: &Stage, b: u64) -> [Pool; 5] {
    let cuda = m.setup.runtime.cuda;
    if !s.last {
        return [Pool::default(); 5];
    }
    let l = &m.student.loss;
    [
        pool_of(&l.saved, b, cuda),
        pool_of(&l.transient, b, cuda),
        pool_of(&l.grads, b, cuda),
        pool_of(&[l.student_logits], b, cuda),
        pool_of(l.teacher_logits.as_slice(), b, cuda),
    ]
}

impl AtBatch {
    pub(crate) fn new(m: &MemoryModel, s: &Stage, b: u64) -> AtBatch {
        let cuda = m.setup.runtime.cuda;
        let n = s.layers.len();
        let mut a = AtBatch {
            batch: if s.first { pool_of(&m.student.batch, b, cuda) } else { Pool::default() },
            student_logits: Pool::default(),
            teacher_logits: Pool::default(),
            teacher_live: teacher_live(m, b).1,
            saved_prefix: Vec::with_capacity(n),
            kept_prefix: Vec::with_capacity(n),
            recompute_prefix: Vec::with_capacity(n),
            resident: Pool::default(),
            earlier: Pool::default(),
            forward_live: Vec::with_capacity(n),
            backward: Vec::with_capacity(n),
            release: Vec::with_capacity(n),
            loss_saved: Pool::default(),
            loss_transient: Pool::default(),
            loss_grads: Pool::default(),
        };
        [a.loss_saved, a.loss_transient, a.loss_grads, a.student_logits, a.teacher_logits] = loss_pools(m, s, b);
        let (mut saved, mut kept, mut segment) = (Pool::default(), Pool::default(), Pool::default());
        for l in &m.student.layers[s.layers.clone()] {
            saved.merge(&pool_of(&l.saved, b, cuda));
            a.saved_prefix.push(saved);
            if s.checkpointing {
                if l.segment_start {
                    segment = Pool::default();
                }
                kept.merge(&pool_of(l.kept.as_slice(), b, cuda));
                segment.merge(&pool_of(&l.recompute, b, cuda));
                a.kept_prefix.push(kept);
                a.recompute_prefix.push(segment);
                a.forward_live.push(pool_of(&l.checkpoint_forward_live, b, cuda));
            } else {
                a.forward_live.push(pool_of(&l.forward_live, b, cuda));
            }
            a.backward.push(pool_of(&l.backward_scratch, b, cuda));
            a.release.push(pool_of(&l.backward_release, b, cuda));
        }
        a.resident = if s.checkpointing { kept } else { saved };
        a.earlier = a.resident.times(s.in_flight.saturating_sub(1));
        a
    }
}

/// Adds what is alive at moment `at` of stage `s` to `sink`.
pub(crate) fn live(m: &MemoryModel, s: &Stage, a: &AtBatch, at: At, sink: &mut impl Sink) {
    use Cat::*;
    statics(sink, &s.pre);
    if at == At::TeacherCache {
        // before training: no optimiser state, no gradients
        sink.add(TeacherLogitCache, &m.eval.cache_build);
        sink.add(TeacherTransient, &m.eval.teacher_live.1);
        sink.add(Batch, &m.eval.batch);
        return;
    }
    statics(sink, &s.train);
    match at {
        At::TeacherCache => {}
        At::Evaluation => {
            sink.add(Batch, &m.eval.batch);
            sink.add(ForwardTransient, &m.eval.live.1);
        }
        At::TeacherForward => {
            sink.add(Batch, &a.batch);
            sink.add(TeacherTransient, &a.teacher_live);
        }
        At::Forward(l) => {
            sink.add(Batch, &a.batch);
            sink.add(Logits, &a.teacher_logits);
            sink.add(CastCache, &s.cast_cache);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, if s.checkpointing { &a.kept_prefix[l] } else { &a.saved_prefix[l] });
            sink.add(ForwardTransient, &a.forward_live[l]);
        }
        At::Loss => {
            sink.add(Batch, &a.batch);
            sink.add(Logits, &a.teacher_logits);
            sink.add(CastCache, &s.cast_cache);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, &a.resident);
            sink.add(Logits, &a.student_logits);
            sink.add(Activations, &a.loss_saved);
            sink.add(LossTransient, &a.loss_transient);
        }
        At::BackwardStart => {
            sink.add(Batch, &a.batch);
            sink.add(Logits, &a.teacher_logits);
            sink.add(Logits, &a.student_logits);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, &a.resident);
            sink.add(Activations, &a.loss_saved);
            sink.add(LossTransient, &a.loss_grads);
        }
        At::Backward(l) => {
            sink.add(Batch, &a.batch);
            sink.add(Logits, &a.teacher_logits);
            sink.add(Logits, &a.student_logits);
            sink.add(Activations, &a.earlier);
            if s.checkpointing {
                sink.add(Activations, &a.kept_prefix[l]);
                sink.add(Activations, &a.recompute_prefix[l]);
            } else {
                sink.add(Activations, &a.saved_prefix[l]);
            }
            sink.remove(Activations, &a.release[l]);
            sink.add(Gradients, &s.grads_suffix[l]);
            sink.add(BackwardTransient, &a.backward[l]);
        }
        At::OptimizerStep => {
            // distill keeps the batch and both logits until after the step (accuracy, logging)
            sink.add(Batch, &a.batch);
            sink.add(Logits, &a.teacher_logits);
            sink.add(Logits, &a.student_logits);
            sink.add(Gradients, &s.grads_suffix[0]);
            sink.add(StepTransient, &s.step_transient);
        }
    }
}

/// Every moment of stage `s`, in step order.
pub(crate) fn moments(m: &MemoryModel, s: &Stage) -> impl Iterator<Item = At> {
    let n = s.layers.len();
    let teacher = m.teacher.as_ref();
    let cache = teacher.is_some_and(|t| t.cache);
    let live_teacher = teacher.is_some_and(|t| t.live);
    cache
        .then_some(At::TeacherCache)
        .into_iter()
        .chain(live_teacher.then_some(At::TeacherForward))
        .chain((0..n).map(At::Forward))
        .chain([At::Loss, At::BackwardStart])
        .chain((0..n).rev().map(At::Backward))
        .chain([At::OptimizerStep, At::Evaluation])
}

/// The largest moment of one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Best {
    pub reserved: u64,
    pub stage: usize,
    pub at: At,
    pub pool: Pool,
}

/// The largest moment of each phase (in [`Moment`] order of the step), at one batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scan {
    pub phases: [Option<Best>; 7],
}

impl Scan {
    #[inline]
    fn offer(&mut self, stage: usize, at: At, pool: Pool, cuda: bool) {
        let reserved = pool.reserved_exact(cuda);
        let slot = &mut self.phases[at.phase() as usize];
        if slot.is_none_or(|b| reserved > b.reserved) {
            *slot = Some(Best { reserved, stage, at, pool });
        }
    }

    /// The largest moment overall (the earliest phase on ties).
    pub(crate) fn peak(&self) -> Option<Best> {
        self.phases.iter().flatten().fold(None, |best: Option<Best>, b| match best {
            Some(p) if p.reserved >= b.reserved => Some(p),
            _ => Some(*b),
        })
    }

    /// The overall peak, or an overflow error if any figure saturated.
    pub(crate) fn checked_peak(&self) -> Result<Best, EstimateError> {
        let peak = self.peak().ok_or_else(|| EstimateError::overflow("an empty plan"))?;
        peak.pool.check("live memory at the peak")?;
        Ok(peak)
    }
}

/// Every moment of every stage at micro-batch `b`, streamed: each tensor sized once or twice,
/// one small allocation. Gives per phase the same maximum as evaluating [`live`] at every
/// moment (tested). Its sums are exact: the model's bound on all tensors together is checked
/// first.
///
/// # Errors
/// [`EstimateError::Overflow`] when the tensors of the plan could exceed 2^62 bytes in total.
pub(crate) fn scan(m: &MemoryModel, b: u64) -> Result<Scan, EstimateError> {
    m.check_bound(b)?;
    let cuda = m.setup.runtime.cuda;
    // each distinct size rounded once: a one-tensor pool per size
    let mut stack = [Pool::default(); 32];
    let mut heap = Vec::new();
    let ones: &mut [Pool] = if m.layout.unique.len() <= stack.len() {
        &mut stack[..m.layout.unique.len()]
    } else {
        heap.resize(m.layout.unique.len(), Pool::default());
        &mut heap
    };
    for (one, s) in ones.iter_mut().zip(&m.layout.unique) {
        one.tensor_exact(s.per_sample * b + s.fixed, cuda);
    }
    let ones: &[Pool] = ones;
    let span = |(start, end): (u32, u32)| {
        let mut p = Pool::default();
        for &i in &m.layout.index[start as usize..end as usize] {
            p.merge_exact(&ones[i as usize]);
        }
        p
    };
    let mut out = Scan::default();
    for (si, s) in m.student.stages.iter().enumerate() {
        let hot = &m.layout.layers[s.layers.clone()];
        let mut base = s.pre_total;
        if m.teacher.as_ref().is_some_and(|t| t.cache) {
            let p = base.plus_exact(&m.eval.cache_build).plus_exact(&m.eval.teacher_live.1).plus_exact(&m.eval.batch);
            out.offer(si, At::TeacherCache, p, cuda);
        }
        base.merge_exact(&s.train_total);
        let batch = if s.first { span(m.layout.loss[5]) } else { Pool::default() };
        if m.teacher.as_ref().is_some_and(|t| t.live) {
            out.offer(si, At::TeacherForward, base.plus_exact(&batch).plus_exact(&teacher_live(m, b).1), cuda);
        }
        let (loss_saved, loss_transient, loss_grads, student_logits, teacher_logits) = if s.last {
            let l = &m.layout.loss;
            (span(l[0]), span(l[1]), span(l[2]), span(l[3]), span(l[4]))
        } else {
            Default::default()
        };
        let ckpt = s.checkpointing;
        let resident_of = |h: &crate::memory::compiled::HotLayer| if ckpt { span(h.kept) } else { span(h.saved) };
        let earlier = if s.in_flight > 1 {
            let mut r = Pool::default();
            hot.iter().for_each(|h| r.merge_exact(&resident_of(h)));
            r.times(s.in_flight - 1)
        } else {
            Pool::default()
        };
        // forward: `running` is the statics, batch, teacher logits, cast cache and the
        // activations saved so far
        let step = base.plus_exact(&batch).plus_exact(&teacher_logits);
        let mut running = step.plus_exact(&s.cast_cache).plus_exact(&earlier);
        let mut resident = Pool::default();
        for (i, h) in hot.iter().enumerate() {
            let r = resident_of(h);
            resident.merge_exact(&r);
            running.merge_exact(&r);
            let live = if ckpt { h.checkpoint_forward_live } else { h.forward_live };
            out.offer(si, At::Forward(i), running.plus_exact(&span(live)), cuda);
        }
        // forward end, then the backward: `running` is the statics, batch, both logits and the
        // activations not yet freed
        let held = running.plus_exact(&student_logits).plus_exact(&loss_saved);
        out.offer(si, At::Loss, held.plus_exact(&loss_transient), cuda);
        let mut running = step.plus_exact(&student_logits).plus_exact(&earlier).plus_exact(&resident);
        out.offer(si, At::BackwardStart, running.plus_exact(&loss_saved).plus_exact(&loss_grads), cuda);
        for (i, h) in hot.iter().enumerate().rev() {
            if ckpt && (i + 1 == hot.len() || hot[i + 1].segment_start) {
                // entering a segment from its end: the recomputed segment's saved set
                let start = (0..=i).rev().find(|&k| hot[k].segment_start).unwrap_or(0);
                hot[start..=i].iter().for_each(|k| running.merge_exact(&span(k.recompute)));
            }
            let mut p = running.plus_exact(&s.grads_suffix[i]);
            if h.backward_release.0 != h.backward_release.1 {
                p.remove_exact(&span(h.backward_release));
            }
            p.merge_exact(&span(h.backward_scratch));
            out.offer(si, At::Backward(i), p, cuda);
            running.remove_exact(&resident_of(h));
            if ckpt {
                running.remove_exact(&span(h.recompute));
            }
        }
        let mut p = step.plus_exact(&student_logits).plus_exact(&s.grads_suffix[0]);
        p.merge_exact(&s.step_transient);
        out.offer(si, At::OptimizerStep, p, cuda);
        out.offer(si, At::Evaluation, base.plus_exact(&m.eval.batch).plus_exact(&m.eval.live.1), cuda);
    }
    Ok(out)
}

/// Exact bytes of every moment as `(fixed, per_sample)`: the linear model
/// `M(b) = M_fixed + b * m_lin` of `memory-model.md` section 9, one line per moment (before
/// allocator rounding, which only adds).
pub(crate) fn lines(m: &MemoryModel) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for s in &m.student.stages {
        let a0 = AtBatch::new(m, s, 0);
        let a1 = AtBatch::new(m, s, 1);
        for at in moments(m, s) {
            let (mut p0, mut p1) = (Pool::default(), Pool::default());
            live(m, s, &a0, at, &mut p0);
            live(m, s, &a1, at, &mut p1);
            out.push((p0.requested, p1.requested.saturating_sub(p0.requested)));
        }
    }
    out
}

/// Evaluates [`live`] at every moment (the slow definition), for tests of [`scan`].
#[cfg(test)]
pub(crate) fn scan_by_definition(m: &MemoryModel, b: u64) -> Scan {
    let mut out = Scan::default();
    for (si, s) in m.student.stages.iter().enumerate() {
        let a = AtBatch::new(m, s, b);
        for at in moments(m, s) {
            let mut pool = Pool::default();
            live(m, s, &a, at, &mut pool);
            out.offer(si, at, pool, m.setup.runtime.cuda);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::inputs::Inputs;
    use crate::schema::Config;

    fn model(toml: &str) -> MemoryModel {
        MemoryModel::new(&Config::from_toml_str(toml).unwrap(), &Inputs::default()).unwrap()
    }

    const CASES: &[&str] = &[
        "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256, 128]\ndropout = 0.1\n\
         [teacher]\nparams = 1000000\n",
        "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [8, 16]\nhidden = [32]\n\
         norm = \"batch\"\ncheckpointing = \"sqrt\"\n[teacher]\npreset = \"fashion-mnist-cnn\"\ncache_logits = false\n\
         [train]\nprecision = \"bf16\"\n",
        "[data]\ninput_shape = [64]\nclasses = 100\n[student]\nfamily = \"transformer\"\ndropout = 0.1\ncheckpointing = 2\n\
         [student.transformer]\nvocab = 100\nlayers = 4\nd_model = 64\nheads = 4\nattention_dropout = 0.1\n\
         [teacher]\nparams = 5000000\n[estimate]\npipeline_stages = 2\ndata_parallel = 4\nzero_stage = 2\n",
    ];

    #[test]
    fn the_fast_scan_finds_what_the_definition_gives() {
        for case in CASES {
            let m = model(case);
            for b in [1, 7, 64, 1000] {
                let (fast, slow) = (scan(&m, b).unwrap(), scan_by_definition(&m, b));
                assert_eq!(fast.phases, slow.phases, "batch {b}: {case}");
                assert_eq!(fast.peak(), slow.peak(), "batch {b}: {case}");
            }
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::memory::inputs::Inputs;
    use crate::schema::Config;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The streamed scan equals the definition, phase by phase, on random plans.
        #[test]
        fn scan_equals_definition(
            layers in 1..4u64, heads in 1..4u64, s in 1..64u64, flash in any::<bool>(), drop in any::<bool>(),
            ckpt in 0..4u64, pp in 1..4u64, precision in 0..4usize, cpu in any::<bool>(), cache in any::<bool>(),
            b in 1..3000u64,
        ) {
            let text = format!(
                "[data]\ninput_shape = [{s}]\nclasses = 50\n[student]\nfamily = \"transformer\"\ndropout = {d}\n\
                 checkpointing = {c}\n[student.transformer]\nvocab = 50\nlayers = {layers}\nd_model = {h}\nheads = {heads}\n\
                 attention = \"{k}\"\nattention_dropout = {d}\n[teacher]\nparams = 1000\ncache_logits = {cache}\n\
                 [train]\nprecision = \"{p}\"\n[estimate]\ntarget = \"{t}\"\npipeline_stages = {pp}\n",
                d = if drop { 0.1 } else { 0.0 },
                c = if ckpt == 0 { "\"none\"".to_string() } else { ckpt.to_string() },
                h = 8 * heads,
                k = if flash { "flash" } else { "math" },
                p = ["fp32", "bf16", "fp16", "pure_bf16"][precision],
                t = if cpu { "cpu" } else { "cuda" },
            );
            let m = MemoryModel::new(&Config::from_toml_str(&text).unwrap(), &Inputs::default()).unwrap();
            let (fast, slow) = (scan(&m, b).unwrap(), scan_by_definition(&m, b));
            prop_assert_eq!(fast.phases, slow.phases);
        }
    }
}
