//! Measured CPU inference latency of a student (eval mode, no autograd, fp32).
use std::time::Instant;

use crate::data::ModelInput;
use crate::student::Student;
use serde::{Deserialize, Serialize};

/// Seconds each of the two timings may take (a large transformer student at batch 256 takes
/// seconds per call).
pub const BUDGET_S: f64 = 5.0;

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
/// longest, since a random full-length sequence is not what a sentence encoder sees): 5 warm-up
/// calls, then the median of 100 calls at batch 1 and 20 calls at batch 256, fewer (at least 3)
/// where the calls would take more than [`BUDGET_S`].
pub fn measure(student: &Student, input: &dyn Fn(i64) -> ModelInput) -> Latency {
    let time = |batch: i64, runs: usize| {
        let x = input(batch);
        tch::no_grad(|| {
            let first = Instant::now();
            let _ = student.forward(&x, false);
            let once = first.elapsed().as_secs_f64();
            let (warm, runs) = (5.min(runs), runs.min(((BUDGET_S / once.max(1e-9)) as usize).max(3)));
            for _ in 1..warm {
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
