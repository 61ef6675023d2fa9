//! Embedding distillation: the student's output vector regresses the teacher's, for teachers
//! that return a sentence embedding (or any feature vector) instead of class logits.
//!
//! * `embedding_mse`: `mean((s - t)^2)` over every element of [B, E] (PyTorch's
//!   `nn.MSELoss()`, as sentence-transformers' distillation recipe uses: Reimers & Gurevych
//!   2020, arXiv:2004.09813, "Making monolingual sentence embeddings multilingual using
//!   knowledge distillation").
//! * `embedding_cosine`: `mean(1 - cos(s, t))` over the B rows, blind to the vectors' lengths.
//!
//! `[kd] similarity = beta` adds `beta` times the pair-similarity term: the mean over the
//! batch's ordered pairs i != j of `(cos(s_i, s_j) - cos(t_i, t_j))^2`, the student's [B, B]
//! cosine matrix against the teacher's (similarity-preserving KD: Tung & Mori 2019,
//! arXiv:1907.09682, there on activations; Park et al. 2019's distance-wise relational KD is the
//! same idea on distances). The distance pulls each vector towards its own target equally in
//! every direction; this term weighs the errors that move the pairs' similarities, which is what
//! a sentence encoder's users rank by.
//!
//! There is no label term (an embedding is not a class score): `loss = alpha * kd`, `ce = 0`.
//! Computed in fp32 whatever the training precision. Held-out agreement is the mean cosine
//! similarity between the student's and the teacher's vectors.
use tch::{Kind, Reduction, Tensor};

use super::agreement::{cosine, Agreement};
use super::loss::{LossParts, Objective};

/// The distance `[kd] objective` names for embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distance {
    Mse,
    Cosine,
}

/// `[kd]` with embedding teachers: the distance, the weight `similarity` of the pair-similarity
/// term added to it, and the weight `alpha` of their sum (the only term).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingKd {
    pub distance: Distance,
    pub alpha: f64,
    pub similarity: f64,
}

impl Objective for EmbeddingKd {
    /// `kd` = the distance between `student` and `teacher` [B, E], plus `similarity` times
    /// their pair-similarity term (zero without a teacher), `loss = alpha * kd`, `ce = 0`;
    /// `labels` are not used.
    fn loss(&self, student: &Tensor, teacher: Option<&Tensor>, _labels: Option<&Tensor>) -> LossParts {
        let kd = match teacher {
            Some(teacher) if self.alpha > 0.0 => {
                // one fp32 copy of each side, shared by both terms
                let (s, t) = (student.to_kind(Kind::Float), teacher.to_kind(Kind::Float));
                let distance = self.distance(&s, &t);
                if self.similarity > 0.0 {
                    distance + pair_similarity(&s, &t) * self.similarity
                } else {
                    distance
                }
            }
            _ => Tensor::zeros([], (Kind::Float, student.device())),
        };
        LossParts { loss: &kd * self.alpha, ce: kd.zeros_like(), kd }
    }

    /// The output itself [B, E]: an embedding is compared whole.
    fn predictions(&self, output: &Tensor) -> Tensor {
        output.to_kind(Kind::Float)
    }

    fn agreement(&self) -> Agreement {
        Agreement::Cosine
    }
}

impl EmbeddingKd {
    /// The distance of `student` from `teacher` [B, E], a 0-dim fp32 tensor.
    pub fn distance(&self, student: &Tensor, teacher: &Tensor) -> Tensor {
        let (s, t) = (student.to_kind(Kind::Float), teacher.to_kind(Kind::Float));
        match self.distance {
            Distance::Mse => s.mse_loss(&t, Reduction::Mean),
            Distance::Cosine => (cosine(&s, &t).neg() + 1.0).mean(Kind::Float),
        }
    }
}

