//! Distillation objectives: the loss of one batch from the student's output, the teacher's
//! output and the labels. One file per kind; [`from_spec`] picks the one `[kd]` asks for.
//!
//! * [`loss`]: the interface, [`Objective`] and the [`LossParts`] it returns.
//! * [`logit_kd`]: Hinton KD on class logits (a temperature-scaled divergence, batchmean, mixed
//!   with CE); [`divergence`]: the divergences it takes (forward and reverse KL, JSD, TVD).
//! * [`fused_head`]: a language model's head and logit loss fused, chunk by chunk, with
//!   closed-form gradients (`kd.fused_head`): the student's [B, S, V] logits never exist.
//! * [`embedding_kd`]: MSE or cosine distance between output vectors (sentence embeddings).
//!
//! An objective sees outputs only, so the student and the teacher may output logits [B, C] or
//! embeddings [B, E] alike; it is computed in fp32 whatever the training precision.
use estimator_wasm::schema::{KdObjective, KdSpec};

pub mod agreement;
pub mod divergence;
pub mod embedding_kd;
pub mod fused_head;
pub mod hidden_kd;
pub mod logit_kd;
pub mod loss;

pub use divergence::Divergence;
pub use embedding_kd::{Distance, EmbeddingKd};
pub use logit_kd::LogitKd;
pub use loss::{Agreement, LossParts, LossValues, Objective};

/// The objective `[kd] objective` names: the one place that picks an objective (another kind
/// is one more file and one more arm here).
pub fn from_spec(kd: &KdSpec) -> Box<dyn Objective> {
    let embedding = |distance| Box::new(EmbeddingKd { distance, alpha: kd.alpha });
    match kd.objective {
        KdObjective::Logits => {
            Box::new(LogitKd { temperature: kd.temperature, alpha: kd.alpha, divergence: Divergence::of(kd) })
        }
        KdObjective::EmbeddingMse => embedding(Distance::Mse),
        KdObjective::EmbeddingCosine => embedding(Distance::Cosine),
    }
}
