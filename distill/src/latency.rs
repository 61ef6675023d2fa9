//! Measured CPU inference latency of a student (eval mode, no autograd, fp32).
use std::time::Instant;

use crate::data::ModelInput;
use crate::student::Student;
use serde::{Deserialize, Serialize};

/// Seconds the timed calls of each batch size may take together (a transformer student at batch
/// 256 takes half a second per call on 2 cores; at least 3 calls are timed).
pub const BUDGET_S: f64 = 2.0;

/// Seconds of warm-up calls after the first (at most 4 more): a call of a few milliseconds
/// needs several to settle the allocator and caches, one of half a second needs none.
pub const WARM_UP_S: f64 = 0.5;

/// Median forward latency in milliseconds for one sample and for a batch of 256 (text: the
/// first test sentence, and the first 256 padded to their longest).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Latency {
    pub batch_1_ms: f64,
    pub batch_256_ms: f64,
    /// libtorch intra-op threads during the measurement.
    pub threads: i32,
}

/// Times `student` (on the CPU) on the model inputs `input(batch)` gives (images and vectors:
/// random ones, [`Student::example_input`]; text: the first test sentences, padded to their
/// longest, since a random full-length sequence is not what a sentence encoder sees): a first
/// call and up to 4 warm-up calls ([`calls`]), then the median of 100 calls at batch 1 and 20
/// calls at batch 256, fewer (at least 3) where they would take more than [`BUDGET_S`].
pub fn measure(student: &Student, input: &dyn Fn(i64) -> ModelInput) -> Latency {
    let time = |batch: i64, runs: usize| {
        let x = input(batch);
        tch::no_grad(|| {
            let first = Instant::now();
            let _ = student.forward(&x, false);
            let once = first.elapsed().as_secs_f64();
            let (warm, runs) = calls(once, runs);
            for _ in 0..warm {
                let _ = student.forward(&x, false);
            }
            let mut ms: Vec<f64> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    let _ = student.forward(&x, false);
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            ms[runs / 2]
        })
    };
    Latency { batch_1_ms: time(1, 100), batch_256_ms: time(256, 20), threads: tch::get_num_threads() }
}

/// `(warm-up calls after the first, timed calls)` for a call that took `once` seconds when at
/// most `runs` are wanted: the warm-ups fit [`WARM_UP_S`] (0 to 4), the timed calls
/// [`BUDGET_S`] (at least 3, at most `runs`).
pub fn calls(once: f64, runs: usize) -> (usize, usize) {
    let fit = |budget: f64| (budget / once.max(1e-9)).min(1e6) as usize;
    (fit(WARM_UP_S).min(4), fit(BUDGET_S).clamp(3, runs.max(3)))
}

#[cfg(test)]
mod tests {
    use super::calls;

    #[test]
    fn fast_calls_warm_up_four_times_and_run_them_all_slow_ones_fit_the_budget() {
        // 2 ms: 4 warm-ups (0.5 s would fit 250), all 100 runs (2 s would fit 1000)
        assert_eq!(calls(0.002, 100), (4, 100));
        // 0.25 s: 0.5 s fits 2 warm-ups, 2 s fits 8 of the 20 runs
        assert_eq!(calls(0.25, 20), (2, 8));
        // 0.6 s (a transformer at batch 256): no warm-up beyond the first call, the 3-run floor
        assert_eq!(calls(0.6, 20), (0, 3));
        assert_eq!(calls(30.0, 20), (0, 3));
    }
}
