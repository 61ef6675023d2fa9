//! When the student is pruned: Zhu & Gupta's cubic schedule (arXiv:1710.01878):
//! `s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (t_end - t0))^3`, evaluated at pruning events
//! `t0, t0 + dt, ...` and forced to `s_f` at exactly `t_end`; `t` counts completed optimiser
//! steps, and epochs in the cfg.toml are converted with the real loader length (docs/kd-pitfalls.md P4).
//! `t0 == t_end` is one-shot pruning: a single event at `t0` straight to `s_f`.
//! The pruning itself is `prune.rs`.
use estimator_wasm::schema::PruneSpec;
use serde::{Deserialize, Serialize};

use crate::host::error::{DistillError, Result};

/// Event times and targets of one run, in completed optimiser steps.
///
/// Invariants (from [`PruneSchedule::new`]): `t0 <= t_end` and `every >= 1`; `t0 == t_end` is a
/// one-shot schedule that jumps to `target` at that step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PruneSchedule {
    /// First pruning event (`start_epoch` in steps).
    pub t0: u64,
    /// Last pruning event, where `target` is reached exactly (`end_epoch` in steps).
    pub t_end: u64,
    /// Steps between events (`every_steps`).
    pub every: u64,
    pub initial: f64,
    pub target: f64,
}

impl PruneSchedule {
    /// Converts the cfg's epochs to steps with `steps_per_epoch` (rounding to the nearest step).
    /// `end_epoch` defaults to three quarters of the run, leaving the rest to recover at the
    /// final sparsity, or to `start_epoch` when that is later (a one-shot prune there): the
    /// schema accepts any `start_epoch <= train.epochs` when `end_epoch` is unset.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when the events do not fit in `total_steps` (the schema's
    /// `0 <= start_epoch <= end_epoch <= train.epochs` rules this out).
    pub fn new(spec: &PruneSpec, steps_per_epoch: u64, epochs: u64) -> Result<PruneSchedule> {
        let total = steps_per_epoch.saturating_mul(epochs);
        let to_steps = |e: f64| (e * steps_per_epoch as f64).round() as u64;
        let t0 = to_steps(spec.start_epoch);
        let t_end = spec.end_epoch.map(to_steps).unwrap_or_else(|| total.saturating_mul(3).div_ceil(4).max(t0));
        if t_end > total || t0 > t_end {
            return Err(DistillError::Usage(format!(
                "prune: events from step {t0} to {t_end} do not fit in the run's {total} steps; check prune.start_epoch/end_epoch"
            )));
        }
        let every = spec.every_steps.max(1);
        Ok(PruneSchedule { t0, t_end, every, initial: spec.initial_sparsity, target: spec.sparsity })
    }

    /// The cubic sparsity at step `t`: `initial` up to `t0`, `target` from `t_end` on (exactly,
    /// also when `t0 == t_end`), the cubic in between.
    pub fn sparsity_at(&self, t: u64) -> f64 {
        if t >= self.t_end {
            return self.target;
        }
        if t <= self.t0 {
            return self.initial;
        }
        // Here t0 < t < t_end, so both differences are positive.
        let progress = (t - self.t0) as f64 / (self.t_end - self.t0) as f64;
        self.target + (self.initial - self.target) * (1.0 - progress).powi(3)
    }

    /// The target of the pruning event after step `t`, or `None` when `t` is not an event:
    /// `t0, t0 + every, ...` before `t_end`, and `t_end` itself.
    pub fn event(&self, t: u64) -> Option<f64> {
        let on_grid = t >= self.t0 && t < self.t_end && (t - self.t0) % self.every == 0;
        (on_grid || t == self.t_end).then(|| self.sparsity_at(t))
    }

    /// The sparsity the masks hold after step `t`: that of the latest event at or before `t`,
    /// 0 before the first one (what ran, not what the curve says between events).
    pub fn applied_at(&self, t: u64) -> f64 {
        if t >= self.t_end {
            self.target
        } else if t < self.t0 {
            0.0
        } else {
            self.sparsity_at(self.t0 + (t - self.t0) / self.every * self.every)
        }
    }
}

#[cfg(test)]
mod tests {
    use estimator_wasm::schema::PruneMethod;

    use super::*;

    fn schedule(t0: u64, t_end: u64, every: u64) -> PruneSchedule {
        PruneSchedule { t0, t_end, every, initial: 0.1, target: 0.8 }
    }

