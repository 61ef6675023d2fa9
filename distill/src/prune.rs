//! Gradual pruning of the student on Zhu & Gupta's cubic schedule (arXiv:1710.01878):
//! `s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (t_end - t0))^3`, evaluated at pruning events
//! `t0, t0 + dt, ...` and forced to `s_f` at exactly `t_end`; `t` counts completed optimiser
//! steps, and epochs in the cfg.toml are converted with the real loader length (docs/kd-pitfalls.md P4).
//! `t0 == t_end` is one-shot pruning: a single event at `t0` straight to `s_f`.
//!
//! * Magnitude (unstructured): at each event exactly `round(s_t * n)` weights are zero, chosen by
//!   |w| over all conv/linear weights (`global`) or within each tensor (`layer`); ties break by
//!   position, and masks only grow (already-pruned weights rank first). Gradients are masked
//!   before and weights after every optimiser step, so Adam moments cannot regrow them.
//! * Structured: whole conv channels / hidden neurons, ranked by the L1 norm of their incoming
//!   weights within each layer (always per layer: the schema refuses `scope = "global"`, as
//!   L1 norms of layers with different fan-in are not comparable); `floor(width * s_t)` units
//!   are removed (`estimator_wasm::schema::arch::kept_units`). A removed unit's output is multiplied by
//!   0, so the student shrunk at the end (`shrink.rs`) computes the same function.
use estimator_wasm::schema::arch::{kept_units, Op};
use estimator_wasm::schema::{PruneMethod, PruneScope, PruneSpec};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::error::{DistillError, Result};
use crate::student::Student;

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

/// A conv/linear weight with its unstructured mask.
#[derive(Debug)]
struct Masked {
    name: String,
    weight: Tensor,
    /// Bool, same shape as the weight; true = kept.
    mask: Tensor,
}

/// A prunable layer of units (conv channels or hidden neurons) for structured pruning.
#[derive(Debug)]
struct Units {
    /// The conv or linear layer whose outputs are the units (`conv2`, `fc1`).
    layer: String,
    /// Block whose output the unit mask multiplies (the block's activation).
    block: usize,
    /// The layer's weight [units, ...] and its bias, and the norm layer's affine parameters.
    incoming: Vec<Tensor>,
    /// Bool [units]; true = kept.
    mask: Tensor,
    /// Rank of the student's output (4 for conv feature maps, 2 for vectors).
    rank: usize,
}

impl Units {
    /// Sets the student's unit mask of `block` from `mask` (0/1 per unit, shaped [1, units, 1,
    /// 1] or [1, units] to broadcast over the block's output).
    fn mask_outputs(&self, student: &mut Student) {
        let mut shape = vec![1i64; self.rank];
        shape[1] = self.mask.size()[0];
        if let Some(s) = student.layered_mut() {
            s.unit_masks[self.block] = Some(self.mask.to_kind(Kind::Float).reshape(shape.as_slice()));
        }
    }
}

pub struct Pruner {
    pub spec: PruneSpec,
    pub schedule: PruneSchedule,
    masked: Vec<Masked>,
    units: Vec<Units>,
}

/// Per-tensor (or per-layer) counts for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerSparsity {
    pub name: String,
    pub dense: u64,
    pub nonzero: u64,
    pub sparsity: f64,
}

