//! SyncBatchNorm (`torch.nn.SyncBatchNorm`, torch/nn/modules/batchnorm.py): in a data-parallel
//! job, a training-mode BatchNorm normalises with the mean and variance of the global batch (every
//! rank's micro-batch together) instead of its own micro-batch's, so N ranks at micro-batch b
//! train what one process at batch N x b trains.
//!
//! Each rank computes its micro-batch's per-channel count n_r, mean m_r and sum of squared
//! deviations M2_r (two passes over its own samples), writes them into its row of a
//! [world, 2C + 1] table of zeros, and sums the tables over the ranks
//! ([`ProcessGroup::sum_over_ranks`], whose backward all-reduces the gradients, so autograd
//! differentiates through the other ranks' use of these statistics). The global statistics
//! combine the rows as Chan, Golub and LeVeque (1979) do, without the cancellation of
//! E[x^2] - E[x]^2: n = sum n_r, mean = sum n_r m_r / n, M2 = sum M2_r + sum n_r (m_r - mean)^2,
//! var = M2 / n for normalising and M2 / (n - 1) for the running variance, as PyTorch. One
//! all-reduce a layer in the forward and one in the backward.
//!
//! The layers find the group through a scope ([`synchronised`]) that the training step opens
//! around its forward, as autocast is a scope: evaluation and one-process runs never sync.
use std::cell::RefCell;

use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

use super::group::ProcessGroup;
use crate::host::error::{DistillError, Result};

/// `nn::BatchNormConfig::default()`'s momentum and epsilon, which the students' BatchNorm layers
/// use (the running statistics move by `MOMENTUM` of the batch's each step).
pub const MOMENTUM: f64 = 0.1;
pub const EPS: f64 = 1e-5;

