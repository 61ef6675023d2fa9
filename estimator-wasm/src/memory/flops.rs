//! Floating-point operations of one training step, for model FLOPs utilisation (MFU).
//!
//! Convention (the one MFU is defined with: Chowdhery et al. 2022, PaLM, arXiv:2204.02311,
//! appendix B; Kaplan et al. 2020, arXiv:2001.08361, section 2.1; and what PyTorch's
//! `torch.utils.flop_counter.FlopCounterMode` counts):
//!
//! * only matrix products count, at 2 FLOPs per multiply-accumulate: `nn.Linear` and the
//!   heads (`2 * rows * in * out`; the bias add is not counted), `Conv2d`
//!   (`2 * out_channels * in_channels * kernel^2 * H_out * W_out` per sample) and attention's
//!   two batched products (`q k^T` and `probs v`: `4 * s^2 * heads * d_head` per sample, every
//!   head counted over all `s^2` pairs, causal or not, grouped-query keys counted once per query
//!   head). Norms, activations, dropout, pooling, embeddings' lookups and rotary positions
//!   count nothing;
//! * backward = 2 x forward per product: one product of the same size for the weight's
//!   gradient and one for the input's, except where the input needs no gradient (the first
//!   layer's pixels or features: 1 x forward), as autograd computes it;
//! * `recompute` is the work a run repeats but the model does not need (hardware, not model
//!   FLOPs, so MFU leaves it out): with checkpointing, the forward of every segment but the
//!   last one (`distill/src/train/step.rs` recomputes those), and with a fused (flash) attention
//!   kernel, the scores `q k^T` its backward computes again (`2 * s^2 * heads * d_head`; the
//!   flash backward's five products in `torch.utils.flop_counter.sdpa_backward_flop_count`);
//! * the teacher's no-grad forward on every step when it runs online (live soft targets), 0
//!   when its logits are cached before training or there is no teacher; a teacher known only
//!   by its parameter count is `2 * params` per token (Kaplan et al.), with a note;
//! * the loss, which has no product, is counted elementwise per logit (rows x classes per
//!   sample; [`loss_per_element`]): an arithmetic estimate, outside what `FlopCounterMode`
//!   counts, listed apart so it can be told from the products.
//!
//! The figures are for the whole model and one micro-batch of `b` samples (all tensor-parallel
//! ranks and pipeline stages together); every sum saturates at `u64::MAX`.
use serde::Serialize;

use crate::schema::arch::{numel, Layer, Op};
use crate::schema::{AttentionKernel, KdObjective};

/// FLOPs of one training step at one micro-batch (see the module's convention).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepFlops {
    /// The student's forward products.
    pub student_forward: u64,
    /// The student's backward products (weight and input gradients).
    pub student_backward: u64,
    /// Work repeated for memory's sake (checkpoint recompute, the flash backward's scores):
    /// hardware FLOPs, left out of [`StepFlops::model`].
    pub recompute: u64,
    /// The teacher's forward on every step (0 when its logits are cached or there is none).
    pub teacher_forward: u64,
    /// The loss, elementwise ([`loss_per_element`]).
    pub loss: u64,
    /// Model FLOPs: student forward + backward + teacher forward + loss (MFU's numerator).
    pub model: u64,
    /// Hardware FLOPs: [`StepFlops::model`] + [`StepFlops::recompute`].
    pub hardware: u64,
}

/// One layer's products per sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerFlops {
    pub forward: u64,
    pub backward: u64,
    /// The flash backward's recomputed scores (not the checkpoint recompute, which is per segment).
    pub recompute: u64,
}

/// Per-sample FLOPs of a compiled step: multiplied by the micro-batch in [`FlopPlan::at`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlopPlan {
    pub student_forward: u64,
    pub student_backward: u64,
    pub recompute: u64,
    pub teacher_forward: u64,
    pub loss: u64,
}

impl FlopPlan {
    /// The step's FLOPs at micro-batch `b` (saturating).
    pub fn at(&self, b: u64) -> StepFlops {
        let m = |v: u64| v.saturating_mul(b);
        let (f, bw, r, t, l) = (
            m(self.student_forward),
            m(self.student_backward),
            m(self.recompute),
            m(self.teacher_forward),
            m(self.loss),
        );
        let model = f.saturating_add(bw).saturating_add(t).saturating_add(l);
        StepFlops {
            student_forward: f,
            student_backward: bw,
            recompute: r,
            teacher_forward: t,
            loss: l,
            model,
            hardware: model.saturating_add(r),
        }
    }
}

fn mul(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |a, &f| a.saturating_mul(f))
}