impl Pruner {
    /// Sets up pruning of `student`'s conv and linear weights (`params` are the optimiser's
    /// named parameters).
    ///
    /// # Errors
    /// [`DistillError::Usage`] when nothing is prunable (docs/kd-pitfalls.md P6) or structured pruning
    /// meets a LayerNorm (whose statistics would change when units are removed).
    pub fn new(
        spec: &PruneSpec,
        schedule: PruneSchedule,
        student: &Student,
        params: &[(String, Tensor)],
    ) -> Result<Pruner> {
        let find = |name: String| params.iter().find(|(n, _)| *n == name).map(|(_, t)| t.shallow_clone());
        let mut masked = Vec::new();
        let mut units = Vec::new();
        // Conv and linear layers exist in layered students only: other kinds have none to prune.
        let blocks = student.layered().map_or(&[][..], |s| &s.blocks);
        for (i, block) in blocks.iter().enumerate() {
            let id = &block.layer.id;
            if !matches!(block.layer.op, Op::Conv2d { .. } | Op::Linear { .. }) {
                continue;
            }
            let Some(weight) = find(format!("{id}.weight")) else { continue };
            match spec.method {
                PruneMethod::Magnitude => {
                    let mask = weight.ones_like().to_kind(Kind::Bool);
                    masked.push(Masked { name: format!("{id}.weight"), weight, mask });
                }
                PruneMethod::Structured if id != "head" => {
                    let norm_id = if id.starts_with("conv") { format!("{id}_bn") } else { format!("{id}_norm") };
                    if blocks.iter().any(|b| b.layer.id == norm_id && matches!(b.layer.op, Op::LayerNorm { .. })) {
                        return Err(DistillError::Usage(
                            "prune.method = \"structured\" cannot remove units under student.norm = \"layer\" (the norm's statistics span all units); use \"batch\" or \"none\"".into(),
                        ));
                    }
                    let act = blocks.iter().position(|b| b.layer.id == format!("{id}_act")).unwrap_or(i);
                    let mut incoming = vec![weight.shallow_clone()];
                    incoming.extend(
                        [format!("{id}.bias"), format!("{norm_id}.weight"), format!("{norm_id}.bias")]
                            .into_iter()
                            .filter_map(find),
                    );
                    let width = weight.size()[0];
                    let mask = Tensor::ones([width], (Kind::Bool, weight.device()));
                    units.push(Units {
                        layer: id.clone(),
                        block: act,
                        incoming,
                        mask,
                        rank: block.layer.output.len() + 1,
                    });
                }
                PruneMethod::Structured => {}
            }
        }
        if student.layered().is_none() && spec.method == PruneMethod::Magnitude {
            // a transformer: its projection matrices (attention qkv and proj, feed-forward fc1
            // and fc2, the output head), not the embeddings, as `Op::prunable` counts them
            for (name, weight) in params {
                let embedding = name.starts_with("embed.");
                if name.ends_with(".weight") && weight.dim() == 2 && !embedding {
                    let mask = weight.ones_like().to_kind(Kind::Bool);
                    masked.push(Masked { name: name.clone(), weight: weight.shallow_clone(), mask });
                }
            }
        }
        if masked.is_empty() && units.is_empty() {
            return Err(DistillError::Usage("prune: the student has no conv or hidden linear layer to prune".into()));
        }
        Ok(Pruner { spec: spec.clone(), schedule, masked, units })
    }

    /// Runs the pruning event after step `t`, if any; returns the sparsity it applied.
    pub fn maybe_prune(&mut self, t: u64, student: &mut Student) -> Option<f64> {
        let s = self.schedule.event(t)?;
        tch::no_grad(|| match self.spec.method {
            PruneMethod::Magnitude => self.prune_weights(s),
            PruneMethod::Structured => self.prune_units(s, student),
        });
        self.apply_masks();
        Some(s)
    }

    fn prune_weights(&mut self, s: f64) {
        // Already-pruned weights score -1, so masks only grow.
        let score =
            |m: &Masked| m.weight.abs().flatten(0, -1).where_self(&m.mask.flatten(0, -1), &Tensor::from(-1.0f32));
        match self.spec.effective_scope() {
            PruneScope::Layer => {
                for m in &mut self.masked {
                    let n = m.weight.numel() as i64;
                    m.mask = keep_mask(&score(m), (s * n as f64).round() as i64).reshape(m.weight.size());
                }
            }
            PruneScope::Global => {
                let scores: Vec<Tensor> = self.masked.iter().map(score).collect();
                let all = Tensor::cat(&scores, 0);
                let k = (s * all.numel() as f64).round() as i64;
                let keep = keep_mask(&all, k);
                let mut offset = 0;
                for m in &mut self.masked {
                    let n = m.weight.numel() as i64;
                    m.mask = keep.narrow(0, offset, n).reshape(m.weight.size());
                    offset += n;
                }
            }
        }
    }

    fn prune_units(&mut self, s: f64, student: &mut Student) {
        for u in &mut self.units {
            let weight = &u.incoming[0];
            let width = weight.size()[0];
            let l1 = weight.abs().reshape([width, -1]).sum_dim_intlist(1, false, Kind::Float);
            let score = l1.where_self(&u.mask, &Tensor::from(-1.0f32));
            let removed = width - kept_units(width as u64, s) as i64;
            u.mask = keep_mask(&score, removed);
            u.mask_outputs(student);
        }
    }

    /// Zeroes the gradients of pruned weights (before an optimiser step).
    pub fn mask_grads(&self, params: &[&Tensor], grads: &mut [Tensor]) {
        for m in &self.masked {
            if let Some(i) = params.iter().position(|p| p.data_ptr() == m.weight.data_ptr()) {
                if grads[i].defined() {
                    grads[i] = &grads[i] * &m.mask;
                }
            }
        }
    }

