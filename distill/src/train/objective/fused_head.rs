//! A language model's head and its token-level loss fused (`kd.fused_head`): the student's
//! final hidden states go through the head and [`super::logit_kd`]'s loss a chunk of tokens at
//! a time, so its logits [B, S, V] never exist whole, and no graph is kept across chunks: the
//! gradients with respect to the hidden states and the head's weight and bias are computed in
//! closed form per chunk, under `no_grad`, and handed to autograd through a surrogate (tch
//! binds no custom autograd function). The backward recomputes nothing: each chunk's logits
//! are made once, scored, differentiated and freed. Liger Kernel's fused linear cross-entropy
//! (Hsu et al. 2024, arXiv:2410.10989) does the same for CE alone.
//!
//! Per predicting row (label not -100), with logits `z = h W^T + b` [V], `q = softmax(z/T)`,
//! `p = softmax(t/T)` of the teacher's logits `t`, and `N` the predicting rows of the batch:
//!
//! `L = alpha * T^2 / N * sum_rows D(p, q) + (1 - alpha) / N * sum_rows CE(z, y)`,
//!
//! the loss of [`super::logit_kd::kd_loss`] on the rows. Its gradient in `z` is
//! `dL/dz = alpha * T / N * dD/ds + (1 - alpha) / N * (softmax(z) - onehot(y))` with `s = z/T`
//! and, through the softmax (`dD/ds_j = q_j (g_j - sum_i q_i g_i)` for `g = dD/dq`):
//!
//! * forward KL `KL(p || q)`: `dD/ds = q - p`;
//! * reverse KL `KL(q || p)`: `g = log q - log p + 1`, so `dD/ds = q (log q - log p - KL(q || p))`;
//! * GKD's JSD(beta), `M = beta p + (1 - beta) q`: `g = (1 - beta) log(q / M)` (the terms in
//!   `dM/dq` cancel), at beta 0 and 1 forward and reverse KL as [`super::divergence`] reads them;
//! * TVD `0.5 sum |p - q|`: `g = 0.5 sign(q - p)` (sign 0 at 0, as autograd's `abs`).
//!
//! Then `dL/dh = dL/dz W`, `dL/dW = dL/dz^T h`, `dL/db = sum_rows dL/dz`. Everything is computed
//! in fp32 (f64 for f64 hidden states, as the tests use), the head's weight cast once when it is
//! 16-bit.
use tch::{Kind, Tensor};

use super::divergence::Divergence;
use super::logit_kd::LogitKd;
use super::loss::LossParts;

/// A linear head `z = h W^T + b`: `weight` [V, H] (the token embedding when tied), `bias` [V].
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub weight: &'a Tensor,
    pub bias: Option<&'a Tensor>,
}

/// The fused head and loss of a batch of rows, without a graph.
#[derive(Debug)]
pub struct FusedGrads {
    /// The loss parts (0-dim, fp32 or f64, no graph), as [`super::logit_kd::kd_loss`] gives
    /// them on the predicting rows.
    pub loss: LossParts,
    /// `dL/dh` [N, H] (zero on rows that do not predict).
    pub grad_hidden: Tensor,
    /// `dL/dW` [V, H].
    pub grad_weight: Tensor,
    /// `dL/db` [V], with a bias.
    pub grad_bias: Option<Tensor>,
    /// The student's top-1 token of every row [N] (Int64), predicting or not.
    pub predictions: Tensor,
}

