//! A language model's head and token-level loss in chunks of sequence positions
//! (`kd.loss_chunk`), so that the [B, S, vocab] tensors of the loss (the student's logits, the
//! fp32 log-softmaxes at T and at 1, their gradients) exist one chunk at a time, as in Liger's
//! fused linear cross-entropy (Hsu et al. 2024, arXiv:2410.10989) and Megatron's chunked loss.
//!
//! The body's final hidden states `h` [B, S, d] enter as a leaf. For each chunk of `c`
//! positions the head runs on `h[:, a..a+c]` with autograd, the objective scores the chunk
//! (a mean over its predicting tokens), and that loss times the chunk's share of the batch's
//! predicting tokens is back-propagated at once into the parameters (the head's, or the tied
//! embedding) and into `h`; the chunk's graph is then freed. The shares make the sum of the
//! chunks' losses and gradients the whole batch's mean, so the step equals the unchunked one up
//! to float rounding. The caller back-propagates the body with the gradient of `h`.
use tch::Tensor;

use crate::host::error::Result;
use crate::train::amp::GradScaler;
use crate::train::objective::{LossParts, Objective};

/// `kd.loss_chunk` where it chunks: a language model whose windows are longer than a chunk,
/// unless the head is fused with the loss (`kd.fused_head`, [`crate::train::fused_lm_loss`]).
pub fn loss_chunk(spec: &estimator_wasm::schema::Config) -> Option<i64> {
    let chunk = spec.kd.loss_chunk;
    let seq = spec.data.input_shape.first().copied().unwrap_or(0);
    (spec.student.is_language_model() && !spec.kd.fused_head && chunk > 0 && chunk < seq).then_some(chunk as i64)
}

/// What the chunked head and loss of one batch give.
pub struct ChunkedLoss {
    /// The batch's loss parts (the chunks' parts weighted by their shares of the tokens).
    pub loss: LossParts,
    /// The gradient of the loss (weighted by the step's weight, scaled for fp16) with respect
    /// to the hidden states `h` [B, S, d].
    pub grad_hidden: Tensor,
    /// The student's predictions [B, S] (top-1 tokens), chunk by chunk.
    pub predictions: Tensor,
}

/// The head (`head`: hidden states [B, c, d] to logits [B, c, V], under the step's autocast)
/// and `objective`'s loss of `hidden` (a leaf [B, S, d] requiring grad) against `labels`
/// [B, S] (-100: no next token) and the teacher's logits `soft` [B, S, V], in chunks of
/// `chunk` positions; each chunk's loss times `weight` (and the scale of `scaler`) is
/// back-propagated into `params`, whose gradients are added into `grads` (aligned with
/// `params`; undefined entries are set).
///
/// # Errors
/// A backward that fails.
#[allow(clippy::too_many_arguments)]
pub fn chunked_loss(
    objective: &dyn Objective,
    head: &dyn Fn(&Tensor) -> Result<Tensor>,
    hidden: &Tensor,
    labels: &Tensor,
    soft: Option<&Tensor>,
    chunk: i64,
    weight: f64,
    scaler: Option<&GradScaler>,
    params: &[&Tensor],
    grads: &mut [Tensor],
) -> Result<ChunkedLoss> {
    let s = hidden.size()[1];
    // predicting tokens per position, summed over the batch: one copy to the host per step
    let per_position =
        Vec::<f64>::try_from(labels.ge(0).sum_dim_intlist(0, false, tch::Kind::Float)).unwrap_or_default();
    let total: f64 = per_position.iter().sum::<f64>().max(1.0);
    let mut wrt: Vec<&Tensor> = params.to_vec();
    wrt.push(hidden);
    let (mut parts, mut grad_hidden, mut predictions): (Option<LossParts>, Option<Tensor>, Vec<Tensor>) =
        (None, None, Vec::new());
    for start in (0..s).step_by(chunk.max(1) as usize) {
        let len = chunk.min(s - start);
        let share = per_position[start as usize..(start + len) as usize].iter().sum::<f64>() / total;
        let logits = head(&hidden.narrow(1, start, len))?;
        predictions.push(objective.predictions(&logits.detach()));
        if share == 0.0 {
            continue; // no predicting token in the chunk (the stream's very end)
        }
        let y = labels.narrow(1, start, len);
        let t = soft.map(|t| t.narrow(1, start, len));
        let piece = objective.loss(&logits, t.as_ref(), Some(&y));
        let root = &piece.loss * (share * weight);
        let root = match scaler {
            Some(sc) => sc.scaled(&root),
            None => root,
        };
        let mut out = crate::train::backward::run_backward(&root, &wrt)?;
        let g_hidden = out.pop().unwrap_or_else(Tensor::new);
        for (acc, g) in grads.iter_mut().zip(out).filter(|(_, g)| g.defined()) {
            // in place: a second [vocab, d] gradient of the tied embedding would double it
            if acc.defined() {
                let _ = acc.g_add_(&g);
            } else {
                *acc = g;
            }
        }
        if g_hidden.defined() {
            match grad_hidden.as_mut() {
                Some(acc) => {
                    let _ = acc.g_add_(&g_hidden);
                }
                None => grad_hidden = Some(g_hidden),
            }
        }
        let weighted = |t: &Tensor| t.detach() * share;
        let piece = LossParts::of(weighted(&piece.loss), weighted(&piece.kd), weighted(&piece.ce));
        parts = Some(match parts {
            Some(p) => LossParts::of(p.loss + piece.loss, p.kd + piece.kd, p.ce + piece.ce),
            None => piece,
        });
    }
    let zero = || hidden.zeros_like().sum(tch::Kind::Float);
    Ok(ChunkedLoss {
        loss: parts.unwrap_or_else(|| LossParts::of(zero(), zero(), zero())),
        grad_hidden: grad_hidden.unwrap_or_else(|| hidden.zeros_like()),
        predictions: Tensor::cat(&predictions, 1),
    })
}