    #[test]
    fn cubic_schedule_endpoints_and_events() {
        let s = schedule(10, 110, 20);
        assert_eq!(s.sparsity_at(10), 0.1);
        assert_eq!(s.sparsity_at(110), 0.8);
        assert_eq!(s.sparsity_at(500), 0.8);
        // Halfway: s_f + (s_i - s_f) * 0.5^3.
        assert!((s.sparsity_at(60) - (0.8 - 0.7 * 0.125)).abs() < 1e-12);
        let events: Vec<u64> = (0..200).filter(|&t| s.event(t).is_some()).collect();
        assert_eq!(events, [10, 30, 50, 70, 90, 110]);
        assert_eq!(s.event(110), Some(0.8));
        assert_eq!(s.event(10), Some(0.1));
        // Non-decreasing.
        assert!((10..110).all(|t| s.sparsity_at(t + 1) >= s.sparsity_at(t)));
    }

    #[test]
    fn last_event_is_forced_off_grid() {
        // t_end - t0 is not a multiple of every: the final event still lands at t_end.
        let s = schedule(0, 95, 20);
        let events: Vec<u64> = (0..200).filter(|&t| s.event(t).is_some()).collect();
        assert_eq!(events, [0, 20, 40, 60, 80, 95]);
    }

    #[test]
    fn epochs_convert_with_the_loader_length() {
        let spec = PruneSpec {
            method: PruneMethod::Magnitude,
            scope: None,
            sparsity: 0.9,
            initial_sparsity: 0.0,
            start_epoch: 0.5,
            end_epoch: Some(2.0),
            every_steps: 7,
            l1: 0.0,
        };
        let s = PruneSchedule::new(&spec, 469, 3).unwrap();
        assert_eq!((s.t0, s.t_end), (235, 938));
        let spec = PruneSpec { end_epoch: None, ..spec };
        assert_eq!(PruneSchedule::new(&spec, 469, 4).unwrap().t_end, 1407);
    }

    fn spec(start_epoch: f64, end_epoch: Option<f64>) -> PruneSpec {
        PruneSpec {
            method: PruneMethod::Magnitude,
            scope: None,
            sparsity: 0.8,
            initial_sparsity: 0.0,
            start_epoch,
            end_epoch,
            every_steps: 100,
            l1: 0.0,
        }
    }

    #[test]
    fn one_shot_schedule_jumps_to_the_target() {
        // start_epoch = end_epoch = 2 of 3, 45 steps per epoch: one event at step 90. The epoch
        // line after step 45 used to compute (45 - 90) in u64.
        let s = PruneSchedule::new(&spec(2.0, Some(2.0)), 45, 3).unwrap();
        assert_eq!((s.t0, s.t_end), (90, 90));
        assert_eq!([s.sparsity_at(0), s.sparsity_at(45), s.sparsity_at(90), s.sparsity_at(135)], [0.0, 0.0, 0.8, 0.8]);
        assert_eq!([s.applied_at(45), s.applied_at(89), s.applied_at(90), s.applied_at(135)], [0.0, 0.0, 0.8, 0.8]);
        let events: Vec<(u64, f64)> = (0..=135).filter_map(|t| s.event(t).map(|v| (t, v))).collect();
        assert_eq!(events, [(90, 0.8)]);
        // At step 0: pruned before the first step.
        let s = PruneSchedule::new(&spec(0.0, Some(0.0)), 45, 3).unwrap();
        assert_eq!(((0..=135).filter(|&t| s.event(t).is_some()).collect::<Vec<_>>(), s.applied_at(0)), (vec![0], 0.8));
    }

    #[test]
    fn a_start_after_the_default_end_is_a_one_shot_there() {
        // The schema accepts start_epoch <= epochs without end_epoch; the default end (3/4 of
        // 135 = step 102) moves to the start (step round(2.7 * 45) = 122).
        let s = PruneSchedule::new(&spec(2.7, None), 45, 3).unwrap();
        assert_eq!((s.t0, s.t_end), (122, 122));
        assert_eq!(PruneSchedule::new(&spec(1.0, None), 45, 3).unwrap().t_end, 102);
    }

    #[test]
    fn applied_sparsity_is_the_latest_event() {
        // Events at 10, 30, 50, 70, 90, 110; between them the masks hold the last event's target.
        let s = schedule(10, 110, 20);
        assert_eq!(s.applied_at(9), 0.0);
        assert_eq!(s.applied_at(10), 0.1);
        assert_eq!(s.applied_at(29), 0.1);
        // Step 30: progress 0.2, 0.8 - 0.7 * 0.8^3 = 0.4416.
        assert!((s.applied_at(49) - 0.4416).abs() < 1e-12);
        assert_eq!(s.applied_at(110), 0.8);
    }
}
