//! Distillation objectives: the loss of one batch from the student's output, the teacher's
//! output and the labels. One file per kind; [`from_spec`] picks the one `[kd]` asks for.
//!
//! * [`logit_kd`]: Hinton KD on class logits (temperature-scaled KL, batchmean, mixed with CE).
//!
//! An objective sees outputs only, so the student and the teacher may output logits [B, C] or
//! embeddings [B, E] alike; it is computed in fp32 whatever the training precision.
use estimator_wasm::spec::KdSpec;
use tch::Tensor;

pub mod logit_kd;

pub use logit_kd::LogitKd;

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

/// The objective of `[kd]` (today always [`LogitKd`]).
pub fn from_spec(kd: &KdSpec) -> Box<dyn Objective> {
    Box::new(LogitKd { temperature: kd.temperature, alpha: kd.alpha })
}
