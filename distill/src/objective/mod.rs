//! Distillation objectives: the loss of one batch from the student's output, the teacher's
//! output and the labels. One file per kind; [`from_spec`] picks the one `[kd]` asks for.
//!
//! * [`loss`]: the interface, [`Objective`] and the [`LossParts`] it returns.
//! * [`logit_kd`]: Hinton KD on class logits (temperature-scaled KL, batchmean, mixed with CE).
//!
//! An objective sees outputs only, so the student and the teacher may output logits [B, C] or
//! embeddings [B, E] alike; it is computed in fp32 whatever the training precision.
use estimator_wasm::schema::KdSpec;

pub mod logit_kd;
pub mod loss;

pub use logit_kd::LogitKd;
pub use loss::{LossParts, LossValues, Objective};

/// The objective of `[kd]`: the one place that picks an objective (today always [`LogitKd`];
/// another kind is one more file and one more arm here).
pub fn from_spec(kd: &KdSpec) -> Box<dyn Objective> {
    Box::new(LogitKd { temperature: kd.temperature, alpha: kd.alpha })
}