    /// Re-applies every mask to the weights (after every optimiser step).
    pub fn apply_masks(&mut self) {
        tch::no_grad(|| {
            for m in &mut self.masked {
                let _ = m.weight.g_mul_(&m.mask);
            }
            for u in &mut self.units {
                for t in &mut u.incoming {
                    let mut shape = vec![1i64; t.dim()];
                    shape[0] = u.mask.size()[0];
                    let _ = t.g_mul_(&u.mask.reshape(shape.as_slice()));
                }
            }
        });
    }

    /// `l1 * sum |w|` over the prunable weights, or `None` without L1 regularisation.
    pub fn l1_penalty(&self) -> Option<Tensor> {
        if self.spec.l1 == 0.0 {
            return None;
        }
        let weights = self.masked.iter().map(|m| &m.weight).chain(self.units.iter().map(|u| &u.incoming[0]));
        let sum = weights.map(|w| w.abs().sum(Kind::Float)).reduce(|a, b| a + b)?;
        Some(sum * self.spec.l1)
    }

    /// Masks for a checkpoint: `mask/<weight>` (unstructured) or `units/<layer>` (structured), u8.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let weights = self.masked.iter().map(|m| (format!("mask/{}", m.name), m.mask.to_kind(Kind::Uint8)));
        let units = self.units.iter().map(|u| (format!("units/{}", u.layer), u.mask.to_kind(Kind::Uint8)));
        weights.chain(units).collect()
    }

    /// Restores checkpointed masks and re-applies them (to the weights and the student).
    pub fn load_state(&mut self, tensors: &[(String, Tensor)], student: &mut Student) {
        let get = |key: String| tensors.iter().find(|(n, _)| *n == key).map(|(_, t)| t.shallow_clone());
        for m in &mut self.masked {
            if let Some(t) = get(format!("mask/{}", m.name)) {
                m.mask = t.to_device(m.weight.device()).to_kind(Kind::Bool);
            }
        }
        for u in &mut self.units {
            if let Some(t) = get(format!("units/{}", u.layer)) {
                u.mask = t.to_device(u.incoming[0].device()).to_kind(Kind::Bool);
                u.mask_outputs(student);
            }
        }
        self.apply_masks();
    }

    /// Indices of the kept units of each structured layer (`conv2` -> [0, 3, 5, ...]).
    pub fn kept_indices(&self) -> std::collections::HashMap<String, Vec<i64>> {
        self.units
            .iter()
            .map(|u| (u.layer.clone(), Vec::<i64>::try_from(&u.mask.nonzero().flatten(0, -1)).unwrap_or_default()))
            .collect()
    }

    /// Dense and non-zero counts of every conv/linear weight, measured on the tensors.
    pub fn sparsity(&self, student_params: &[(String, Tensor)]) -> Vec<LayerSparsity> {
        student_params
            .iter()
            .filter(|(n, t)| n.ends_with(".weight") && t.dim() >= 2)
            .map(|(name, t)| {
                let dense = t.numel() as u64;
                let nonzero = t.count_nonzero(None::<i64>).int64_value(&[]) as u64;
                LayerSparsity { name: name.clone(), dense, nonzero, sparsity: 1.0 - nonzero as f64 / dense as f64 }
            })
            .collect()
    }
}

/// Bool mask over `scores` [n] keeping all but the `k` lowest scores (stable order: ties go
/// to the earlier position).
fn keep_mask(scores: &Tensor, k: i64) -> Tensor {
    let n = scores.size()[0];
    let k = k.clamp(0, n);
    let order = scores.argsort_stable(true, 0, false);
    let mut keep = Tensor::ones([n], (Kind::Bool, scores.device()));
    if k > 0 {
        let pruned = order.narrow(0, 0, k);
        let _ = keep.index_fill_(0, &pruned, 0);
    }
    keep
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn keep_mask_prunes_exactly_k_with_stable_ties() {
        let scores = Tensor::from_slice(&[0.5f32, 0.1, 0.1, -1.0, 0.3]);
        let keep = Vec::<bool>::try_from(&keep_mask(&scores, 3)).unwrap();
        assert_eq!(keep, [true, false, false, false, true]);
        let keep = Vec::<bool>::try_from(&keep_mask(&scores, 2)).unwrap();
        assert_eq!(keep, [true, false, true, false, true], "the earlier of the tied 0.1s goes first");
    }
}
