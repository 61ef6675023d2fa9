//! Hidden-state distillation (`[[kd.hidden]]`, `estimator_wasm::schema::hidden_spec`): each pair
//! adds `weight * D(proj(h_s), h_t)` to the step's loss, `h_s` the output of one student block
//! and `h_t` one of the teacher's hidden states (TinyBERT, Jiao et al. 2020, arXiv:1909.10351,
//! section 3.1). `proj` is a learned `[t, s]` linear map without bias (TinyBERT's `W_h`) when
//! the widths differ; it lives in the student's VarStore under `kd_hidden.<k>.weight`, so the
//! optimiser trains it and checkpoints keep it, but the export builds a fresh student and copies
//! only the student's own variables, so it never leaves the run.
//!
//! `D` is computed in fp32 over the real tokens (the attention mask's 1s; every row for data
//! without one), so padding never counts:
//! * MSE: `sum_t m_t |p_t - h_t|^2 / (d sum_t m_t)`, `F.mse_loss` over the kept rows;
//! * cosine: `sum_t m_t (1 - cos(p_t, h_t)) / sum_t m_t`, `cos(p, h) = p h / (max(|p|, eps)
//!   max(|h|, eps))`, eps 1e-8 (`F.cosine_similarity`'s).
//!
//! What each saves for the backward is what `estimator_wasm`'s `memory/hidden_plan.rs` prices.
use estimator_wasm::schema::arch;
use estimator_wasm::schema::hidden_spec::{student_hidden_states, HiddenLoss};
use estimator_wasm::schema::Config;
use tch::{nn, Kind, Tensor};

use crate::host::error::{DistillError, Result};

/// The cosine's eps (`F.cosine_similarity`'s default).
const EPS: f64 = 1e-8;

/// One `[[kd.hidden]]` pair as the step runs it.
#[derive(Debug)]
pub struct HiddenTerm {
    /// The student block whose output is `h_s` (an index into the student's blocks).
    pub block: usize,
    /// The teacher's hidden state, in its own numbering (0: the embeddings' output).
    pub teacher_layer: usize,
    pub loss: HiddenLoss,
    pub weight: f64,
    /// `[t, s]`; `None` when the widths are equal.
    pub projection: Option<Tensor>,
}

/// The pairs of a run, their projections built.
#[derive(Debug)]
pub struct HiddenKd {
    pub terms: Vec<HiddenTerm>,
}

impl HiddenKd {
    /// The pairs of `spec.kd.hidden`, each with a projection `[t, s]` under `root /
    /// "kd_hidden" / k` (Kaiming-uniform as `nn.Linear`) when the teacher's width
    /// `teacher_widths[k]` differs from the student's; `None` without pairs.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when the student's layers cannot be listed or `teacher_widths`
    /// does not hold one width per pair.
    pub fn new(root: &nn::Path, spec: &Config, teacher_widths: &[i64]) -> Result<Option<HiddenKd>> {
        let pairs = &spec.kd.hidden;
        if pairs.is_empty() {
            return Ok(None);
        }
        if teacher_widths.len() != pairs.len() {
            return Err(DistillError::Usage(format!(
                "kd.hidden: {} pairs but {} teacher widths",
                pairs.len(),
                teacher_widths.len()
            )));
        }
        let layers = arch::layers(&spec.student, &spec.data).map_err(|e| DistillError::Usage(e.to_string()))?;
        let states = student_hidden_states(&layers);
        let mut terms = Vec::with_capacity(pairs.len());
        for (k, (pair, &t)) in pairs.iter().zip(teacher_widths).enumerate() {
            let state = states.get(pair.student_layer as usize).ok_or_else(|| {
                DistillError::Usage(format!(
                    "kd.hidden[{k}].student_layer: the student has {} hidden states",
                    states.len()
                ))
            })?;
            let s = state.width as i64;
            let projection = (s != t).then(|| {
                let p = root / "kd_hidden" / k;
                let bound = 1.0 / (s as f64).sqrt();
                p.var("weight", &[t, s], nn::Init::Uniform { lo: -bound, up: bound })
            });
            terms.push(HiddenTerm {
                block: state.layer,
                teacher_layer: pair.teacher_layer as usize,
                loss: pair.loss,
                weight: pair.weight,
                projection,
            });
        }
        Ok(Some(HiddenKd { terms }))
    }

    /// Whether some pair reads the output of student block `block`.
    pub fn wants(&self, block: usize) -> bool {
        self.terms.iter().any(|t| t.block == block)
    }

    /// The teacher's hidden states the pairs read, in pair order.
    pub fn teacher_layers(&self) -> Vec<usize> {
        self.terms.iter().map(|t| t.teacher_layer).collect()
    }

