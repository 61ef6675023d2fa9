//! `[[kd.hidden]]` in the plan: what each hidden-state pair adds to a step, as distill's
//! `objective/hidden_kd.rs` computes it (counted from its ops, in bytes per sample; `R` the
//! rows of a hidden state per sample, the sequence length for a transformer and 1 for an mlp or
//! cnn, `s` the student's width and `t` the teacher's):
//! * the teacher's hidden state, kept in fp32 from the teacher's forward to the loss: `R t 4`
//!   (with the teacher's logits, [`LossPlan::teacher_logits`]; the teacher runs on every batch);
//! * the projection `[t, s]` when `s != t`: its weight, gradient and optimiser states, priced as
//!   a parameter of the student layer whose output it projects ([`crate::memory::states`]);
//! * saved for the backward: MSE saves the difference `p - h_t` (`square`'s input, `R t 4`);
//!   cosine the fp32 projected state `p` (the norm's input, `R t 4`) and two [R] fp32 vectors
//!   (`|p|` and `max(|p|, eps)`; the teacher's state is normalised in place once). Once per step, the attention mask as fp32
//!   `[R]` that weighs the tokens (a transformer's only);
//! * transient while the loss is built: the fp32 projected state and one more `R t 4` (the
//!   square, or the product `p h_t`); in the backward two `R t 4` gradients.
//!
//! The student's hidden state itself is an activation the next layer already saves: nothing new.
//!
//! With `student.checkpointing`, a pair whose student layer lies before the last segment has
//! its term made again when its segment is recomputed (distill's `train/step.rs`): its saved
//! tensors join that segment's recomputed set (alive from the recompute to the segment's
//! backward, not at the loss), and its transient and gradient tensors the backward scratch of
//! the segment's last layer, where the term's backward runs first (both counted there, though
//! they are never alive together: an overestimate of `2 R t 4`). The forward under `no_grad`
//! computes the term's value alone, once its segment's blocks have run: it keeps the layer's
//! output to the segment's end (in the live sets of the segment's later layers' no-grad
//! forward) and, at the segment's last layer, the fp32 projected state and one more `R t 4`.
use crate::memory::compiled::{LayerPlan, LossPlan};
use crate::memory::errors::EstimateError;
use crate::memory::inputs::TeacherModel;
use crate::memory::runtime::mul;
use crate::memory::setup::Compile;
use crate::memory::sizes::{ParamTensor, Size};
use crate::memory::student_chain::Forward;
use crate::schema::hidden_spec::{student_hidden_states, HiddenLoss};

impl Compile<'_> {
    /// Adds the pairs of `[[kd.hidden]]` to `loss` (with checkpointing, a pair before the last
    /// segment to its layers in `layers` instead) and their projections to the priced layers of
    /// `forward`; `teacher`'s layers give the teacher's widths (unknown: the student's, noted).
    ///
    /// # Errors
    /// [`EstimateError::Invalid`] on `kd.hidden[k].teacher_layer` for a teacher layer the known
    /// teacher does not have; [`EstimateError::Overflow`] past 2^64 bytes.
    pub(crate) fn hidden(
        &mut self,
        forward: &mut Forward,
        layers: &mut [LayerPlan],
        loss: &mut LossPlan,
        teacher: Option<&TeacherModel>,
    ) -> Result<(), EstimateError> {
        let pairs = &self.config.kd.hidden;
        if pairs.is_empty() {
            return Ok(());
        }
        let student = student_hidden_states(&forward.layers);
        let teacher_states = teacher.and_then(|t| t.layers.as_deref()).map(student_hidden_states);
        if teacher_states.is_none() {
            self.notes.push("kd.hidden: the teacher's hidden widths are unknown (no [teacher] preset, arch or folder): priced at the student's, without projections".into());
        }
        let rows = if student.first().is_some_and(|s| s.tokens) { forward.x0.elems } else { 1 };
        let f32_rows = |width: u64| -> Result<Size, EstimateError> {
            Ok(Size::per(mul(mul(rows, width, "kd.hidden")?, 4, "kd.hidden")?))
        };
        let mut held = Vec::new();
        for (k, pair) in pairs.iter().enumerate() {
            let s = student[pair.student_layer as usize];
            let t = match &teacher_states {
                Some(states) => states.get(pair.teacher_layer as usize).map(|h| h.width).ok_or_else(|| {
                    EstimateError::invalid(
                        &format!("kd.hidden[{k}].teacher_layer"),
                        format!(
                            "is {}, and the teacher has {} hidden states (0 the embeddings' output): use 0 to {}",
                            pair.teacher_layer,
                            states.len(),
                            states.len().saturating_sub(1)
                        ),
                    )
                })?,
                None => s.width,
            };
            if s.width != t {
                let elems = mul(s.width, t, "kd.hidden projection")?;
                let param = ParamTensor { name: "kd_hidden_projection", elems, autocast: true, prunable: false };
                forward.priced[s.layer].params.push(param);
            }
            let state = f32_rows(t)?;
            held.push(state);
            let mut saved = vec![state];
            if pair.loss == HiddenLoss::Cosine {
                saved.extend(std::iter::repeat_n(f32_rows(1)?, 2));
            }
            // the next segment start after the pair's layer, if any: its segment is recomputed
            match (s.layer + 1..layers.len()).find(|&j| layers[j].segment_start) {
                Some(next) => {
                    layers[s.layer].recompute.extend(saved);
                    layers[next - 1].backward_scratch.extend([state; 4]);
                    let output = forward.priced[s.layer].output.size()?;
                    for later in &mut layers[s.layer + 1..next] {
                        later.checkpoint_forward_live.push(output);
                    }
                    layers[next - 1].checkpoint_forward_live.extend([state, state]);
                }
                None => {
                    loss.saved.extend(saved);
                    loss.transient.extend([state, state]);
                    loss.grads.extend([state, state]);
                }
            }
        }
        if rows > 1 {
            loss.saved.push(f32_rows(1)?);
        }
        // one allocation in the pool's rounding with the teacher's logits (close: each is large)
        let mut total = loss.teacher_logits.unwrap_or(Size::fixed(0));
        for h in &held {
            total.per_sample =
                total.per_sample.checked_add(h.per_sample).ok_or_else(|| EstimateError::overflow("kd.hidden"))?;
        }
        loss.teacher_logits = Some(total);
        Ok(())
    }
}

#[cfg(test)]
#[path = "hidden_plan_tests.rs"]
mod tests;
