//! The FLOPs of one training sample by part, as floats: the rows-weighted mean of one row's
//! [`StepFlops`] over the shapes a run's training batches have (for text padded per batch, each
//! batch's own width: `super::memory_plan::MemoryPlanner::flops_per_sample`), the numerator of
//! the run's MFU (`crate::report::utilisation`).
use estimator_wasm::StepFlops;
use serde::Serialize;

/// [`StepFlops`] per sample, as floats: each part's FLOPs over the run's training rows, divided
/// by the rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FlopsPerSample {
    pub student_forward: f64,
    pub student_backward: f64,
    pub teacher_forward: f64,
    pub loss: f64,
    pub recompute: f64,
    pub model: f64,
    pub hardware: f64,
}

impl FlopsPerSample {
    /// The mean FLOPs of a training row over `rows`, pairs of (rows, one row's [`StepFlops`]
    /// at their shape): `sum(rows x flops) / sum(rows)` by part, in f64 (no saturation). For
    /// text padded per batch the pairs are the run's widths, each with the rows its batches
    /// hold: the exact padded-token FLOPs of the run's steps over its rows. All zero without rows.
    pub fn mean(rows: &[(u64, StepFlops)]) -> FlopsPerSample {
        let total = rows.iter().map(|&(n, _)| n as f64).sum::<f64>();
        let part = |get: fn(&StepFlops) -> u64| match total > 0.0 {
            true => rows.iter().map(|(n, f)| *n as f64 * get(f) as f64).sum::<f64>() / total,
            false => 0.0,
        };
        FlopsPerSample {
            student_forward: part(|f| f.student_forward),
            student_backward: part(|f| f.student_backward),
            teacher_forward: part(|f| f.teacher_forward),
            loss: part(|f| f.loss),
            recompute: part(|f| f.recompute),
            model: part(|f| f.model),
            hardware: part(|f| f.hardware),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_costs_the_rows_weighted_mean_of_its_shapes() {
        // 3 rows at 100 FLOPs and 1 row at 500 (of which 40 recompute): (300 + 500) / 4 = 200
        let at = |model: u64, recompute: u64| StepFlops {
            student_forward: model,
            model,
            recompute,
            hardware: model + recompute,
            ..StepFlops::default()
        };
        let f = FlopsPerSample::mean(&[(3, at(100, 0)), (1, at(500, 40))]);
        assert_eq!((f.model, f.student_forward, f.recompute, f.hardware), (200.0, 200.0, 10.0, 210.0));
        // past u64: 2^40 rows of 2^40 FLOPs average 2^40, not a saturated sum
        let big = FlopsPerSample::mean(&[(1 << 40, at(1 << 40, 0))]);
        assert_eq!(big.model, (1u64 << 40) as f64);
        assert_eq!(FlopsPerSample::mean(&[]).model, 0.0);
    }
}