/// A product of `2 * m * k * n` FLOPs forward and its backward: the weight's gradient always,
/// the input's when `input_grad`.
fn product(m: u64, k: u64, n: u64, input_grad: bool) -> LayerFlops {
    let f = mul(&[2, m, k, n]);
    LayerFlops { forward: f, backward: if input_grad { f.saturating_mul(2) } else { f }, recompute: 0 }
}

fn add(a: LayerFlops, b: LayerFlops) -> LayerFlops {
    LayerFlops {
        forward: a.forward.saturating_add(b.forward),
        backward: a.backward.saturating_add(b.backward),
        recompute: a.recompute.saturating_add(b.recompute),
    }
}

/// Products per sample of `layer`, whose input needs a gradient when `input_grad`; `cuda`
/// picks the attention kernel as PyTorch does (on CPU, SDPA with attention dropout falls back
/// to the unfused math kernel: no recomputed scores).
pub fn layer_flops(layer: &Layer, input_grad: bool, cuda: bool) -> LayerFlops {
    let elems = |shape: &[u64]| numel(shape).unwrap_or(u64::MAX);
    match layer.op {
        Op::Linear { in_features, out_features } => {
            product(elems(&layer.input) / in_features.max(1), in_features, out_features, input_grad)
        }
        Op::LmHead { in_features, out_features, rank, .. } => {
            let rows = elems(&layer.input) / in_features.max(1);
            match rank {
                // z = x down^T, then z up^T: z always needs its gradient
                Some(r) => add(product(rows, in_features, r, input_grad), product(rows, r, out_features, true)),
                None => product(rows, in_features, out_features, input_grad),
            }
        }
        Op::Conv2d { in_channels, out_channels, kernel, .. } => {
            let spatial = elems(&layer.output) / out_channels.max(1);
            product(out_channels, mul(&[in_channels, kernel, kernel]), spatial, input_grad)
        }
        Op::SelfAttention(a) => {
            let seq = elems(&layer.input) / a.dim.max(1);
            let head_dim = a.dim / a.heads.max(1);
            let qkv_width = a.dim.saturating_add(mul(&[2, a.kv_heads, head_dim]));
            // the projection's input is norm(x) (pre-norm: needs a gradient for the norm's weight)
            let proj_grad = input_grad || !a.post_norm;
            let core_forward = mul(&[4, seq, seq, a.heads, head_dim]);
            let fused = a.kernel == AttentionKernel::Flash && (cuda || a.attention_dropout == 0.0);
            let core = LayerFlops {
                forward: core_forward,
                backward: core_forward.saturating_mul(2),
                recompute: if fused { core_forward / 2 } else { 0 },
            };
            let qkv = product(seq, a.dim, qkv_width, proj_grad);
            add(add(qkv, core), product(seq, a.dim, a.dim, true))
        }
        Op::FeedForward(f) => {
            let seq = elems(&layer.input) / f.dim.max(1);
            let up = if f.mlp == crate::schema::MlpKind::Swiglu { f.width.saturating_mul(2) } else { f.width };
            add(product(seq, f.dim, up, input_grad || !f.post_norm), product(seq, f.width, f.dim, true))
        }
        _ => LayerFlops::default(),
    }
}

/// Forward FLOPs per sample of a no-grad pass over `layers` (a teacher).
pub fn forward_flops(layers: &[Layer], cuda: bool) -> u64 {
    layers.iter().fold(0u64, |a, l| a.saturating_add(layer_flops(l, false, cuda).forward))
}

/// The loss's FLOPs per logit element (forward and backward), counted from distill's loss
/// expressions (`distill/src/train/objective/`) at one FLOP per elementwise arithmetic operation, a
/// log-softmax counting 4 (subtract the row's maximum, exponentiate, add into the sum,
/// subtract the log-sum), the backward 2 x the forward of the terms that depend on the
/// student (the teacher's side has none):
///
/// * `logits`: cross-entropy's log-softmax (4) always; with a teacher (`kd`) also the student's
///   `log_softmax(z / T)` (5), the teacher's (5, no backward) and the divergence
///   `exp(t) (t - s)` summed (4): 18 forward + 26 backward = 44; without, 4 + 8 = 12;
/// * `embedding_mse`: difference, square, sum (3) + 6 backward, and the teacher's unit vector
///   (3): 12; `embedding_cosine`: a dot product and two squared norms (6) + 12 backward, and
///   the teacher's unit vector (3): 21.
///
/// An estimate in the same units, not a product: `FlopCounterMode` counts none of it.
pub fn loss_per_element(objective: KdObjective, kd: bool) -> u64 {
    match (objective, kd) {
        (KdObjective::Logits, true) => 44,
        (KdObjective::Logits, false) => 12,
        (KdObjective::EmbeddingMse, _) => 12,
        (KdObjective::EmbeddingCosine, _) => 21,
    }
}
