//! What the ranks of a data-parallel job agree on besides the gradients: whether to stop, that
//! they run the same job, and a check that every rank holds the same student (the steps' figures
//! over the global batches: [`crate::train::loop_state::merge_figures`]).
use tch::{Kind, Tensor};

use super::group::{ProcessGroup, ReduceOp};
use crate::host::error::{DistillError, Result};

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

/// Fails unless every rank hashed the same `job` (the resolved cfg.toml and the fingerprints of
/// the teacher and data files): ranks launched with other files or `--set`s would train other
/// things, or exchange gradients of other shapes.
///
/// # Errors
/// [`DistillError::Usage`] saying so; [`DistillError::Distributed`] when a peer is gone.
pub fn check_same_job(group: &ProcessGroup, job: &[u8]) -> Result<()> {
    let h = f64::from(crc32fast::hash(job));
    let t = Tensor::from_slice(&[h, -h]);
    group.all_reduce(&t, ReduceOp::Max)?;
    let v = Vec::<f64>::try_from(&t).map_err(|e| DistillError::Torch(e.to_string()))?;
    if v[0] != -v[1] {
        return Err(DistillError::Usage(format!(
            "rank {} of {}: the ranks were launched with different cfg.toml settings, teachers, data or \
             --sync-batch-norm (checksums {} to {}): give every rank the same files, --set options and flags",
            group.rank, group.world, -v[1], v[0]
        )));
    }
    Ok(())
}
