//! Learning-rate schedule: linear warm-up, then cosine decay (Loshchilov & Hutter 2017,
//! arXiv:1608.03983, without restarts).
//!
//! For optimiser step `s` (0-based) of `total`, with `W` warm-up steps:
//! * `s < W`: `lr * (s + 1) / W` (the first step already moves; step `W - 1` is at `lr`);
//! * otherwise, with `t = s - W` and `n = total - W`:
//!   `min_lr + (lr - min_lr) * (1 + cos(pi * t / (n - 1))) / 2`, so the first post-warm-up step
//!   is at `lr` and the last step of the run is exactly at `min_lr`.
//!
//! Short runs: `W >= total` compresses the warm-up to the run (`W = total`: the last step is at
//! `lr`, nothing decays); a single step after warm-up (`n = 1`) runs at `lr`; steps past the
//! end stay at `min_lr`. Every value is finite for any `total`, `W` and `s`.

/// The schedule of one run.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub lr: f64,
    pub min_lr: f64,
    pub warmup: u64,
    pub total: u64,
}

impl Schedule {
    /// Learning rate of optimiser step `step` (0-based).
    pub fn at(&self, step: u64) -> f64 {
        let warmup = self.warmup.min(self.total);
        if step < warmup {
            return self.lr * (step + 1) as f64 / warmup as f64;
        }
        let n = self.total - warmup;
        if n <= 1 {
            return self.lr;
        }
        let progress = ((step - warmup) as f64 / (n - 1) as f64).min(1.0);
        self.min_lr + (self.lr - self.min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }

    /// A warning when `train.warmup_steps` is longer than the run, which then warms up over all
    /// its steps (reaching `train.lr` at the last, never decaying) instead of what was asked.
    pub fn warmup_warning(&self) -> Option<String> {
        (self.warmup > self.total).then(|| {
            format!(
                "warning: train.warmup_steps = {} is longer than the run's {} optimiser steps: the warm-up is cut to the whole run (train.lr only at the last step, no decay); set warmup_steps below {} (typically 5-10% of the steps)",
                self.warmup, self.total, self.total
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_warmup_and_midpoint() {
        let s = Schedule { lr: 0.1, min_lr: 0.001, warmup: 10, total: 110 };
        assert!((s.at(0) - 0.01).abs() < 1e-12);
        assert!((s.at(9) - 0.1).abs() < 1e-12);
        assert!((s.at(10) - 0.1).abs() < 1e-12);
        assert!((s.at(109) - 0.001).abs() < 1e-12);
        // Halfway through the cosine part (t = 49.5 of 99): the mean of lr and min_lr.
        let mid = 0.5 * (s.at(59) + s.at(60));
        assert!((mid - 0.0505).abs() < 1e-4, "{mid}");
        // Monotone non-increasing after warm-up.
        assert!((10..109).all(|i| s.at(i + 1) <= s.at(i)));
    }

    #[test]
    fn a_warmup_longer_than_the_run_is_warned_about() {
        let s = |warmup| Schedule { lr: 0.4, min_lr: 0.0, warmup, total: 135 };
        assert_eq!(
            s(1000).warmup_warning().as_deref(),
            Some("warning: train.warmup_steps = 1000 is longer than the run's 135 optimiser steps: the warm-up is cut to the whole run (train.lr only at the last step, no decay); set warmup_steps below 135 (typically 5-10% of the steps)")
        );
        assert_eq!((s(135).warmup_warning(), s(10).warmup_warning()), (None, None));
    }

    #[test]
    fn no_warmup_starts_at_peak() {
        let s = Schedule { lr: 0.5, min_lr: 0.0, warmup: 0, total: 3 };
        assert_eq!(s.at(0), 0.5);
        assert!((s.at(1) - 0.25).abs() < 1e-12);
        assert!(s.at(2).abs() < 1e-12);
    }

    #[test]
    fn degenerate_runs_stay_finite_and_end_where_they_can() {
        // Warm-up as long as the run or longer: compressed to the run, the last step at lr.
        for warmup in [4, 5, 1000] {
            let s = Schedule { lr: 0.4, min_lr: 0.0, warmup, total: 4 };
            assert_eq!([s.at(0), s.at(1), s.at(2), s.at(3)], [0.1, 0.2, 0.30000000000000004, 0.4], "{warmup}");
        }
        // One step after warm-up: at lr (the cosine needs two points).
        let s = Schedule { lr: 0.4, min_lr: 0.1, warmup: 3, total: 4 };
        assert_eq!(s.at(3), 0.4);
        // One-step and empty runs; steps past the end stay at min_lr.
        assert_eq!(Schedule { lr: 0.4, min_lr: 0.1, warmup: 0, total: 1 }.at(0), 0.4);
        assert_eq!(Schedule { lr: 0.4, min_lr: 0.1, warmup: 0, total: 0 }.at(0), 0.4);
        assert_eq!(Schedule { lr: 0.4, min_lr: 0.1, warmup: 0, total: 3 }.at(7), 0.1);
    }
}
