//! Pruning the student at the events of its schedule (`schedule.rs`, Zhu & Gupta's cubic
//! schedule, arXiv:1710.01878).
//!
//! * Magnitude (unstructured): at each event exactly `round(s_t * n)` weights are zero, chosen by
//!   |w| over all conv/linear weights (`global`) or within each tensor (`layer`); ties break by
//!   position, and masks only grow (already-pruned weights rank first). Gradients are masked
//!   before and weights after every optimiser step, so Adam moments cannot regrow them.
//! * Structured: whole conv channels / hidden neurons, ranked by the L1 norm of their incoming
//!   weights within each layer (always per layer: the schema refuses `scope = "global"`, as
//!   L1 norms of layers with different fan-in are not comparable); `floor(width * s_t)` units
//!   are removed (`estimator_wasm::schema::arch::kept_units`). A removed unit's output is multiplied by
//!   0, so the student shrunk at the end (`shrink.rs`) computes the same function. In a
//!   transformer the units are each layer's feed-forward neurons (`blk{i}_mlp`: row n of `fc1`,
//!   rows n and F + n under SwiGLU's gate | up, column n of `fc2`), ranked by
//!   `|fc1[n, :]| * |fc2[:, n]|` (L2 norms: what a neuron reads times what it writes, the rule
//!   `init_from_teacher` keeps a narrower feed-forward by); a removed neuron's `fc1` rows, bias
//!   and `fc2` column are zeroed, so it writes exactly 0 whatever the activation.

pub mod schedule;
pub mod shrink;
use estimator_wasm::schema::arch::{kept_units, Op};
use estimator_wasm::schema::{MlpKind, PruneMethod, PruneScope, PruneSpec};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::host::error::{DistillError, Result};
pub use crate::prune::schedule::PruneSchedule;
use crate::student::Student;

/// A conv/linear weight with its unstructured mask.
#[derive(Debug)]
struct Masked {
    name: String,
    weight: Tensor,
    /// Bool, same shape as the weight; true = kept.
    mask: Tensor,
}

/// A prunable layer of units (conv channels, hidden neurons, a transformer's feed-forward
/// neurons) for structured pruning.
#[derive(Debug)]
struct Units {
    /// The conv or linear layer whose outputs are the units (`conv2`, `fc1`, `blk1_mlp.fc1`).
    layer: String,
    /// How the removed units are silenced.
    kind: UnitKind,
    /// The layer's weight [units, ...] (a SwiGLU `fc1`: [2 x units, d]) and its bias, and the
    /// norm layer's affine parameters: their rows of removed units are zeroed.
    incoming: Vec<Tensor>,
    /// Bool [units]; true = kept.
    mask: Tensor,
}

#[derive(Debug, Clone, Copy)]
enum UnitKind {
    /// A conv or hidden block of a layered student: the student's unit mask of `block` (the
    /// block's activation) multiplies its output of rank `rank` (4 for conv feature maps, 2 for
    /// vectors).
    Block { block: usize, rank: usize },
    /// A transformer's feed-forward: `outgoing` (`fc2.weight` [d, units]) has the removed
    /// units' columns zeroed too; `gated` for SwiGLU, whose `fc1` rows are gate | up.
    FeedForward { gated: bool },
}

impl Units {
    /// Sets the student's unit mask of a layered student's block from `mask` (0/1 per unit,
    /// shaped [1, units, 1, 1] or [1, units] to broadcast over the block's output); nothing for
    /// a feed-forward, whose zeroed weights silence the unit.
    fn mask_outputs(&self, student: &mut Student) {
        let UnitKind::Block { block, rank } = self.kind else { return };
        let mut shape = vec![1i64; rank];
        shape[1] = self.mask.size()[0];
        if let Some(s) = student.layered_mut() {
            s.unit_masks[block] = Some(self.mask.to_kind(Kind::Float).reshape(shape.as_slice()));
        }
    }

    /// The 0/1 factor of each row of `incoming` tensors: the mask, twice over for SwiGLU.
    fn row_mask(&self) -> Tensor {
        match self.kind {
            UnitKind::FeedForward { gated: true } => Tensor::cat(&[&self.mask, &self.mask], 0),
            _ => self.mask.shallow_clone(),
        }
    }

