//! The interface of a distillation objective: the loss parts it returns for a batch.
use serde::{Deserialize, Serialize};
use tch::Tensor;

pub use super::agreement::Agreement;

/// The parts of a batch's loss: `loss` (what is back-propagated: the distillation and label
/// terms mixed by the objective), `kd` (the distillation term, student against teacher, before
/// its weight; zero without a teacher) and `ce` (the label term, cross-entropy against the
/// labels, before its weight).
///
/// As an objective returns them: 0-dim fp32 tensors (`LossParts<Tensor>`). As logged and reported
/// ([`LossValues`]): one value each, a mean over a window, or running sums.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossParts<T = Tensor> {
    pub loss: T,
    pub kd: T,
    pub ce: T,
}

/// The loss parts as host values (`metrics.jsonl`, `report.json`).
pub type LossValues = LossParts<f64>;

impl LossParts<Tensor> {
    /// The parts' values (a device-to-host copy each).
    pub fn values(&self) -> LossValues {
        LossParts { loss: self.loss.double_value(&[]), kd: self.kd.double_value(&[]), ce: self.ce.double_value(&[]) }
    }
}

impl LossValues {
    /// Each part divided by `n`.
    pub fn mean(self, n: f64) -> LossValues {
        LossParts { loss: self.loss / n, kd: self.kd / n, ce: self.ce / n }
    }
}

/// `loss 0.1234 (kd 0.1234 ce 0.1234)`: the parts as progress lines show them.
impl std::fmt::Display for LossValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "loss {:.4} (kd {:.4} ce {:.4})", self.loss, self.kd, self.ce)
    }
}

impl std::ops::AddAssign for LossValues {
    fn add_assign(&mut self, other: LossValues) {
        self.loss += other.loss;
        self.kd += other.kd;
        self.ce += other.ce;
    }
}

/// A distillation loss, and how the outputs it compares are scored.
pub trait Objective {
    /// The loss parts of student output `student` [B, ...] against teacher output `teacher`
    /// ([B, ...] fp32, `None` when the run has no teacher term) and labels `labels` ([B] Int64;
    /// `None` for unlabelled data, where the label term is zero).
    fn loss(&self, student: &Tensor, teacher: Option<&Tensor>, labels: Option<&Tensor>) -> LossParts;

    /// What accuracy and teacher-student agreement compare, from outputs `output` [B, ...] of the
    /// student or the teacher: for class logits the top-1 class ids [B] (Int64); for embeddings
    /// the vectors [B, E] (fp32).
    fn predictions(&self, output: &Tensor) -> Tensor;

    /// How predictions are compared with the teacher's (and whether labels score them).
    fn agreement(&self) -> Agreement {
        Agreement::Top1
    }
}
