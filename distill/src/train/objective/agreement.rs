//! How a student's held-out outputs are compared with the teacher's ([`Agreement`]): the share
//! of equal top-1 classes for logits, the mean cosine similarity for embeddings.
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// How the student's held-out outputs are compared with the teacher's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Class logits: the fraction of samples whose top-1 classes are equal; predictions are
    /// also scored against labels (accuracy).
    #[default]
    Top1,
    /// Embeddings: the mean cosine similarity of the two vectors; no accuracy.
    Cosine,
}

impl Agreement {
    /// The agreement of student predictions `student` with the teacher's `teacher` (both as
    /// [`Objective::predictions`] returns them, [N] or [N, E]), in [0, 1] (cosine: [-1, 1]).
    pub fn between(self, student: &Tensor, teacher: &Tensor) -> f64 {
        match self {
            Agreement::Top1 => student.eq_tensor(teacher).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]),
            Agreement::Cosine => cosine(student, teacher).mean(Kind::Float).double_value(&[]),
        }
    }

    /// Whether predictions are classes that labels can score (accuracy).
    pub fn classifies(self) -> bool {
        self == Agreement::Top1
    }

    /// How the printed summary names it.
    pub fn label(self) -> &'static str {
        match self {
            Agreement::Top1 => "top-1 agreement w/ teacher",
            Agreement::Cosine => "cosine w/ teacher (mean)",
        }
    }
}

/// Row-wise cosine similarity of `a` and `b` [B, E] -> [B] (fp32), each norm clamped at 1e-8
/// as `torch.nn.functional.cosine_similarity` does.
pub fn cosine(a: &Tensor, b: &Tensor) -> Tensor {
    let (a, b) = (a.to_kind(Kind::Float), b.to_kind(Kind::Float));
    let dot = (&a * &b).sum_dim_intlist(-1, false, Kind::Float);
    let norms =
        a.norm_scalaropt_dim(2, [-1], false).clamp_min(1e-8) * b.norm_scalaropt_dim(2, [-1], false).clamp_min(1e-8);
    dot / norms
}
