//! Logit distillation: the Hinton knowledge-distillation loss (Hinton, Vinyals & Dean 2015,
//! arXiv:1503.02531), for teachers that output class logits.
//!
//! `L = alpha * T^2 * D(softmax(t/T), softmax(s/T)) + (1 - alpha) * CE(s, y)`
//!
//! * D is `[kd] divergence` ([`super::divergence`]): forward KL (teacher || student) by
//!   default, or reverse KL, GKD's generalised JSD, the total variation; summed over classes
//!   and averaged over the B samples (PyTorch's `reduction="batchmean"`; `"mean"` would also
//!   divide by the class count).
//! * T^2 keeps forward KL's gradient, `T * (p_s - p_t) / B`, on the same scale as the CE
//!   term's when T changes (paper section 2); every divergence takes the same factor.
//! * Both log-softmaxes are computed in fp32 whatever the training precision (docs/kd-pitfalls.md N2),
//!   with the fused `log_softmax` and `log_target = true`, so no `0 * log 0` and no epsilon.
//! * CE is the usual hard-label cross-entropy at T = 1, mean over samples.
//! * A language model's logits [B, S, V] with next-token labels [B, S] are scored per token:
//!   the positions with a label (not -100, PyTorch's `ignore_index`) are the rows, so KL and CE
//!   are averaged over the predicting tokens (token-level KD, as MiniLLM and GKD average it).
//!
//! # Example
//!
//! One sample, two classes, `T = 2`, `alpha = 0.5`. The student's logits `[0, 0]` give
//! `p_s = [1/2, 1/2]` at any temperature; the teacher's `[2 ln 3, 0]` divided by T give
//! `p_t = softmax([ln 3, 0]) = [3/4, 1/4]`. So `kd = T^2 KL(p_t || p_s) = 4 (3/4 ln(3/2) +
//! 1/4 ln(1/2)) = 3 ln 3 - 4 ln 2 = ln(27/16)`; the label 0 gives `ce = -ln(1/2) = ln 2` at
//! T = 1; and `loss = 0.5 kd + 0.5 ce = ln(27/8) / 2`.
//!
//! ```
//! use distill::train::objective::logit_kd::{kd_loss, LogitKd};
//! use tch::Tensor;
//!
//! let student = Tensor::from_slice(&[0.0f32, 0.0]).view([1, 2]);
//! let teacher = Tensor::from_slice(&[2.0 * 3f32.ln(), 0.0]).view([1, 2]);
//! let labels = Tensor::from_slice(&[0i64]);
//! let parts = kd_loss(&student, Some(&teacher), &labels, &LogitKd::forward_kl(2.0, 0.5));
//! let near = |t: &Tensor, want: f64| (t.double_value(&[]) - want).abs() < 1e-6;
//! assert!(near(&parts.kd, (27.0f64 / 16.0).ln()));
//! assert!(near(&parts.ce, 2f64.ln()));
//! assert!(near(&parts.loss, (27.0f64 / 8.0).ln() / 2.0));
//! ```
use tch::{Kind, Tensor};

use super::divergence::{soft_loss, Divergence};
use super::loss::{LossParts, Objective};

/// `[kd]` with class-logit teachers: temperature `T`, the soft term's weight `alpha` and its
/// divergence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitKd {
    pub temperature: f64,
    pub alpha: f64,
    pub divergence: Divergence,
}

impl LogitKd {
    /// Hinton's loss: the soft term is the forward KL.
    pub fn forward_kl(temperature: f64, alpha: f64) -> LogitKd {
        LogitKd { temperature, alpha, divergence: Divergence::ForwardKl }
    }
}

