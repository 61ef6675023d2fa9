//! The loss of a language model whose head is fused with it (`kd.fused_head`, distill's
//! `objective/fused_head.rs`): the student's final hidden states go through the head and the
//! loss `kd.loss_chunk` positions at a time, with closed-form gradients, so neither the
//! student's logits [S, V] nor their gradients nor any graph of the loss exist whole. The
//! head layer itself then saves nothing and makes no [S, V] tensor (`student_chain`); this
//! prices what the loss holds instead:
//!
//! * saved, from the loss to the backward (the surrogate `sum(h * dL/dh) + sum(W * dL/dW) +
//!   sum(b * dL/db)` keeps its constant factors): `dL/dh` [S, H] fp32, `dL/dW` [V, H] fp32,
//!   `dL/db` [V] fp32 with a bias (H the head's input width: `head_rank` for a factorised
//!   head, whose `up` factor is the fused part), and the labels as the unfused loss;
//! * transient, while the loss is built: one chunk's [c, V] fp32 tensors, as many as are
//!   alive at once in the chunk (its logits, `dL/dz`, the log-probabilities and
//!   probabilities; counted in `fused_head.rs`): 2 for CE alone, 5 with forward KL, 4 with
//!   reverse KL or TVD, 6 with JSD; and a 16-bit head weight's fp32 copy;
//! * at the backward's start, the surrogate's gradients: a fresh [V, H] (the weight's
//!   gradient) and [S, H] (the hidden states'), both fp32;
//! * kept to the optimiser step: the predictions [S] int64, in place of the logits.
use crate::memory::compiled::LossPlan;
use crate::memory::errors::EstimateError;
use crate::memory::runtime::mul;
use crate::memory::sizes::Size;
use crate::schema::arch::Op;
use crate::schema::dtype::DType;
use crate::schema::{Config, KdDivergence};

/// The fused loss of `config`'s head `head` (the student's last layer, an [`Op::LmHead`])
/// with `rows` positions per sample and `classes` logits per position (on one GPU); `weight`
/// the dtype of the head's weight; `kd` whether a soft term (and the teacher's logits,
/// `teacher_classes` wide) exists.
///
/// # Errors
/// [`EstimateError::Overflow`] on sizes past 2^64 bytes.
pub(crate) fn fused_loss(
    config: &Config,
    head: &Op,
    (rows, classes, teacher_classes): (u64, u64, u64),
    weight: DType,
    kd: bool,
) -> Result<LossPlan, EstimateError> {
    let (width, bias) = match *head {
        Op::LmHead { in_features, rank, bias, .. } => (rank.unwrap_or(in_features), bias),
        _ => (0, false),
    };
    let chunk = config.kd.loss_chunk.clamp(1, rows.max(1));
    let fp32 = |a: u64, b: u64| -> Result<u64, EstimateError> { mul(mul(a, b, "loss")?, 4, "loss") };
    let grad_hidden = Size::per(fp32(rows, width)?);
    let grad_weight = Size::fixed(fp32(classes, width)?);
    let mut saved = vec![grad_hidden, grad_weight, Size::per(mul(rows, 8, "labels")?), Size::fixed(4)];
    if bias {
        saved.push(Size::fixed(fp32(classes, 1)?));
    }
    let chunk_tensors = if kd { chunk_tensors(config.kd.soft_divergence(), config.kd.jsd_beta()) } else { 2 };
    let mut transient = vec![Size::per(fp32(chunk, classes)?); chunk_tensors];
    if weight != DType::F32 {
        transient.push(grad_weight); // the head's weight cast to fp32 for the chunks' products
    }
    Ok(LossPlan {
        saved,
        transient,
        grads: vec![grad_weight, grad_hidden],
        student_logits: Size::per(mul(rows, 8, "predictions")?),
        teacher_logits: kd.then_some(Size::per(fp32(rows, teacher_classes)?)),
        rows,
    })
}

/// The [c, V] fp32 tensors alive at once in a chunk of the fused loss with a soft term under
/// `divergence` (JSD at beta 0 or 1 computes forward or reverse KL).
fn chunk_tensors(divergence: KdDivergence, beta: f64) -> usize {
    match divergence {
        KdDivergence::ForwardKl => 5,
        KdDivergence::Jsd if beta <= 0.0 => 5,
        KdDivergence::ReverseKl | KdDivergence::Tvd => 4,
        KdDivergence::Jsd if beta >= 1.0 => 4,
        KdDivergence::Jsd => 6,
    }
}
