//! The largest micro-batch that fits a GPU: a closed form from the linear model
//! `M(b) = M_fixed + b * m_lin` (`docs/memory-model.md` section 9), then verified against the full
//! model (allocator rounding, segments, fragmentation, context), which only adds memory, so the
//! answer lies at or below the closed form and a binary search over the step function finds it.
use serde::Serialize;

use crate::memory::errors::EstimateError;
use crate::memory::memory_model::MemoryModel;
use crate::memory::runtime::fraction_ppm;
use crate::memory::scan;
use crate::schema::catalogue::Gpu;
use crate::schema::limits::MAX_BATCH;

/// The result of a batch search on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchSearch {
    /// The largest micro-batch whose device total fits, `None` when not even 1 fits.
    pub batch: Option<u64>,
    /// The closed-form bound from the linear model (an upper bound on `batch`).
    pub closed_form: u64,
    /// Bytes of the GPU the search may use: memory less the safety margin.
    pub budget: u64,
    /// Full-model evaluations the verification took.
    pub evaluations: u32,
}

/// Finds the largest micro-batch of `model` that fits `gpu` keeping `safety` (a fraction in
/// [0, 1)) of its memory free. The result `b` satisfies: `b` fits and `b + 1` does not.
///
/// `gpu` is the device's memory; the model's `estimate.target` prices the step. A model
/// priced for `target = "cpu"` fits only a device without CUDA context and cuBLAS workspace
/// (the CPU's memory, as `distill` passes it): a catalogue GPU is refused rather than filled
/// under the CPU's rules (`MemoryModel::new` with `target = "cuda"` prices it).
///
/// # Errors
/// [`EstimateError::Spec`] on `estimate.safety_margin` outside [0, 1) and on `estimate.target`
/// for a CPU model and a GPU; errors of the model other than overflow (an overflowing batch
/// simply does not fit).
pub fn search(model: &MemoryModel, gpu: &Gpu, safety: f64) -> Result<BatchSearch, EstimateError> {
    crate::schema::check_safety_margin(safety)?;
    if !model.setup.runtime.cuda && (gpu.cuda_context > 0 || gpu.cublas_workspace > 0) {
        let message = format!("\"cpu\" prices a run on the CPU, but {} is a GPU: set target = \"cuda\"", gpu.name);
        return Err(EstimateError::invalid("estimate.target", message));
    }
    let budget = gpu.memory - fraction_ppm(gpu.memory, crate::memory::runtime::ppm(safety))?.min(gpu.memory);
    let rt = &model.setup.runtime;
    // reserved * (1 + f) + context + nccl <= budget  =>  reserved <= (budget - context - nccl) / (1 + f)
    let room = budget.saturating_sub(rt.cuda_context).saturating_sub(rt.nccl);
    let bound = (u128::from(room) * 1_000_000 / (1_000_000 + u128::from(rt.fragmentation_ppm))) as u64;
    let mut closed = MAX_BATCH;
    for (fixed, per_sample) in scan::lines(model) {
        let b = match (fixed > bound, per_sample) {
            (true, _) => 0,
            (false, 0) => MAX_BATCH,
            (false, m) => (bound - fixed) / m,
        };
        closed = closed.min(b);
    }
    let mut evaluations = 0u32;
    let mut fits = |b: u64| -> Result<bool, EstimateError> {
        evaluations += 1;
        let total = scan::scan(model, b)
            .and_then(|s| s.checked_peak())
            .and_then(|p| model.setup.runtime.device_total(p.reserved));
        within(total.map(|(_, total)| total), budget)
    };
    if closed == 0 || !fits(1)? {
        return Ok(BatchSearch { batch: None, closed_form: closed, budget, evaluations });
    }
    // fits(lo), and hi does not fit (the linear model already excludes closed + 1)
    let (mut lo, hi) = (1u64, closed.saturating_add(1));
    if fits(closed)? {
        lo = closed;
    }
    let batch = bisect(lo, hi, &mut fits)?;
    Ok(BatchSearch { batch: Some(batch), closed_form: closed, budget, evaluations })
}

/// Whether a batch whose device total is `total` bytes fits `budget`: a total that overflows
/// `u64` does not fit; any other error of the model is passed on.
pub(crate) fn within(total: Result<u64, EstimateError>, budget: u64) -> Result<bool, EstimateError> {
    match total {
        Ok(total) => Ok(total <= budget),
        Err(EstimateError::Overflow { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Halves the bracket `lo < hi`, where `lo` fits and `hi` does not, to neighbours: returns a
/// batch that fits whose successor does not (the largest that fits where `fits` is monotone),
/// after about `log2(hi - lo)` calls of `fits`.
///
/// # Errors
/// The first error of `fits`.
pub(crate) fn bisect(
    mut lo: u64,
    mut hi: u64,
    fits: &mut impl FnMut(u64) -> Result<bool, EstimateError>,
) -> Result<u64, EstimateError> {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}