impl Objective for LogitKd {
    /// [`kd_loss`]: `loss = alpha * kd + (1 - alpha) * ce`, `kd = T^2 * D(p_t^T, p_s^T)`
    /// per sample (the soft term before alpha), `ce` the cross-entropy against the labels (zero
    /// without labels, so that `loss = alpha * kd`).
    fn loss(&self, student: &Tensor, teacher: Option<&Tensor>, labels: Option<&Tensor>) -> LossParts {
        if let (3, Some(labels)) = (student.dim(), labels) {
            let (student, teacher, labels) = token_rows(student, teacher, labels);
            return kd_loss(&student, teacher.as_ref(), &labels, self);
        }
        match labels {
            Some(labels) => kd_loss(student, teacher, labels, self),
            None => {
                let kd = match teacher {
                    Some(teacher) if self.alpha > 0.0 => soft_loss(student, teacher, self.temperature, self.divergence),
                    _ => Tensor::zeros([], (Kind::Float, student.device())),
                };
                let ce = kd.zeros_like();
                LossParts::of(&kd * self.alpha, kd, ce)
            }
        }
    }

    /// The top-1 class [B] (Int64) of logits [B, C]; a language model's top-1 tokens [B, S] of
    /// logits [B, S, V].
    fn predictions(&self, output: &Tensor) -> Tensor {
        output.argmax(-1, false)
    }
}

/// The predicting positions of token logits `student`, `teacher` [B, S, V] as rows [K, V], and
/// their labels [K]: the positions whose label in `labels` [B, S] is not negative.
fn token_rows(student: &Tensor, teacher: Option<&Tensor>, labels: &Tensor) -> (Tensor, Option<Tensor>, Tensor) {
    let labels = labels.reshape([-1]);
    let keep = labels.ge(0).nonzero().squeeze_dim(1);
    let rows = |t: &Tensor| t.flatten(0, 1).index_select(0, &keep);
    (rows(student), teacher.map(rows), labels.index_select(0, &keep))
}

/// KD loss (`kd`'s temperature, alpha and divergence) of student logits `student` [B, C]
/// against teacher logits `teacher` [B, C] and labels `labels` [B] (Int64). `teacher = None`
/// (alpha = 0, no teacher) makes `kd` zero.
pub fn kd_loss(student: &Tensor, teacher: Option<&Tensor>, labels: &Tensor, kd: &LogitKd) -> LossParts {
    let alpha = kd.alpha;
    let student = student.to_kind(Kind::Float);
    // no row (a language model's batch whose positions all lack a next token): a term of 0,
    // with its graph, where the mean over no rows is NaN (blamed on train.lr as a divergence)
    let ce = match student.size()[0] {
        0 => student.sum(Kind::Float) * 0.0,
        _ => student.log_softmax(-1, Kind::Float).nll_loss(labels),
    };
    let soft = match teacher {
        Some(teacher) if alpha > 0.0 => soft_loss(&student, teacher, kd.temperature, kd.divergence),
        _ => Tensor::zeros([], (Kind::Float, student.device())),
    };
    let loss = &soft * alpha + &ce * (1.0 - alpha);
    LossParts::of(loss, soft, ce)
}

#[cfg(test)]
mod tests {
    use super::super::divergence::forward_kl as soft_target_loss;
    use super::*;

