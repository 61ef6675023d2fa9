//! The requests a whole `distill` run makes of the CUDA caching allocator, in order, replayed on
//! [`CachingAllocator`] to find the bytes it reserves at its peak (`torch.cuda.max_memory_reserved`).
//!
//! The tensors are those the moments of `crate::memory::moments` price; this file only orders
//! them, as `distill` runs (`distill/src/train.rs`, `distill/src/eval.rs`):
//! 1. the student's weights, the teacher's weights and the datasets, then the first cuBLAS
//!    workspace (the first matmul);
//! 2. with cached teacher logits, the teacher's no-grad pass over the train set at the
//!    evaluation batch, each layer's live set requested and freed in turn, then the cache;
//! 3. training steps: the batch, the live teacher's pass and its logits, the forward (each
//!    layer's saved tensors kept, its temporaries freed; autocast's weight copies until the
//!    loss), the loss, the backward from the last layer (autograd's own workspace at the first
//!    one, each layer's gradients kept, its scratch and saved tensors freed), the optimiser's
//!    states at the first step and its temporaries, then the gradients and the batch freed;
//! 4. the evaluation at its batch, layer by layer.
//!
//! Steps then evaluations are walked [`Run::walks`] times in the order the run's shapes are
//! given: a text run's first epoch in the trainer's order then its end-of-epoch evaluation,
//! once (a second epoch meets the same shapes, and the allocator's segments are its cache by
//! then); otherwise the batches that can peak, twice, so that blocks cached by one pass and too
//! small for the next show in the peak.
use crate::memory::caching_allocator::CachingAllocator;
use crate::memory::compiled::{LayerPlan, Stage};
use crate::memory::memory_model::MemoryModel;
use crate::memory::sizes::Size;