    /// The teacher's states `states` (pair order, as [`HiddenKd::teacher_layers`] lists them) as
    /// [`HiddenKd::at_block`] reads them: fp32, without autograd, a cosine pair's divided by its
    /// norm ([`normalised`]) in place of the original.
    pub fn prepare_teacher(&self, states: Vec<Tensor>) -> Vec<Tensor> {
        let prepare = |(term, h): (&HiddenTerm, Tensor)| {
            let h = h.detach().to_kind(Kind::Float);
            match term.loss {
                HiddenLoss::Cosine => normalised(&h),
                HiddenLoss::Mse => h,
            }
        };
        self.terms.iter().zip(states).map(prepare).collect()
    }

    /// `sum weight_k * D_k`, fp32 0-dim with `h`'s graph, over the pairs whose student state is
    /// the output `h` of block `block` ([B, S, s], or [B, ...] for an mlp or cnn; `None` when no
    /// pair reads that block), from the teacher's states `teacher` [B, S, t] or [B, t] (all
    /// pairs', pair order, as [`HiddenKd::prepare_teacher`] returns them) and the attention mask
    /// `mask` [B, S] (`None`: every row). The step calls it as each block's output is made,
    /// so no output is kept for the loss: without checkpointing its graph is the step's, with
    /// checkpointing its segment's recompute ([`crate::train::step`]).
    pub fn at_block(&self, block: usize, h: &Tensor, teacher: &[Tensor], mask: Option<&Tensor>) -> Option<Tensor> {
        let mut total: Option<Tensor> = None;
        for (term, t) in self.terms.iter().zip(teacher).filter(|(term, _)| term.block == block) {
            // an mlp's or cnn's output, one vector a sample
            let h = if t.dim() == 2 { h.flatten(1, -1) } else { h.shallow_clone() };
            let p = match &term.projection {
                Some(w) => h.linear::<&Tensor>(w, None),
                None => h,
            };
            let m = mask.filter(|_| t.dim() == 3);
            let d = match term.loss {
                HiddenLoss::Mse => mse_term(&p.to_kind(Kind::Float), t, m),
                HiddenLoss::Cosine => cosine_term(&p.to_kind(Kind::Float), t, m),
            } * term.weight;
            total = Some(match total {
                Some(sum) => sum + d,
                None => d,
            });
        }
        total
    }

    /// The student block whose pair owns the variable `name` (`kd_hidden.<k>.weight`, pair `k`'s
    /// projection); `None` for any other variable.
    pub fn block_of(&self, name: &str) -> Option<usize> {
        let k = name.strip_prefix("kd_hidden.")?.split('.').next()?.parse::<usize>().ok()?;
        self.terms.get(k).map(|t| t.block)
    }
}

/// `sum_t m_t |p_t - h_t|^2 / (d sum_t m_t)` over the rows of `p` and `h` ([..., d] fp32) that
/// `mask` ([...] of the rows, 1 = real token) keeps; every row without a mask. 0-dim fp32.
pub fn mse_term(p: &Tensor, h: &Tensor, mask: Option<&Tensor>) -> Tensor {
    let d = *p.size().last().expect("a hidden state has a width") as f64;
    let per_row = (p - h).square().sum_dim_intlist(-1, false, Kind::Float);
    masked_mean(&per_row, mask) / d
}

/// `sum_t m_t (1 - p_t h_t / max(|p_t|, eps)) / sum_t m_t` for a teacher state `unit` already
/// divided by `max(|h_t|, eps)` ([`normalised`]); rows and mask as [`mse_term`]. 0-dim fp32.
pub fn cosine_term(p: &Tensor, unit: &Tensor, mask: Option<&Tensor>) -> Tensor {
    let norm = p.norm_scalaropt_dim(2.0, [-1i64], true).clamp_min(EPS);
    let cos = (p / norm * unit).sum_dim_intlist(-1, false, Kind::Float);
    masked_mean(&(1.0 - cos), mask)
}

/// `h / max(|h|, eps)` over the last dimension (no gradient: the teacher's).
pub fn normalised(h: &Tensor) -> Tensor {
    let norm = h.norm_scalaropt_dim(2.0, [-1i64], true).clamp_min(EPS);
    h / norm
}

/// The mean of `per_row` over the rows `mask` keeps (`sum(x m) / max(sum(m), 1)`), or over all.
fn masked_mean(per_row: &Tensor, mask: Option<&Tensor>) -> Tensor {
    match mask {
        Some(m) => {
            let m = m.to_kind(Kind::Float);
            (per_row * &m).sum(Kind::Float) / m.sum(Kind::Float).clamp_min(1.0)
        }
        None => per_row.mean(Kind::Float),
    }
}

#[cfg(test)]
#[path = "hidden_kd_tests.rs"]
mod tests;