    fn t(rows: &[&[f32]]) -> Tensor {
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).reshape([rows.len() as i64, rows[0].len() as i64])
    }

    fn scalar(x: &Tensor) -> f64 {
        x.double_value(&[])
    }

    #[test]
    fn two_class_closed_form() {
        // s = [0, 0] -> p_s = [1/2, 1/2]; t = [ln 3, 0] -> p_t = [3/4, 1/4] at T = 1.
        // KL = 3/4 ln(3/2) + 1/4 ln(1/2) = 0.1308120...
        let kl = 0.75 * (1.5f64).ln() + 0.25 * (0.5f64).ln();
        let s = t(&[&[0.0, 0.0]]);
        let te = t(&[&[3f32.ln(), 0.0]]);
        assert!((scalar(&soft_target_loss(&s, &te, 1.0)) - kl).abs() < 1e-6);
        // At T = 2 the teacher logits halve: p_t = softmax([ln 3 / 2, 0]) = [sqrt3/(1+sqrt3), 1/(1+sqrt3)].
        let (a, b) = (3f64.sqrt() / (1.0 + 3f64.sqrt()), 1.0 / (1.0 + 3f64.sqrt()));
        let kl2 = a * (2.0 * a).ln() + b * (2.0 * b).ln();
        assert!((scalar(&soft_target_loss(&s, &te, 2.0)) - 4.0 * kl2).abs() < 1e-6);
    }

    #[test]
    fn batchmean_averages_over_rows_not_classes() {
        // Row 1 has the closed-form KL above, row 2 is identical logits (KL 0): batchmean halves.
        let kl = 0.75 * (1.5f64).ln() + 0.25 * (0.5f64).ln();
        let s = t(&[&[0.0, 0.0], &[1.0, 2.0]]);
        let te = t(&[&[3f32.ln(), 0.0], &[1.0, 2.0]]);
        assert!((scalar(&soft_target_loss(&s, &te, 1.0)) - kl / 2.0).abs() < 1e-6);
    }

    #[test]
    fn identical_or_shifted_logits_give_zero_kl() {
        let s = t(&[&[1.0, -2.0, 0.5], &[3.0, 3.0, -1.0]]);
        let shifted = &s + 7.5;
        assert!(scalar(&soft_target_loss(&s, &shifted, 4.0)).abs() < 1e-6);
    }

    #[test]
    fn token_logits_are_scored_per_predicting_token() {
        // B = 1, S = 3, V = 2; position 2 has no next token (-100). Its logits are absurd, so
        // counting it would show. Rows kept: 0 and 1.
        let s = Tensor::from_slice(&[0.0f32, 0.0, 1.0, 0.0, 50.0, -50.0]).reshape([1, 3, 2]);
        let t = Tensor::from_slice(&[0.0f32, 0.0, 0.0, 1.0, -50.0, 50.0]).reshape([1, 3, 2]);
        let y = Tensor::from_slice(&[1i64, 0, -100]).reshape([1, 3]);
        let kd = LogitKd::forward_kl(1.0, 0.5);
        let parts = kd.loss(&s, Some(&t), Some(&y));
        // row 0: KL(t=(.5,.5) || s=(.5,.5)) = 0; row 1: t = softmax(0, 1), s = softmax(1, 0):
        // KL = sum t (log t - log s) = (p - q) (log p - log q) with p = sigma(1), q = 1 - p
        let p = 1.0 / (1.0 + (-1.0f64).exp());
        let kl1 = (2.0 * p - 1.0) * (p.ln() - (1.0 - p).ln());
        assert!((scalar(&parts.kd) - kl1 / 2.0).abs() < 1e-6, "{}", scalar(&parts.kd));
        // CE: row 0 -log 0.5, row 1 -log softmax(1, 0)[0] = -log p
        let ce = (2f64.ln() - p.ln()) / 2.0;
        assert!((scalar(&parts.ce) - ce).abs() < 1e-6, "{}", scalar(&parts.ce));
        assert!((scalar(&parts.loss) - (0.5 * kl1 / 2.0 + 0.5 * ce)).abs() < 1e-6);
        assert_eq!(Vec::<Vec<i64>>::try_from(kd.predictions(&s)).unwrap(), [vec![0, 0, 0]]);
    }

    #[test]
    fn a_token_batch_without_a_predicting_position_scores_zero_not_nan() {
        // every label -100 (no next token anywhere): no row is scored; the loss parts are 0,
        // and the gradient 0, where CE's mean over no rows was NaN ("loss became NaN: lower
        // train.lr")
        let s = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.0]).reshape([1, 2, 2]).set_requires_grad(true);
        let t = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0]).reshape([1, 2, 2]);
        let y = Tensor::from_slice(&[-100i64, -100]).reshape([1, 2]);
        let parts = LogitKd::forward_kl(2.0, 0.5).loss(&s, Some(&t), Some(&y));
        assert_eq!([scalar(&parts.loss), scalar(&parts.kd), scalar(&parts.ce)], [0.0; 3]);
        parts.loss.backward();
        assert_eq!(Vec::<f32>::try_from(s.grad().reshape([-1])).unwrap(), [0.0; 4]);
    }

    #[test]
    fn total_mixes_terms_and_ce_matches_hand_value() {
        // CE of s = [0, 0] with label 0 is ln 2.
        let s = t(&[&[0.0, 0.0]]);
        let te = t(&[&[3f32.ln(), 0.0]]);
        let y = Tensor::from_slice(&[0i64]);
        let kl = 0.75 * (1.5f64).ln() + 0.25 * (0.5f64).ln();
        let loss = kd_loss(&s, Some(&te), &y, &LogitKd::forward_kl(1.0, 0.25));
        assert!((scalar(&loss.ce) - 2f64.ln()).abs() < 1e-6);
        assert!((scalar(&loss.loss) - (0.25 * kl + 0.75 * 2f64.ln())).abs() < 1e-6);
        let no_teacher = kd_loss(&s, None, &y, &LogitKd::forward_kl(1.0, 0.0));
        assert_eq!(scalar(&no_teacher.kd), 0.0);
        assert!((scalar(&no_teacher.loss) - 2f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn soft_gradient_is_t_times_prob_difference_over_rows() {
        // d/ds [T^2 KL] = T (p_s^T - p_t^T) / B  (with the T^2 factor), at T in {1, 4, 20}.
        for temp in [1.0, 4.0, 20.0] {
            let s = t(&[&[0.3, -1.2, 2.0], &[1.0, 0.0, -0.5]]).set_requires_grad(true);
            let te = t(&[&[1.5, 0.2, -0.7], &[-1.0, 2.5, 0.0]]);
            soft_target_loss(&s, &te, temp).backward();
            let expect = ((&s / temp).softmax(-1, Kind::Float) - (&te / temp).softmax(-1, Kind::Float)) * (temp / 2.0);
            let diff = (s.grad() - expect.detach()).abs().max();
            assert!(scalar(&diff) < 1e-6, "T = {temp}: max diff {}", scalar(&diff));
        }
    }

    #[test]
    fn computed_in_fp32_from_half_logits() {
        // Logits [10, 0], label 1: CE = 10 + ln(1 + e^-10) = 10.0000453989. Near 10, fp16 values
        // are 2^-7 apart and bf16 values 2^-4, so a 16-bit log-softmax returns 10 exactly and
        // loses the 4.54e-5; computed in fp32 (spacing 9.5e-7) it is kept.
        let tail = (-10f64).exp().ln_1p();
        let exact_ce = 10.0 + tail;
        // Soft term at T = 1 against a uniform teacher: KL = -ln 2 + (ln(1 + e^-10) + exact_ce) / 2.
        let exact_kl = -(2f64.ln()) + (tail + exact_ce) / 2.0;
        let y = Tensor::from_slice(&[1i64]);
        for kind in [Kind::Half, Kind::BFloat16] {
            let s = t(&[&[10.0, 0.0]]).to_kind(kind);
            let te = t(&[&[0.0, 0.0]]).to_kind(kind);
            let loss = kd_loss(&s, Some(&te), &y, &LogitKd::forward_kl(1.0, 0.5));
            assert_eq!(loss.loss.kind(), Kind::Float);
            assert!((scalar(&loss.ce) - exact_ce).abs() < 1e-6, "{kind:?}: ce {}", scalar(&loss.ce));
            assert!((scalar(&loss.kd) - exact_kl).abs() < 1e-6, "{kind:?}: kd {}", scalar(&loss.kd));
            // The same computation in 16 bits is off by the whole tail.
            let naive_ce = -scalar(&s.log_softmax(-1, kind).get(0).get(1));
            assert_eq!(naive_ce, 10.0, "{kind:?}");
            assert!((naive_ce - exact_ce).abs() > 4.5e-5);
        }
    }
}
