//! Live memory at each moment of a training step; the peak is the maximum over them, never a
//! sum (`docs/memory-model.md` section 8).
//!
//! [`live`] is the single readable definition of what is alive at each moment, by category.
//! `crate::memory::scan` is the fast path the estimates use: the same sums streamed over the
//! layers without allocating; a test checks that it finds, moment by moment, exactly what
//! [`live`] gives.
use crate::memory::breakdown::{Cat, Categories, Moment};
use crate::memory::compiled::Stage;
use crate::memory::memory_model::MemoryModel;
use crate::memory::runtime::AllocatorPool;
use crate::memory::sizes::{largest_live, pool_of};

/// A point of the step on one stage: its [`Moment`] and, in the forward and backward, the
/// local layer.
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
    pub(crate) fn moment(self) -> Moment {
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
    fn add(&mut self, cat: Cat, pool: &AllocatorPool);
    /// Takes back tensors added before (freed during a block's backward).
    fn remove(&mut self, cat: Cat, pool: &AllocatorPool);
}

impl Sink for AllocatorPool {
    #[inline]
    fn add(&mut self, _: Cat, pool: &AllocatorPool) {
        self.merge(pool);
    }

    #[inline]
    fn remove(&mut self, _: Cat, pool: &AllocatorPool) {
        AllocatorPool::remove(self, pool);
    }
}

/// Bytes by category plus the allocator's view of their sum.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    pub categories: Categories,
    pub pool: AllocatorPool,
}

impl Sink for Tally {
    fn add(&mut self, cat: Cat, pool: &AllocatorPool) {
        let slot = &mut self.categories.0[cat as usize];
        *slot = slot.saturating_add(pool.allocated);
        self.pool.merge(pool);
    }

    fn remove(&mut self, cat: Cat, pool: &AllocatorPool) {
        let slot = &mut self.categories.0[cat as usize];
        *slot = slot.saturating_sub(pool.allocated);
        self.pool.remove(pool);
    }
}

fn statics(sink: &mut impl Sink, parts: &[(Cat, AllocatorPool)]) {
    for (cat, pool) in parts {
        sink.add(*cat, pool);
    }
}

/// The largest live set of the teacher's no-grad forward at `b` (live soft targets only).
pub(crate) fn teacher_live(m: &MemoryModel, b: u64) -> (Option<&str>, AllocatorPool) {
    match &m.teacher {
        Some(t) if t.live => {
            largest_live(t.layers.iter().map(|(id, s)| (id.as_str(), s.as_slice())), b, m.setup.runtime.cuda)
        }
        _ => (None, AllocatorPool::default()),
    }
}

/// The teacher layer whose no-grad forward peaks at `b` (live soft targets).
pub(crate) fn largest_live_teacher(m: &MemoryModel, b: u64) -> Option<String> {
    teacher_live(m, b).0.map(str::to_string)
}

/// One stage's batch-dependent tensors at micro-batch `b`, per layer.
#[derive(Debug, Clone)]
pub(crate) struct AtBatch {
    pub batch: AllocatorPool,
    pub student_logits: AllocatorPool,
    pub teacher_logits: AllocatorPool,
    pub teacher_live: AllocatorPool,
    /// Saved set of local layers `..=l` (no checkpointing), one micro-batch.
    pub saved_prefix: Vec<AllocatorPool>,
    /// Kept segment inputs of local layers `..=l` (checkpointing).
    pub kept_prefix: Vec<AllocatorPool>,
    /// Saved set of the recomputed segment of local layer `l`, up to `l`.
    pub recompute_prefix: Vec<AllocatorPool>,
    /// What one micro-batch keeps through its forward (saved set, or kept inputs).
    pub resident: AllocatorPool,
    /// The resident sets of the other micro-batches in flight (pipeline).
    pub earlier: AllocatorPool,
    pub forward_live: Vec<AllocatorPool>,
    pub backward: Vec<AllocatorPool>,
    pub release: Vec<AllocatorPool>,
    pub loss_saved: AllocatorPool,
    pub loss_transient: AllocatorPool,
    pub loss_grads: AllocatorPool,
}

/// The loss's pools on the last stage: saved, transient, gradients, student and teacher logits.
fn loss_pools(m: &MemoryModel, s: &Stage, b: u64) -> [AllocatorPool; 5] {
    let cuda = m.setup.runtime.cuda;
    if !s.last {
        return [AllocatorPool::default(); 5];
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
            batch: if s.first { pool_of(&m.student.batch, b, cuda) } else { AllocatorPool::default() },
            student_logits: AllocatorPool::default(),
            teacher_logits: AllocatorPool::default(),
            teacher_live: teacher_live(m, b).1,
            saved_prefix: Vec::with_capacity(n),
            kept_prefix: Vec::with_capacity(n),
            recompute_prefix: Vec::with_capacity(n),
            resident: AllocatorPool::default(),
            earlier: AllocatorPool::default(),
            forward_live: Vec::with_capacity(n),
            backward: Vec::with_capacity(n),
            release: Vec::with_capacity(n),
            loss_saved: AllocatorPool::default(),
            loss_transient: AllocatorPool::default(),
            loss_grads: AllocatorPool::default(),
        };
        [a.loss_saved, a.loss_transient, a.loss_grads, a.student_logits, a.teacher_logits] = loss_pools(m, s, b);
        let (mut saved, mut kept, mut segment) =
            (AllocatorPool::default(), AllocatorPool::default(), AllocatorPool::default());
        for l in &m.student.layers[s.layers.clone()] {
            saved.merge(&pool_of(&l.saved, b, cuda));
            a.saved_prefix.push(saved);
            if s.checkpointing {
                if l.segment_start {
                    segment = AllocatorPool::default();
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
            held(sink, a, false);
            sink.add(CastCache, &s.cast_cache);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, if s.checkpointing { &a.kept_prefix[l] } else { &a.saved_prefix[l] });
            sink.add(ForwardTransient, &a.forward_live[l]);
        }
        At::Loss => {
            held(sink, a, true);
            sink.add(CastCache, &s.cast_cache);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, &a.resident);
            sink.add(Activations, &a.loss_saved);
            sink.add(LossTransient, &a.loss_transient);
        }
        At::BackwardStart => {
            held(sink, a, true);
            sink.add(Activations, &a.earlier);
            sink.add(Activations, &a.resident);
            sink.add(Activations, &a.loss_saved);
            sink.add(LossTransient, &a.loss_grads);
        }
        At::Backward(l) => {
            held(sink, a, true);
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
            held(sink, a, true);
            sink.add(Gradients, &s.grads_suffix[0]);
            sink.add(StepTransient, &s.step_transient);
        }
    }
}

/// What a step holds from its forward until after the optimiser step: the batch and the
/// teacher's logits, and the student's logits once the loss is built (`student_logits`).
fn held(sink: &mut impl Sink, a: &AtBatch, student_logits: bool) {
    sink.add(Cat::Batch, &a.batch);
    sink.add(Cat::Logits, &a.teacher_logits);
    if student_logits {
        sink.add(Cat::Logits, &a.student_logits);
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
