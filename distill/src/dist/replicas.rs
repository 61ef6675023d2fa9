//! What the ranks of a data-parallel job agree on besides the gradients: a step's figures summed
//! over the global batch, whether to stop, and a check that every rank holds the same student.
use tch::{Kind, Tensor};

use super::group::{ProcessGroup, ReduceOp};
use crate::error::{DistillError, Result};
use crate::loop_state::StepFigures;
use crate::objective::LossValues;

/// The step's figures over the global batch from this rank's `local` ones: losses weighted by
/// each rank's samples, correct predictions and samples summed (one all-reduce of 5 numbers).
///
/// # Errors
/// [`DistillError::Distributed`] when a peer is gone.
pub fn global_figures(group: &ProcessGroup, local: &StepFigures) -> Result<StepFigures> {
    let n = local.samples;
    let l = &local.losses;
    let parts = [l.loss * n, l.kd * n, l.ce * n, local.correct.unwrap_or(0.0), n];
    let t = Tensor::from_slice(&parts).to_kind(Kind::Double);
    group.all_reduce(&t, ReduceOp::Sum)?;
    let v = Vec::<f64>::try_from(&t).map_err(|e| DistillError::Torch(e.to_string()))?;
    Ok(StepFigures {
        losses: LossValues { loss: v[0] / v[4], kd: v[1] / v[4], ce: v[2] / v[4] },
        correct: local.correct.map(|_| v[3]),
        samples: v[4],
        ..*local
    })
}

/// Fails unless every rank's `params` (parameters and buffers) sum to the same value (in
/// float64, the same order on every rank): the replicas must stay bit-identical, as identical
/// averaged gradients and rank 0's buffers keep them.
///
/// # Errors
/// [`DistillError::Distributed`] naming the spread when they differ, or when a peer is gone.
pub fn check_identical(group: &ProcessGroup, params: &[Tensor], when: &str) -> Result<()> {
    let sum = tch::no_grad(|| {
        params.iter().fold(0.0f64, |acc, p| acc + p.to_kind(Kind::Double).sum(Kind::Double).double_value(&[]))
    });
    let t = Tensor::from_slice(&[sum, -sum]);
    group.all_reduce(&t, ReduceOp::Max)?;
    let v = Vec::<f64>::try_from(&t).map_err(|e| DistillError::Torch(e.to_string()))?;
    let (max, min) = (v[0], -v[1]);
    if max.to_bits() != min.to_bits() {
        return Err(DistillError::Distributed(format!(
            "rank {}: the ranks' students (parameters and buffers) differ {when} (sums from {min} to {max}); a rank computed other \
             gradients: report this with the cfg.toml",
            group.rank
        )));
    }
    Ok(())
}

/// True on every rank when `flag` is true on any (an all-reduce of one number).
///
/// # Errors
/// [`DistillError::Distributed`] when a peer is gone.
pub fn any_rank(group: &ProcessGroup, flag: bool) -> Result<bool> {
    let t = Tensor::from_slice(&[f32::from(u8::from(flag))]);
    group.all_reduce(&t, ReduceOp::Max)?;
    Ok(t.double_value(&[0]) > 0.0)
}
