//! The peak of a step: every moment of every stage scanned at one micro-batch ([`scan`], the
//! fast path the estimates use: the sums of `crate::memory::moments::live` streamed over the
//! layers without allocating), and the linear model of each moment ([`lines`]) for the batch
//! search. A test checks that the scan finds, moment by moment, exactly what `live` gives.
use crate::memory::compiled::HotLayer;
use crate::memory::errors::EstimateError;
use crate::memory::memory_model::MemoryModel;
use crate::memory::moments::{live, moments, teacher_live, At, AtBatch};
use crate::memory::runtime::AllocatorPool;

/// The largest point of one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Best {
    pub reserved: u64,
    pub stage: usize,
    pub at: At,
    pub pool: AllocatorPool,
}

/// The largest point of each moment (in [`crate::memory::Moment`] order of the step), at one batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scan {
    pub moments: [Option<Best>; 7],
}

impl Scan {
    #[inline]
    fn offer(&mut self, stage: usize, at: At, pool: AllocatorPool, cuda: bool) {
        let reserved = pool.reserved_exact(cuda);
        let slot = &mut self.moments[at.moment() as usize];
        if slot.is_none_or(|b| reserved > b.reserved) {
            *slot = Some(Best { reserved, stage, at, pool });
        }
    }

    /// The largest point overall (the earliest moment on ties).
    pub(crate) fn peak(&self) -> Option<Best> {
        self.moments.iter().flatten().fold(None, |best: Option<Best>, b| match best {
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
/// one small allocation. Gives per moment the same maximum as evaluating [`live`] at every
/// moment (tested). Its sums are exact: the model's bound on all tensors together is checked
/// first.
///
/// # Errors
/// [`EstimateError::Overflow`] when the tensors of the plan could exceed 2^62 bytes in total.
pub(crate) fn scan(m: &MemoryModel, b: u64) -> Result<Scan, EstimateError> {
    m.check_bound(b)?;
    let cuda = m.setup.runtime.cuda;
    // each distinct size rounded once: a one-tensor pool per size
    let mut stack = [AllocatorPool::default(); 32];
    let mut heap = Vec::new();
    let ones: &mut [AllocatorPool] = if m.layout.unique.len() <= stack.len() {
        &mut stack[..m.layout.unique.len()]
    } else {
        heap.resize(m.layout.unique.len(), AllocatorPool::default());
        &mut heap
    };
    for (one, s) in ones.iter_mut().zip(&m.layout.unique) {
        one.tensor_exact(s.per_sample * b + s.fixed, cuda);
    }
    let ones: &[AllocatorPool] = ones;
    let span = |(start, end): (u32, u32)| {
        let mut p = AllocatorPool::default();
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
        let batch = if s.first { span(m.layout.loss[5]) } else { AllocatorPool::default() };
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
        let resident_of = |h: &HotLayer| if ckpt { span(h.kept) } else { span(h.saved) };
        let earlier = if s.in_flight > 1 {
            let mut r = AllocatorPool::default();
            hot.iter().for_each(|h| r.merge_exact(&resident_of(h)));
            r.times(s.in_flight - 1)
        } else {
            AllocatorPool::default()
        };
        // forward: `running` is the statics, batch, teacher logits, cast cache and the
        // activations saved so far
        let step = base.plus_exact(&batch).plus_exact(&teacher_logits);
        let mut running = step.plus_exact(&s.cast_cache).plus_exact(&earlier);
        let mut resident = AllocatorPool::default();
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
/// `M(b) = M_fixed + b * m_lin` of `docs/memory-model.md` section 9, one line per moment (before
/// allocator rounding, which only adds).
pub(crate) fn lines(m: &MemoryModel) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for s in &m.student.stages {
        let a0 = AtBatch::new(m, s, 0);
        let a1 = AtBatch::new(m, s, 1);
        for at in moments(m, s) {
            let (mut p0, mut p1) = (AllocatorPool::default(), AllocatorPool::default());
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
            let mut pool = AllocatorPool::default();
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
                assert_eq!(fast.moments, slow.moments, "batch {b}: {case}");
                assert_eq!(fast.peak(), slow.peak(), "batch {b}: {case}");
            }
        }
    }

    /// Properties over random cfgs.
    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::memory::inputs::Inputs;
        use crate::schema::Config;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            /// The streamed scan equals the definition, moment by moment, on random plans.
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
                prop_assert_eq!(fast.moments, slow.moments);
            }
        }
    }
}
