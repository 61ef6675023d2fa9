//! Measured CPU inference latency of a student (eval mode, no autograd, fp32).
use std::time::Instant;

use crate::student::Student;
use serde::{Deserialize, Serialize};

/// Median forward latency in milliseconds for one sample and for a batch of 256.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Latency {
    pub batch_1_ms: f64,
    pub batch_256_ms: f64,
    /// libtorch intra-op threads during the measurement.
    pub threads: i32,
}

/// Times `student` (on the CPU) on random inputs of the kind it takes
/// ([`Student::example_input`]): 5 warm-up calls, then the median of 100 calls at batch 1 and 20
/// calls at batch 256.
pub fn measure(student: &Student) -> Latency {
    let time = |batch: i64, runs: usize| {
        let x = student.example_input(batch);
        tch::no_grad(|| {
            for _ in 0..5 {
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
