//! The training step's side of `kd.fused_head`: a language model's final hidden states
//! [B, S, d] go through its head and the logit loss together ([`crate::train::objective::fused_head`]),
//! `kd.loss_chunk` positions of every sequence (B x chunk tokens) at a time, so the step runs the
//! student up to its final norm and the student's logits [B, S, vocab] never exist.
//!
//! The hidden states are flattened to rows [B x S, d] (a view) and scored row by row, labels
//! -100 (no next token, padding) masked; a factorised head (`head_rank`) first projects them to
//! [B, S, r] with autograd, and the fused part is its `up` factor.
use estimator_wasm::schema::{Config, KdObjective};
use tch::Tensor;

use crate::student::transformer::LmHead;
use crate::student::Student;
use crate::train::objective::fused_head::{fused_head_loss, Head};
use crate::train::objective::{Divergence, LogitKd, LossParts};

/// The fused head and loss of a run: `[kd]`'s loss, the student's head and the chunk.
#[derive(Debug)]
pub struct FusedLmLoss {
    kd: LogitKd,
    head: LmHead,
    /// Positions per chunk (`kd.loss_chunk`, at most the window).
    positions: i64,
}

impl FusedLmLoss {
    /// The fused loss of a run whose `kd.fused_head` is set and whose student has a language
    /// model's head (the schema refuses `kd.fused_head` for any other); `None` otherwise.
    pub fn of(spec: &Config, student: &Student) -> Option<FusedLmLoss> {
        let head = student.lm_head().filter(|_| spec.kd.fused_head && spec.kd.objective == KdObjective::Logits)?;
        let kd =
            LogitKd { temperature: spec.kd.temperature, alpha: spec.kd.alpha, divergence: Divergence::of(&spec.kd) };
        Some(FusedLmLoss { kd, head, positions: spec.kd.loss_chunk.max(1) as i64 })
    }

    /// The loss parts of the final hidden states `hidden` [B, S, d] (with the body's graph)
    /// against the teacher's logits `soft` [B, S, vocab] (`None`: no soft term) and next-token
    /// labels `labels` [B, S] (-100: none), whose `loss` back-propagates into `hidden` and the
    /// head (see [`fused_head_loss`]); and the student's top-1 tokens [B, S].
    ///
    /// # Panics
    /// Without labels: a language model's batches always carry them.
    pub fn loss(&self, hidden: &Tensor, soft: Option<&Tensor>, labels: Option<&Tensor>) -> (LossParts, Tensor) {
        let labels = labels.expect("a language model's batches carry next-token labels");
        let (b, s) = (hidden.size()[0], hidden.size()[1]);
        let projected = self.head.down.as_ref().map(|down| hidden.to_kind(down.kind()).linear::<Tensor>(down, None));
        let rows = projected.as_ref().unwrap_or(hidden).flatten(0, 1);
        let teacher = soft.map(|t| t.flatten(0, 1));
        let head = Head { weight: &self.head.weight, bias: self.head.bias.as_ref() };
        let chunk = b * self.positions.min(s);
        let (parts, predictions) =
            fused_head_loss(&rows, head, teacher.as_ref(), &labels.reshape([-1]), &self.kd, chunk);
        (parts, predictions.reshape([b, s]))
    }
}