/// The loss of `kd` (temperature, alpha, divergence) of the head `head` on hidden states
/// `hidden` [N, H] against the teacher's logits `teacher` [N, V] (`None`: no soft term, as
/// with alpha = 0) and labels `labels` [N] (Int64; rows labelled -100, PyTorch's
/// `ignore_index`, are padding: neither scored nor counted in N), in chunks of `chunk` rows
/// (at least 1), and its gradients (see the module's documentation). A batch without a
/// predicting row scores 0 with zero gradients.
pub fn fused_head_grads(
    hidden: &Tensor,
    head: Head,
    teacher: Option<&Tensor>,
    labels: &Tensor,
    kd: &LogitKd,
    chunk: i64,
) -> FusedGrads {
    tch::no_grad(|| {
        let (rows, dev) = (hidden.size()[0], hidden.device());
        let kind = if hidden.kind() == Kind::Double { Kind::Double } else { Kind::Float };
        let weight = head.weight.to_kind(kind); // no copy when already `kind`
        let bias = head.bias.map(|b| b.to_kind(kind));
        let n = Vec::<i64>::try_from(labels.ge(0).sum(Kind::Int64).reshape([1])).unwrap_or_default()[0].max(1) as f64;
        let teacher = teacher.filter(|_| kd.alpha > 0.0);
        let grad_hidden = Tensor::zeros([rows, weight.size()[1]], (kind, dev));
        let mut grad_weight = weight.zeros_like();
        let mut grad_bias = bias.as_ref().map(Tensor::zeros_like);
        let (mut kd_sum, mut ce_sum) = (Tensor::zeros([], (kind, dev)), Tensor::zeros([], (kind, dev)));
        let mut predictions = Vec::new();
        for start in (0..rows).step_by(chunk.max(1) as usize) {
            let len = chunk.max(1).min(rows - start);
            let h = hidden.narrow(0, start, len).to_kind(kind);
            let z = h.linear(&weight, bias.as_ref());
            predictions.push(z.argmax(-1, false));
            let t = teacher.map(|t| t.narrow(0, start, len));
            let (g, kd_rows, ce_rows) = chunk_terms(z, t.as_ref(), &labels.narrow(0, start, len), kd, n);
            kd_sum += kd_rows;
            ce_sum += ce_rows;
            grad_hidden.narrow(0, start, len).copy_(&g.mm(&weight));
            let _ = grad_weight.addmm_(&g.tr(), &h);
            if let Some(gb) = grad_bias.as_mut() {
                *gb += g.sum_dim_intlist(0, false, kind);
            }
        }
        let kd_value = kd_sum * (kd.temperature * kd.temperature / n);
        let ce = ce_sum / n;
        let loss = &kd_value * kd.alpha + &ce * (1.0 - kd.alpha);
        let predictions =
            if predictions.is_empty() { Tensor::zeros([0], (Kind::Int64, dev)) } else { Tensor::cat(&predictions, 0) };
        FusedGrads { loss: LossParts::of(loss, kd_value, ce), grad_hidden, grad_weight, grad_bias, predictions }
    })
}

/// The fused loss parts of [`fused_head_grads`] whose `loss` back-propagates its gradients:
/// `value + S - detach(S)` with `S = sum(h * dL/dh) + sum(W * dL/dW) + sum(b * dL/db)`, whose
/// value is the loss's and whose gradient in `hidden`, `head.weight` and `head.bias` is exactly
/// the closed form (as gradient checkpointing pushes a gradient in, `step.rs`). Also the
/// predictions [N]. `kd` and `ce` carry no graph.
pub fn fused_head_loss(
    hidden: &Tensor,
    head: Head,
    teacher: Option<&Tensor>,
    labels: &Tensor,
    kd: &LogitKd,
    chunk: i64,
) -> (LossParts, Tensor) {
    let g = fused_head_grads(hidden, head, teacher, labels, kd, chunk);
    let kind = g.loss.loss.kind();
    let pair = |x: &Tensor, dx: &Tensor| (x * dx).sum(kind);
    let mut s = pair(hidden, &g.grad_hidden) + pair(head.weight, &g.grad_weight);
    if let (Some(b), Some(db)) = (head.bias, g.grad_bias.as_ref()) {
        s += pair(b, db);
    }
    let loss = &g.loss.loss + &s - s.detach();
    (LossParts { loss, ..g.loss }, g.predictions)
}

