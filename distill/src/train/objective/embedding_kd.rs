//! Embedding distillation: the student's output vector regresses the teacher's, for teachers
//! that return a sentence embedding (or any feature vector) instead of class logits.
//!
//! * `embedding_mse`: `mean((s - t)^2)` over every element of [B, E] (PyTorch's
//!   `nn.MSELoss()`, as sentence-transformers' distillation recipe uses: Reimers & Gurevych
//!   2020, arXiv:2004.09813, "Making monolingual sentence embeddings multilingual using
//!   knowledge distillation").
//! * `embedding_cosine`: `mean(1 - cos(s, t))` over the B rows, blind to the vectors' lengths.
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

/// `[kd]` with embedding teachers: the distance and the weight `alpha` of the (only) term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingKd {
    pub distance: Distance,
    pub alpha: f64,
}

impl Objective for EmbeddingKd {
    /// `kd` = the distance between `student` and `teacher` [B, E] (zero without a teacher),
    /// `loss = alpha * kd`, `ce = 0`; `labels` are not used.
    fn loss(&self, student: &Tensor, teacher: Option<&Tensor>, _labels: Option<&Tensor>) -> LossParts {
        let kd = match teacher {
            Some(teacher) if self.alpha > 0.0 => self.distance(student, teacher),
            _ => Tensor::zeros([], (Kind::Float, student.device())),
        };
        let ce = kd.zeros_like();
        LossParts::of(&kd * self.alpha, kd, ce)
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
        let kd = EmbeddingKd { distance: Distance::Mse, alpha: 0.5 };
        let parts = kd.loss(&t(&[&[1.0, 2.0], &[0.0, 0.0]]), Some(&t(&[&[0.0, 0.0], &[0.0, 3.0]])), None);
        assert!((parts.kd.double_value(&[]) - 3.5).abs() < 1e-6);
        assert!((parts.loss.double_value(&[]) - 1.75).abs() < 1e-6);
        assert_eq!(parts.ce.double_value(&[]), 0.0);
    }

    #[test]
    fn cosine_distance_ignores_length() {
        // row 1: parallel (cos 1); row 2: orthogonal (cos 0); row 3: opposite (cos -1) -> mean(0, 1, 2) = 1
        let kd = EmbeddingKd { distance: Distance::Cosine, alpha: 1.0 };
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
        EmbeddingKd { distance: Distance::Mse, alpha: 1.0 }.loss(&s, Some(&te), None).loss.backward();
        let expect = (&s - &te).detach() * (2.0 / 6.0);
        assert!((s.grad() - expect).abs().max().double_value(&[]) < 1e-7);
    }

    #[test]
    fn no_teacher_means_no_term() {
        let kd = EmbeddingKd { distance: Distance::Mse, alpha: 1.0 };
        assert_eq!(kd.loss(&t(&[&[1.0]]), None, None).loss.double_value(&[]), 0.0);
    }
}