struct Scope {
    group: *const ProcessGroup,
    /// The first failed all-reduce of the scope (later layers normalise alone: the forward's
    /// result is thrown away with the error).
    error: Option<DistillError>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Restores the enclosing scope when `synchronised` ends, also by a panic.
struct Restore(Option<Scope>);

impl Drop for Restore {
    fn drop(&mut self) {
        SCOPE.with(|s| *s.borrow_mut() = self.0.take());
    }
}

/// Runs `f` (a training forward) with every BatchNorm layer it calls ([`forward_t`]) normalising
/// over the ranks of `group`.
///
/// # Errors
/// The first failed all-reduce of the statistics ([`DistillError::Distributed`], naming the ranks
/// that are gone).
pub fn synchronised<T>(group: &ProcessGroup, f: impl FnOnce() -> T) -> Result<T> {
    let outer = SCOPE.with(|s| s.borrow_mut().replace(Scope { group, error: None }));
    let restore = Restore(outer);
    let out = f();
    let error = SCOPE.with(|s| s.borrow_mut().as_mut().and_then(|scope| scope.error.take()));
    drop(restore);
    error.map_or(Ok(out), Err)
}

/// `bn` on `x` ([N, C] or [N, C, H, W]): synchronised over the ranks in training inside
/// [`synchronised`], else tch's BatchNorm.
pub fn forward_t(bn: &nn::BatchNorm, x: &Tensor, train: bool) -> Tensor {
    let group = SCOPE.with(|s| s.borrow().as_ref().filter(|scope| scope.error.is_none()).map(|scope| scope.group));
    let Some(group) = group.filter(|_| train) else { return bn.forward_t(x, train) };
    // SAFETY: the scope lives inside `synchronised`, which borrows the group for its duration.
    match synced(unsafe { &*group }, bn, x) {
        Ok(y) => y,
        Err(e) => {
            SCOPE.with(|s| s.borrow_mut().as_mut().map(|scope| scope.error = Some(e)));
            bn.forward_t(x, train)
        }
    }
}

/// The training forward of `bn` over the global batch, its running statistics updated with the
/// global ones.
fn synced(group: &ProcessGroup, bn: &nn::BatchNorm, x: &Tensor) -> Result<Tensor> {
    let rows = own_row(x, group.rank, group.world);
    let global = Statistics::of(&group.sum_over_ranks(&rows)?, x.size()[1]);
    let channel_shape: Vec<i64> = (0..x.dim() as i64).map(|d| if d == 1 { -1 } else { 1 }).collect();
    let per_channel = |t: &Tensor| t.view(channel_shape.as_slice());
    // (not in place: autograd keeps each product's inputs)
    let normalised = (x.to_kind(Kind::Float) - per_channel(&global.mean)) * per_channel(&(&global.var + EPS).rsqrt());
    let scaled = bn.ws.as_ref().map_or_else(|| normalised.shallow_clone(), |w| &normalised * per_channel(w));
    let y = bn.bs.as_ref().map_or_else(|| scaled.shallow_clone(), |b| &scaled + per_channel(b));
    tch::no_grad(|| {
        let _ =
            bn.running_mean.shallow_clone().g_mul_scalar_(1.0 - MOMENTUM).g_add_(&(global.mean.detach() * MOMENTUM));
        let _ =
            bn.running_var.shallow_clone().g_mul_scalar_(1.0 - MOMENTUM).g_add_(&(global.unbiased_var() * MOMENTUM));
    });
    Ok(y.to_kind(x.kind()))
}

/// Row `rank` of the [world, 2C + 1] table of the ranks' statistics, filled with this rank's
/// (per channel of `x` [N, C, ...]: mean, sum of squared deviations; then the count), the other
/// rows zeros: the sum of every rank's table is the whole table.
fn own_row(x: &Tensor, rank: usize, world: usize) -> Tensor {
    let c = x.size()[1];
    let dims: Vec<i64> = (0..x.dim() as i64).filter(|&d| d != 1).collect();
    let channel_shape: Vec<i64> = (0..x.dim() as i64).map(|d| if d == 1 { c } else { 1 }).collect();
    let xf = x.to_kind(Kind::Float);
    let mean = xf.mean_dim(dims.as_slice(), false, Kind::Float);
    let m2 = (&xf - mean.view(channel_shape.as_slice())).square().sum_dim_intlist(dims.as_slice(), false, Kind::Float);
    let count = Tensor::from_slice(&[(x.numel() as i64 / c) as f32]).to_device(x.device());
    let options = (Kind::Float, x.device());
    let zeros = |rows: usize| Tensor::zeros([rows as i64, 2 * c + 1], options);
    Tensor::cat(&[zeros(rank), Tensor::cat(&[mean, m2, count], 0).unsqueeze(0), zeros(world - rank - 1)], 0)
}

/// The global batch's per-channel statistics [C], from the summed table of [`own_row`]s.
struct Statistics {
    mean: Tensor,
    /// Biased (over the count), as BatchNorm normalises.
    var: Tensor,
    m2: Tensor,
    count: Tensor,
}

impl Statistics {
    fn of(table: &Tensor, c: i64) -> Statistics {
        let (means, m2s, counts) = (table.narrow(1, 0, c), table.narrow(1, c, c), table.narrow(1, 2 * c, 1));
        let count = counts.sum(Kind::Float);
        let mean = (&means * &counts).sum_dim_intlist(0, false, Kind::Float) / &count;
        let m2 = m2s.sum_dim_intlist(0, false, Kind::Float)
            + (&counts * (&means - &mean).square()).sum_dim_intlist(0, false, Kind::Float);
        Statistics { var: &m2 / &count, mean, m2, count }
    }

    /// Over count - 1, as the running variance moves (detached).
    fn unbiased_var(&self) -> Tensor {
        (&self.m2 / (&self.count - 1.0).clamp_min(1.0)).detach()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_are_tchs_batch_norm_defaults() {
        let d = nn::BatchNormConfig::default();
        assert_eq!((d.momentum, d.eps), (MOMENTUM, EPS));
    }

    #[test]
    fn the_ranks_rows_combine_into_the_whole_batchs_statistics() {
        // 7 samples of 3 channels, unevenly split between 3 ranks (2, 4, 1), shifted far from 0
        // where E[x^2] - E[x]^2 would cancel
        let x = Tensor::linspace(0.0, 1.0, 21, (Kind::Float, tch::Device::Cpu)).view([7, 3]).sin() * 5.0 + 1000.0;
        let shares = [(0, 2), (2, 4), (6, 1)];
        let table = shares
            .iter()
            .enumerate()
            .map(|(rank, &(start, len))| own_row(&x.narrow(0, start, len), rank, 3))
            .reduce(|a, b| a + b)
            .unwrap();
        let s = Statistics::of(&table, 3);
        let close = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
        assert!(close(&s.mean, &x.mean_dim(0, false, Kind::Float)) < 1e-4);
        assert!(close(&s.var, &x.var_correction(0, 0.0, false)) < 1e-4, "{}", s.var);
        assert!(close(&s.unbiased_var(), &x.var_correction(0, 1.0, false)) < 1e-4);
        assert_eq!(s.count.double_value(&[]), 7.0);
    }
}
