//! The interface of a distillation objective: the loss parts it returns for a batch.
use serde::{Deserialize, Serialize};
use tch::Tensor;

pub use super::agreement::Agreement;

/// The parts of a batch's loss: `loss` (what is back-propagated: the distillation and label
/// terms mixed by the objective), `kd` (the distillation term, student against teacher, before
/// its weight; zero without a teacher) and `ce` (the label term, cross-entropy against the
/// labels, before its weight) and, with `[[kd.hidden]]` pairs, `hidden` (their weighted
/// distances, `sum_k weight_k D_k` of [`super::hidden_kd`], which `loss` holds unweighted by
/// alpha: `loss = alpha kd + (1 - alpha) ce + hidden` for logits; `None` without pairs).
///
/// As an objective returns them: 0-dim fp32 tensors (`LossParts<Tensor>`). As logged and reported
/// ([`LossValues`]): one value each, a mean over a window, or running sums.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossParts<T = Tensor> {
    pub loss: T,
    pub kd: T,
    pub ce: T,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<T>,
}

/// The loss parts as host values (`metrics.jsonl`, `report.json`).
pub type LossValues = LossParts<f64>;

impl LossParts<Tensor> {
    /// The parts' values (a device-to-host copy each).
    pub fn values(&self) -> LossValues {
        LossParts {
            loss: self.loss.double_value(&[]),
            kd: self.kd.double_value(&[]),
            ce: self.ce.double_value(&[]),
            hidden: self.hidden.as_ref().map(|h| h.double_value(&[])),
        }
    }

    /// The objective's parts `loss`, `kd` and `ce`, no hidden term.
    pub fn of(loss: Tensor, kd: Tensor, ce: Tensor) -> LossParts {
        LossParts { loss, kd, ce, hidden: None }
    }

    /// Adds the hidden pairs' term `hidden` (0-dim, with its graph) to `loss` and records its
    /// value (detached) as the `hidden` part, on top of any already there.
    pub fn add_hidden(&mut self, hidden: &Tensor) {
        self.loss = &self.loss + hidden;
        let value = hidden.detach();
        self.hidden = Some(match self.hidden.take() {
            Some(h) => h + value,
            None => value,
        });
    }
}

impl LossValues {
    /// Each part divided by `n`.
    pub fn mean(self, n: f64) -> LossValues {
        LossParts { loss: self.loss / n, kd: self.kd / n, ce: self.ce / n, hidden: self.hidden.map(|h| h / n) }
    }
}

/// `loss 0.1234 (kd 0.1234 ce 0.1234)`, with pairs `loss 0.1234 (kd 0.1234 ce 0.1234 hidden
/// 0.1234)`: the parts as progress lines show them.
impl std::fmt::Display for LossValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "loss {:.4} (kd {:.4} ce {:.4}", self.loss, self.kd, self.ce)?;
        match self.hidden {
            Some(h) => write!(f, " hidden {h:.4})"),
            None => write!(f, ")"),
        }
    }
}

impl std::ops::AddAssign for LossValues {
    fn add_assign(&mut self, other: LossValues) {
        self.loss += other.loss;
        self.kd += other.kd;
        self.ce += other.ce;
        self.hidden = match (self.hidden, other.hidden) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
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