/// The mean over the ordered pairs i != j of the rows of `student` and `teacher` [B, E] of
/// `(cos(s_i, s_j) - cos(t_i, t_j))^2`, a 0-dim fp32 tensor (fp64 for fp64 inputs; 0 for
/// B = 1: no pairs). The
/// diagonals (each row with itself, cosine 1 on both sides) add nothing, so the sum over the
/// whole [B, B] matrices is divided by B (B - 1).
pub fn pair_similarity(student: &Tensor, teacher: &Tensor) -> Tensor {
    let b = student.size()[0];
    let unit = |x: &Tensor| {
        let x = if x.kind() == Kind::Double { x.shallow_clone() } else { x.to_kind(Kind::Float) };
        let norm = x.norm_scalaropt_dim(2.0, [1i64].as_slice(), true).clamp_min(1e-12);
        x / norm
    };
    let (s, t) = (unit(student), unit(teacher));
    let gap = s.matmul(&s.tr()) - t.matmul(&t.tr());
    gap.square().sum(gap.kind()) / (b * (b - 1)).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: &[&[f32]]) -> Tensor {
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).reshape([rows.len() as i64, rows[0].len() as i64])
    }

    #[test]
    fn mse_averages_over_every_element() {
        // (1 - 0)^2 + (2 - 0)^2 + (0 - 0)^2 + (0 - 3)^2 = 14 over 4 elements
        let kd = EmbeddingKd { distance: Distance::Mse, alpha: 0.5, similarity: 0.0 };
        let parts = kd.loss(&t(&[&[1.0, 2.0], &[0.0, 0.0]]), Some(&t(&[&[0.0, 0.0], &[0.0, 3.0]])), None);
        assert!((parts.kd.double_value(&[]) - 3.5).abs() < 1e-6);
        assert!((parts.loss.double_value(&[]) - 1.75).abs() < 1e-6);
        assert_eq!(parts.ce.double_value(&[]), 0.0);
    }

    #[test]
    fn cosine_distance_ignores_length() {
        // row 1: parallel (cos 1); row 2: orthogonal (cos 0); row 3: opposite (cos -1) -> mean(0, 1, 2) = 1
        let kd = EmbeddingKd { distance: Distance::Cosine, alpha: 1.0, similarity: 0.0 };
        let s = t(&[&[1.0, 1.0], &[1.0, 0.0], &[0.0, 2.0]]);
        let te = t(&[&[3.0, 3.0], &[0.0, 5.0], &[0.0, -1.0]]);
        assert!((kd.loss(&s, Some(&te), None).kd.double_value(&[]) - 1.0).abs() < 1e-6);
        let cos: Vec<f32> = Vec::try_from(cosine(&s, &te)).unwrap();
        for (got, want) in cos.iter().zip([1.0, 0.0, -1.0]) {
            assert!((got - want).abs() < 1e-6, "{cos:?}");
        }
    }

    #[test]
    fn mse_gradient_is_two_differences_over_elements() {
        // d/ds mean((s - t)^2) = 2 (s - t) / (B * E)
        let s = t(&[&[0.5, -1.0, 2.0], &[1.0, 0.0, 0.25]]).set_requires_grad(true);
        let te = t(&[&[0.0, 1.0, 1.0], &[-1.0, 0.5, 0.25]]);
        EmbeddingKd { distance: Distance::Mse, alpha: 1.0, similarity: 0.0 }.loss(&s, Some(&te), None).loss.backward();
        let expect = (&s - &te).detach() * (2.0 / 6.0);
        assert!((s.grad() - expect).abs().max().double_value(&[]) < 1e-7);
    }

    #[test]
    fn the_pair_similarity_term_compares_the_cosine_matrices_off_their_diagonals() {
        // student rows a = (1, 0), b = (0, 1), c = (1, 1); teacher a = (1, 0), b = (1, 0),
        // c = (0, 2). Cosines ab, ac, bc: student 0, 0.7071, 0.7071; teacher 1, 0, 0. Squared
        // gaps 1, 0.5, 0.5, each pair counted twice: 4 over 3 * 2 ordered pairs = 2/3.
        let s = t(&[&[1.0, 0.0], &[0.0, 1.0], &[1.0, 1.0]]);
        let te = t(&[&[1.0, 0.0], &[1.0, 0.0], &[0.0, 2.0]]);
        assert!((pair_similarity(&s, &te).double_value(&[]) - 2.0 / 3.0).abs() < 1e-6);
        // MSE (0 + 0 + 1 + 1 + 1 + 1) / 6 = 2/3, plus 3 * 2/3; alpha 0.5 halves the sum
        let kd = EmbeddingKd { distance: Distance::Mse, alpha: 0.5, similarity: 3.0 };
        let parts = kd.loss(&s, Some(&te), None);
        assert!((parts.kd.double_value(&[]) - 8.0 / 3.0).abs() < 1e-6);
        assert!((parts.loss.double_value(&[]) - 4.0 / 3.0).abs() < 1e-6);
        // lengths do not count, and one row has no pair
        assert!(pair_similarity(&(&s * 5.0), &te).double_value(&[]) - 2.0 / 3.0 < 1e-6);
        assert_eq!(pair_similarity(&t(&[&[1.0, 2.0]]), &t(&[&[3.0, -1.0]])).double_value(&[]), 0.0);
    }

    #[test]
    fn the_pair_similarity_gradient_matches_finite_differences() {
        let s = t(&[&[0.5, -1.0, 2.0], &[1.0, 0.3, 0.25], &[-0.2, 0.7, 0.1]]).to_kind(Kind::Double);
        let te = t(&[&[0.0, 1.0, 1.0], &[-1.0, 0.5, 0.25], &[0.4, 0.4, -0.3]]).to_kind(Kind::Double);
        let x = s.copy().set_requires_grad(true);
        pair_similarity(&x, &te).backward();
        let grad: Vec<f64> = Vec::try_from(x.grad().flatten(0, -1)).unwrap();
        for (k, g) in grad.iter().enumerate() {
            let bump = |h: f64| {
                let y = s.flatten(0, -1).copy();
                let _ = y.get(k as i64).g_add_scalar_(h);
                pair_similarity(&y.reshape([3, 3]), &te).double_value(&[])
            };
            let numeric = (bump(1e-6) - bump(-1e-6)) / 2e-6;
            assert!((numeric - g).abs() < 1e-8, "element {k}: {numeric} against {g}");
        }
    }

    #[test]
    fn no_teacher_means_no_term() {
        let kd = EmbeddingKd { distance: Distance::Mse, alpha: 1.0, similarity: 0.0 };
        assert_eq!(kd.loss(&t(&[&[1.0]]), None, None).loss.double_value(&[]), 0.0);
    }
}
