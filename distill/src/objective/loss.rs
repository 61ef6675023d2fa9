//! The interface of a distillation objective: the loss parts it returns for a batch.
use tch::Tensor;

/// The scalar (0-dim, fp32) parts of one batch's loss, as the log reports them.
#[derive(Debug)]
pub struct LossParts {
    /// What is back-propagated: the distillation and label terms mixed by the objective.
    pub total: Tensor,
    /// The distillation term (student against teacher), before its weight; zero without a
    /// teacher.
    pub kd: Tensor,
    /// The label term (cross-entropy against the labels), before its weight.
    pub ce: Tensor,
}

/// A distillation loss.
pub trait Objective {
    /// The loss parts of student output `student` [B, ...] against teacher output `teacher`
    /// ([B, ...] fp32, `None` when the run has no teacher term) and labels `labels` [B] (Int64).
    fn loss(&self, student: &Tensor, teacher: Option<&Tensor>, labels: &Tensor) -> LossParts;
}