/// A run to replay: the model whose static tensors it holds, and its passes as (model, rows):
/// the teacher's pass over the train set, the training steps and the evaluations. Each pass is
/// priced by its own model (text runs compile one per padded width).
pub(crate) struct Run<'a> {
    pub main: &'a MemoryModel,
    pub teacher_pass: Vec<(&'a MemoryModel, u64)>,
    pub steps: Vec<(&'a MemoryModel, u64)>,
    pub evaluation: Vec<(&'a MemoryModel, u64)>,
    /// Times the steps, then the evaluations, are walked: 1 for an epoch's every step in the
    /// trainer's order, 2 for the batches that can peak (blocks cached by the second-listed
    /// shape meet the first again).
    pub walks: usize,
}

impl<'a> Run<'a> {
    /// A run of `m` alone: its steps at micro-batch `b`, its passes at the evaluation batch.
    pub(crate) fn of(m: &'a MemoryModel, b: u64, eval_b: u64) -> Run<'a> {
        Run { main: m, teacher_pass: vec![(m, eval_b)], steps: vec![(m, b)], evaluation: vec![(m, eval_b)], walks: 2 }
    }

    /// The allocator's peak reserved bytes over the run, the largest of its pipeline stages.
    pub(crate) fn peak_reserved(&self) -> u64 {
        (0..self.main.student.stages.len()).map(|si| self.replay(si).peak_reserved).max().unwrap_or(0)
    }

    /// Replays the run of pipeline stage `si`.
    pub(crate) fn replay(&self, si: usize) -> CachingAllocator {
        let m = self.main;
        let rt = &m.setup.runtime;
        let limit = m.setup.gpu.map_or(u64::MAX, |g| g.memory.saturating_sub(rt.cuda_context).saturating_sub(rt.nccl));
        let mut t = Tracer { a: CachingAllocator::new(limit), autograd_workspace: false, optimizer: false };
        let tensors = &m.student.stages[si].tensors;
        t.keep(&tensors.pre);
        t.keep(&[tensors.workspace]);
        // the teacher's pass over the test set (its accuracy), at the evaluation's batches
        for &(em, rows) in &self.evaluation {
            t.teacher_pass(em, rows, true);
        }
        if m.teacher.as_ref().is_some_and(|te| te.cache) {
            // the logits of each batch, then their concatenation
            let chunks = t.fixed(&[tensors.logit_cache]);
            for &(pm, rows) in &self.teacher_pass {
                t.teacher_pass(pm, rows, true);
            }
            t.keep(&[tensors.logit_cache]);
            t.free(chunks);
        }
        t.keep(&tensors.weights);
        t.keep(&tensors.train);
        for _ in 0..self.walks {
            for &(sm, rows) in &self.steps {
                t.step(m, sm, si, rows);
            }
            for &(em, rows) in &self.evaluation {
                t.evaluation(em, si, rows);
            }
        }
        t.a
    }
}

struct Tracer {
    a: CachingAllocator,
    autograd_workspace: bool,
    optimizer: bool,
}

impl Tracer {
    /// Requests `sizes` at `b` rows (zero sizes make no request); returns (bytes, address).
    fn alloc(&mut self, sizes: &[Size], b: u64) -> Vec<(u64, u128)> {
        sizes
            .iter()
            .map(|s| s.at_saturating(b))
            .filter(|&bytes| bytes > 0)
            .map(|bytes| (bytes, self.a.malloc(bytes)))
            .collect()
    }

    fn fixed(&mut self, bytes: &[u64]) -> Vec<(u64, u128)> {
        bytes.iter().filter(|&&x| x > 0).map(|&x| (x, self.a.malloc(x))).collect()
    }

    /// Requests tensors held to the end of the run.
    fn keep(&mut self, bytes: &[u64]) {
        self.fixed(bytes);
    }

    fn free(&mut self, blocks: Vec<(u64, u128)>) {
        for (_, address) in blocks {
            self.a.free(address);
        }
    }

    /// Each layer's live set requested and freed in turn.
    fn layers<'s>(&mut self, sets: impl Iterator<Item = &'s [Size]>, b: u64) {
        for sizes in sets {
            let live = self.alloc(sizes, b);
            self.free(live);
        }
    }

    fn teacher_pass(&mut self, m: &MemoryModel, rows: u64, with_batch: bool) {
        let Some(teacher) = &m.teacher else { return };
        let batch = if with_batch { self.alloc(&m.student.batch, rows) } else { Vec::new() };
        self.layers(teacher.layers.iter().map(|(_, s)| s.as_slice()), rows);
        self.free(batch);
    }

    fn evaluation(&mut self, m: &MemoryModel, si: usize, rows: u64) {
        let s = &m.student.stages[si];
        let batch = if s.first { self.alloc(&m.student.batch, rows) } else { Vec::new() };
        self.layers(m.student.layers[s.layers.clone()].iter().map(|l| l.inference_live.as_slice()), rows);
        self.free(batch);
    }

    /// One training step of stage `si` of `m` at `b` rows; `main` holds the static tensors.
    fn step(&mut self, main: &MemoryModel, m: &MemoryModel, si: usize, b: u64) {
        let s: &Stage = &m.student.stages[si];
        let statics = &main.student.stages[si].tensors;
        let layers: &[LayerPlan] = &m.student.layers[s.layers.clone()];
        let loss = &m.student.loss;
        let mut held = if s.first { self.alloc(&m.student.batch, b) } else { Vec::new() };
        if m.teacher.as_ref().is_some_and(|t| t.live) {
            self.teacher_pass(m, b, false);
        }
        if s.last {
            held.extend(self.alloc(loss.teacher_logits.as_slice(), b));
        }
        // micro-batches of the pipeline still in flight hold their own saved sets
        let resident = |l: &LayerPlan| if s.checkpointing { l.kept.iter().copied().collect() } else { l.saved.clone() };
        let mut earlier = Vec::new();
        for _ in 1..s.in_flight {
            for l in layers {
                earlier.extend(self.alloc(&resident(l), b));
            }
        }
        let cast = self.fixed(&statics.cast_cache);
        let mut saved: Vec<Vec<(u64, u128)>> = Vec::with_capacity(layers.len());
        for l in layers {
            saved.push(self.alloc(&resident(l), b));
            let live = if s.checkpointing { &l.checkpoint_forward_live } else { &l.forward_live };
            let live = self.alloc(live, b);
            self.free(live);
        }
        let (mut loss_saved, mut loss_grads) = (Vec::new(), Vec::new());
        if s.last {
            held.extend(self.alloc(&[loss.student_logits], b));
            loss_saved = self.alloc(&loss.saved, b);
            let transient = self.alloc(&loss.transient, b);
            self.free(transient);
        }
        self.free(cast);
        if !self.autograd_workspace {
            self.autograd_workspace = true;
            self.keep(&[statics.workspace]);
        }
        if s.last {
            loss_grads = self.alloc(&loss.grads, b);
        }
        self.free(loss_saved);
        self.free(loss_grads);
        let mut grads = Vec::new();
        let mut recomputed: Vec<Vec<(u64, u128)>> = vec![Vec::new(); layers.len()];
        for i in (0..layers.len()).rev() {
            let l = &layers[i];
            if s.checkpointing && (i + 1 == layers.len() || layers[i + 1].segment_start) {
                let start = (0..=i).rev().find(|&k| layers[k].segment_start).unwrap_or(0);
                for k in start..=i {
                    recomputed[k] = self.alloc(&layers[k].recompute, b);
                }
            }
            grads.extend(self.fixed(&statics.grads[i]));
            for r in &l.backward_release {
                let bytes = r.at_saturating(b);
                let pool = if s.checkpointing { &mut recomputed[i] } else { &mut saved[i] };
                if let Some(j) = pool.iter().position(|&(x, _)| x == bytes) {
                    let block = pool.swap_remove(j);
                    self.free(vec![block]);
                }
            }
            let scratch = self.alloc(&l.backward_scratch, b);
            self.free(scratch);
            self.free(std::mem::take(&mut saved[i]));
            self.free(std::mem::take(&mut recomputed[i]));
        }
        self.free(earlier);
        if !self.optimizer {
            self.optimizer = true;
            self.keep(&statics.optimizer);
        }
        let step = self.fixed(&statics.step);
        self.free(step);
        self.free(grads);
        self.free(held);
    }
}