    /// Each unit's importance [units]: L1 norm of its incoming weights (layered students), or
    /// `|fc1 rows| * |fc2 column|` (L2 norms; a feed-forward, `outgoing` its `fc2.weight`).
    fn scores(&self, outgoing: Option<&Tensor>) -> Tensor {
        let weight = &self.incoming[0];
        let units = self.mask.size()[0];
        match (self.kind, outgoing) {
            (UnitKind::FeedForward { gated }, Some(fc2)) => {
                let rows = weight.square().sum_dim_intlist(1, false, Kind::Float);
                let rows = if gated { rows.reshape([2, units]).sum_dim_intlist(0, false, Kind::Float) } else { rows };
                rows.sqrt() * fc2.square().sum_dim_intlist(0, false, Kind::Float).sqrt()
            }
            _ => weight.abs().reshape([units, -1]).sum_dim_intlist(1, false, Kind::Float),
        }
    }
}

pub struct Pruner {
    pub spec: PruneSpec,
    pub schedule: PruneSchedule,
    masked: Vec<Masked>,
    units: Vec<Units>,
    /// `fc2.weight` of each feed-forward in `units` (by index), `None` for layered units.
    outgoing: Vec<Option<Tensor>>,
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
        let mut outgoing = Vec::new();
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
                    let kind = UnitKind::Block { block: act, rank: block.layer.output.len() + 1 };
                    units.push(Units { layer: id.clone(), kind, incoming, mask });
                    outgoing.push(None);
                }
                PruneMethod::Structured => {}
            }
        }
        if let (Student::Transformer(t), PruneMethod::Structured) = (student, spec.method) {
            for layer in &t.layers {
                let Op::FeedForward(ff) = &layer.op else { continue };
                let id = format!("{}.fc1", layer.id);
                let (Some(weight), Some(fc2)) =
                    (find(format!("{id}.weight")), find(format!("{}.fc2.weight", layer.id)))
                else {
                    continue;
                };
                let mut incoming = vec![weight.shallow_clone()];
                incoming.extend(find(format!("{id}.bias")));
                let mask = Tensor::ones([ff.width as i64], (Kind::Bool, weight.device()));
                let kind = UnitKind::FeedForward { gated: ff.mlp == MlpKind::Swiglu };
                units.push(Units { layer: id, kind, incoming, mask });
                outgoing.push(Some(fc2));
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
        Ok(Pruner { spec: spec.clone(), schedule, masked, units, outgoing })
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
        for (u, fc2) in self.units.iter_mut().zip(&self.outgoing) {
            let width = u.mask.size()[0];
            // Already-removed units score -1, so masks only grow.
            let score = u.scores(fc2.as_ref()).where_self(&u.mask, &Tensor::from(-1.0f32));
            let removed = width - kept_units(width as u64, s) as i64;
            u.mask = keep_mask(&score, removed);
            u.mask_outputs(student);
        }
    }

    /// The share of zeros in the pruned weights now (every conv/linear weight that magnitude
    /// pruning masks; the weight of each layer whose units structured pruning removes): what
    /// the weights hold, which the schedule's figure is not where units round down.
    pub fn measured_sparsity(&self) -> f64 {
        let weights = self.masked.iter().map(|m| &m.weight).chain(self.units.iter().map(|u| &u.incoming[0]));
        let (zeros, all) = weights.fold((0i64, 0i64), |(z, n), w| {
            (z + w.numel() as i64 - w.count_nonzero(None::<i64>).int64_value(&[]), n + w.numel() as i64)
        });
        zeros as f64 / all.max(1) as f64
    }

    /// A warning when structured pruning removes fewer units than `prune.sparsity` asks, whole
    /// units being `floor(width x sparsity)` of a layer: each layer short by more than a tenth
    /// of what it was asked, and the sparsity that removes one more unit in each.
    pub fn rounding_warning(&self) -> Option<String> {
        let target = self.spec.sparsity;
        let short: Vec<(&str, u64, u64)> = (self.units.iter())
            .map(|u| {
                let width = u.mask.size()[0] as u64;
                (u.layer.as_str(), width - kept_units(width, target), width)
            })
            .filter(|&(_, removed, width)| (removed as f64) < 0.9 * target * width as f64)
            .collect();
        let more = short.iter().map(|&(_, removed, width)| (removed + 1) as f64 / width as f64).fold(0.0, f64::max);
        let layers: Vec<String> =
            short.iter().map(|(l, r, w)| format!("{l} {r} of {w} ({:.3})", *r as f64 / *w as f64)).collect();
        (!short.is_empty()).then(|| {
            format!(
                "warning: prune.sparsity = {target} removes floor(width x {target}) whole units of each layer, fewer than asked: {} (the epoch lines and report.json give the sparsity the weights hold); to remove one more unit in each, set prune.sparsity >= {more:.4}",
                layers.join(", ")
            )
        })
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
            for (u, fc2) in self.units.iter_mut().zip(&mut self.outgoing) {
                let rows = u.row_mask();
                for t in &mut u.incoming {
                    let mut shape = vec![1i64; t.dim()];
                    shape[0] = rows.size()[0];
                    let _ = t.g_mul_(&rows.reshape(shape.as_slice()));
                }
                if let Some(fc2) = fc2 {
                    let _ = fc2.g_mul_(&u.mask.reshape([1, -1]));
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

    #[test]
    fn keep_mask_prunes_exactly_k_with_stable_ties() {
        let scores = Tensor::from_slice(&[0.5f32, 0.1, 0.1, -1.0, 0.3]);
        let keep = Vec::<bool>::try_from(&keep_mask(&scores, 3)).unwrap();
        assert_eq!(keep, [true, false, false, false, true]);
        let keep = Vec::<bool>::try_from(&keep_mask(&scores, 2)).unwrap();
        assert_eq!(keep, [true, false, true, false, true], "the earlier of the tied 0.1s goes first");
    }

    /// A pruned student of hidden widths `hidden` at its final sparsity: its pruner.
    fn pruned(hidden: &str, prune: &str) -> (Pruner, Student) {
        let _guard = crate::torch::test_rng::lock();
        let text = format!("[data]\ninput_shape = [64]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = {hidden}\n[prune]\n{prune}\n");
        let spec = estimator_wasm::schema::Config::from_toml_str(&text).unwrap();
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let mut student = Student::new(&vs.root(), &spec).unwrap();
        let p = spec.prune.unwrap();
        let schedule = PruneSchedule::new(&p, 10, 3).unwrap();
        let mut pruner = Pruner::new(&p, schedule, &student, &crate::student::trainable(&vs)).unwrap();
        (0..=30).for_each(|t| {
            pruner.maybe_prune(t, &mut student);
        });
        (pruner, student)
    }

    #[test]
    fn the_sparsity_given_is_what_the_weights_hold_and_short_rounding_is_warned() {
        // structured 0.05 of 16 units removes floor(0.8) = 0: it said "sparsity 0.050", silently
        let (p, _) = pruned("[16]", "method = \"structured\"\nsparsity = 0.05");
        assert_eq!(p.measured_sparsity(), 0.0);
        assert_eq!(
            p.rounding_warning().as_deref(),
            Some("warning: prune.sparsity = 0.05 removes floor(width x 0.05) whole units of each layer, fewer than asked: fc1 0 of 16 (0.000) (the epoch lines and report.json give the sparsity the weights hold); to remove one more unit in each, set prune.sparsity >= 0.0625")
        );
        // 0.3 of [16, 40]: fc1 loses 4 (0.25, short by a sixth), fc2 12 (exactly 0.3): only fc1
        let (p, _) = pruned("[16, 40]", "method = \"structured\"\nsparsity = 0.3");
        assert_eq!(p.measured_sparsity(), (4.0 * 64.0 + 12.0 * 16.0) / (16.0 * 64.0 + 40.0 * 16.0));
        let w = p.rounding_warning().unwrap();
        assert!(w.contains("fewer than asked: fc1 4 of 16 (0.250) (the epoch") && w.ends_with(">= 0.3125"), "{w}");
        assert_eq!(pruned("[16]", "method = \"structured\"\nsparsity = 0.5").0.measured_sparsity(), 0.5);
        assert_eq!(pruned("[16]", "method = \"structured\"\nsparsity = 0.5").0.rounding_warning(), None);
        // magnitude: round(0.8 x n) zeros of fc1 (64 x 16) and head (16 x 10)
        let (p, _) = pruned("[16]", "sparsity = 0.8");
        assert_eq!(p.measured_sparsity(), (0.8f64 * 1184.0).round() / 1184.0);
        assert_eq!(p.rounding_warning(), None);
    }
}