/// One chunk's `dL/dz` [c, V] and sums over its predicting rows of the soft term `D` (before
/// `T^2 / N`) and of CE, from its logits `z` [c, V] (in the compute kind), the teacher's
/// logits `t` [c, V] and labels `y` [c]; `n` the batch's predicting rows.
fn chunk_terms(z: Tensor, t: Option<&Tensor>, y: &Tensor, kd: &LogitKd, n: f64) -> (Tensor, Tensor, Tensor) {
    let kind = z.kind();
    let padding = y.lt(0).unsqueeze(1); // [c, 1]
    let target = y.clamp_min(0).unsqueeze(1);
    // The chunk's one softmax at T = 1: CE is minus the label's log-probability, its gradient
    // softmax(z) - onehot(y); at T = 1 the soft term's log q is the same tensor, kept (so as
    // many [c, V] tensors are alive as with a second log-softmax, and one less is computed).
    let mut log_s = z.log_softmax(-1, kind);
    let ce_rows = -log_s.gather(1, &target, false).masked_fill(&padding, 0.0).sum(kind);
    let (mut g, log_q) = match t.is_some() && kd.temperature == 1.0 {
        true => (log_s.exp(), Some(log_s)),
        false => {
            let _ = log_s.exp_();
            (log_s, None)
        }
    };
    let _ = g.scatter_add_(1, &target, &Tensor::full([y.size()[0], 1], -1.0, (kind, z.device())));
    g *= (1.0 - kd.alpha) / n;
    let kd_rows = match t {
        Some(t) => {
            let temperature = kd.temperature;
            let log_q = log_q.unwrap_or_else(|| (&z / temperature).log_softmax(-1, kind));
            let log_p = (t.to_kind(kind) / temperature).log_softmax(-1, kind);
            let (rows, mut grad_s) = soft_term(log_q, log_p, kd.divergence);
            grad_s *= kd.alpha * temperature / n;
            g += grad_s;
            rows.masked_fill(&padding.squeeze_dim(1), 0.0).sum(kind)
        }
        None => Tensor::zeros([], (kind, g.device())),
    };
    (g.masked_fill_(&padding, 0.0), kd_rows, ce_rows)
}

/// Per row, `D(p, q)` [c] and `dD/ds` [c, V] (`s = z/T`) of the student's `log q` and the
/// teacher's `log p` [c, V], in closed form (the module's documentation). In place where it
/// can be: with the caller's `dL/dz` and these two, at most 4 (reverse KL, TVD), 5 (forward KL)
/// or 6 (JSD) [c, V] tensors are alive at once (`estimator_wasm`'s fused loss counts them).
fn soft_term(log_q: Tensor, log_p: Tensor, divergence: Divergence) -> (Tensor, Tensor) {
    let divergence = divergence.resolved();
    let kind = log_q.kind();
    let row_sum = |x: &Tensor| x.sum_dim_intlist(-1, true, kind);
    // through the softmax: dD/ds_j = q_j (g_j - sum_i q_i g_i), for g = dD/dq
    let through_softmax = |q: &Tensor, mut g: Tensor| {
        let mean = row_sum(&(q * &g));
        g -= mean;
        g *= q;
        g
    };
    match divergence {
        Divergence::ForwardKl => {
            let (mut q, p) = (log_q.exp(), log_p.exp());
            let mut d = log_p; // log p - log q, then p (log p - log q)
            d -= log_q;
            d *= &p;
            let rows = row_sum(&d);
            drop(d);
            q -= p;
            (rows.squeeze_dim(1), q)
        }
        Divergence::ReverseKl => {
            let q = log_q.exp();
            let mut d = log_q; // log q - log p, then q (log q - log p - KL)
            d -= log_p;
            let rows = row_sum(&(&q * &d));
            d -= &rows;
            d *= &q;
            (rows.squeeze_dim(1), d)
        }
        Divergence::Jsd { beta } => {
            let log_m = (&log_p + beta.ln()).logaddexp(&(&log_q + (1.0 - beta).ln()));
            let q = log_q.exp();
            let p = log_p.exp();
            let to_teacher = {
                let mut d = log_p; // p (log p - log M)
                d -= &log_m;
                d *= p;
                row_sum(&d) * beta
            };
            let mut from_student = log_q; // log q - log M
            from_student -= log_m;
            let to_student = row_sum(&(&q * &from_student)) * (1.0 - beta);
            from_student *= 1.0 - beta;
            let grad = through_softmax(&q, from_student);
            ((to_teacher + to_student).squeeze_dim(1), grad)
        }
        Divergence::Tvd => {
            let q = log_q.exp();
            drop(log_q);
            let mut diff = log_p.exp(); // q - p
            drop(log_p);
            let _ = diff.neg_();
            diff += &q;
            let rows = row_sum(&diff.abs()) * 0.5;
            let _ = diff.sign_();
            diff *= 0.5;
            (rows.squeeze_dim(1), through_softmax(&q, diff))
        }
    }
}

#[cfg(test)]
#[path = "fused_head_tests.rs"]
mod tests;
