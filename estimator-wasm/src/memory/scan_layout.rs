//! The compiled student laid out for the fast scan of `crate::memory::moments`: the sizes of
//! every layer, of the loss and of the batch as spans into one list of distinct sizes, and a
//! bound on all of them together that keeps every sum of the scan exact.
use crate::memory::compiled::{EvalPlan, HotLayer, LayerPlan, LossPlan, ScanLayout, Stage, StudentPlan, TeacherPlan};
use crate::memory::runtime::{self, AllocatorPool};
use crate::memory::sizes::Size;

impl ScanLayout {
    /// The layout of `student`, bounded with `teacher`'s sizes and `eval`'s pools.
    pub(crate) fn of(student: &StudentPlan, teacher: Option<&TeacherPlan>, eval: &EvalPlan) -> ScanLayout {
        let bound = bound(
            &student.layers,
            &student.stages,
            &student.loss,
            &student.batch,
            teacher,
            [&eval.batch, &eval.live.1, &eval.teacher_live.1, &eval.cache_build],
        );
        hot_layout(&student.layers, &student.loss, &student.batch, bound)
    }
}

/// Lays the layers' (and the loss's and batch's) sizes out as spans of indices into the list of
/// sizes the scan evaluates (see [`HotLayer`]). A size equal to one of the last 64 listed
/// reuses it (repeated blocks share their few sizes), which keeps the layout linear in the
/// number of sizes.
fn hot_layout(plans: &[LayerPlan], loss: &LossPlan, batch: &[Size], bound: (u128, u128)) -> ScanLayout {
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
    ScanLayout { bound, layers: hot, loss: loss_spans, index, unique }
}

/// The bound of `MemoryModel::check_bound`: every size any moment can hold (times the in-flight
/// micro-batches), plus 2 MiB of rounding per tensor, plus every static pool.
fn bound(
    layers: &[LayerPlan],
    stages: &[Stage],
    loss: &LossPlan,
    batch: &[Size],
    teacher: Option<&TeacherPlan>,
    constants: [&AllocatorPool; 4],
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
