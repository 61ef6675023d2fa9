//! Measured CPU inference latency of a student (eval mode, no autograd, fp32), when the run asks
//! for it (`--latency`): the timing takes seconds a run need not spend (up to [`BUDGET_S`] and
//! [`WARM_UP_S`] per batch size, per student), so a run without the flag skips it and its
//! report says so ([`NOT_MEASURED`]).
use std::time::Instant;

use crate::inputs::data::ModelInput;
use crate::student::Student;
use serde::{Deserialize, Serialize};

/// Seconds the timed calls of each batch size may take together (a transformer student at batch
/// 256 takes half a second per call on 2 cores; at least 3 calls are timed).
pub const BUDGET_S: f64 = 2.0;

/// Seconds of warm-up calls after the first (at most 4 more): a call of a few milliseconds
/// needs several to settle the allocator and caches, one of half a second needs none.
pub const WARM_UP_S: f64 = 0.5;

/// The batch a latency is timed at besides 1.
pub const LARGE_BATCH: i64 = 256;

/// `latency_not_measured` of a student's report when the run did not ask for the timing.
pub const NOT_MEASURED: &str =
    "not measured: pass --latency to time the exported student on the CPU (median ms at batch 1 and at the large batch)";

/// Median forward latency in milliseconds for one sample and for a large batch (text: the first
/// test sentence, and the first `large_batch` padded to their longest).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Latency {
    pub batch_1_ms: f64,
    /// The large batch timed, in samples: [`large_batch`] of the run.
    #[serde(default = "large_batch_default")]
    pub large_batch: i64,
    /// Median milliseconds of one forward at `large_batch` (reports before the field was
    /// named so called it `batch_256_ms`).
    #[serde(alias = "batch_256_ms")]
    pub large_batch_ms: f64,
    /// libtorch intra-op threads during the measurement.
    pub threads: i32,
}

fn large_batch_default() -> i64 {
    LARGE_BATCH
}

/// The large batch a run's student is timed at: [`LARGE_BATCH`], or the run's
/// `train.eval_batch_size` when smaller. A forward at the evaluation's batch is one the memory
/// plan prices; a causal LM's batch of 256 windows would hold 256 x sequence x vocabulary fp32
/// logits (12.9 GB for SmolLM2's 49,152 tokens over 256 positions), far past a plan made for
/// batch 8.
pub fn large_batch(eval_batch_size: u64) -> i64 {
    LARGE_BATCH.min(eval_batch_size.min(i64::MAX as u64) as i64).max(1)
}

/// Times `student` (on the CPU) on the model inputs `input(batch)` gives (images and vectors:
/// random ones, [`Student::example_input`]; text: the first test sentences, padded to their
/// longest, since a random full-length sequence is not what a sentence encoder sees): a first
/// call and up to 4 warm-up calls ([`calls`]), then the median of 100 calls at batch 1 and 20
/// calls at `large_batch` (see [`large_batch`]), fewer (at least 3) where they would take more
/// than [`BUDGET_S`].
pub fn measure(student: &Student, input: &dyn Fn(i64) -> ModelInput, large_batch: i64) -> Latency {
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
    Latency {
        batch_1_ms: time(1, 100),
        large_batch,
        large_batch_ms: time(large_batch, 20),
        threads: tch::get_num_threads(),
    }
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
    use super::{calls, large_batch, Latency};

    #[test]
    fn the_large_batch_is_256_or_the_evaluation_batch_when_smaller() {
        assert_eq!(large_batch(256), 256);
        assert_eq!(large_batch(1024), 256);
        // examples/smollm2: eval_batch_size = 8, whose forward the plan prices
        assert_eq!(large_batch(8), 8);
        assert_eq!(large_batch(1), 1);
        assert_eq!(large_batch(u64::MAX), 256);
    }

    #[test]
    fn a_report_written_before_the_large_batch_was_named_reads_as_batch_256() {
        let old: Latency = serde_json::from_str(r#"{"batch_1_ms": 0.5, "batch_256_ms": 9.0, "threads": 2}"#).unwrap();
        assert_eq!((old.large_batch, old.large_batch_ms), (256, 9.0));
    }

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
