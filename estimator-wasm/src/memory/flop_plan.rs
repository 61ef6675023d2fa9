//! Compiles the per-sample FLOPs of a step ([`FlopPlan`]) from the student's priced forward,
//! its checkpoint segments, the teacher and the loss (the counting is `crate::memory::flops`).
use std::ops::Range;

use crate::memory::flops::{forward_flops, layer_flops, loss_per_element, FlopPlan};
use crate::memory::inputs::TeacherModel;
use crate::memory::setup::Compile;
use crate::memory::student_chain::Forward;
use crate::schema::{arch, Family};

impl Compile<'_> {
    /// Per-sample FLOPs of one step: the student's layers (input gradients where the chain
    /// needs them), the forward of every checkpoint segment but the last of each stage again
    /// (as `distill/src/train/step.rs` recomputes them), the teacher's forward when it runs on every
    /// step (`teacher_online`), and the loss over `loss_rows` rows of `data.classes` logits.
    /// A teacher known only by its parameter count is priced at 2 FLOPs per parameter and
    /// token, with a note.
    pub(crate) fn flops(
        &mut self,
        forward: &Forward,
        stages: &[Range<usize>],
        teacher: Option<&TeacherModel>,
        teacher_online: bool,
        kd: bool,
        loss_rows: u64,
    ) -> FlopPlan {
        let (config, cuda) = (self.config, self.ctx.cuda);
        let per_layer: Vec<_> =
            forward.layers.iter().zip(&forward.inputs_of).map(|(l, x)| layer_flops(l, x.requires_grad, cuda)).collect();
        let mut plan = FlopPlan::default();
        for f in &per_layer {
            plan.student_forward = plan.student_forward.saturating_add(f.forward);
            plan.student_backward = plan.student_backward.saturating_add(f.backward);
            plan.recompute = plan.recompute.saturating_add(f.recompute);
        }
        for range in stages {
            let Some(segments) = arch::checkpoint_segments(range.len(), config.student.checkpointing) else { continue };
            let last = segments.len().saturating_sub(1);
            for seg in &segments[..last] {
                for f in &per_layer[range.start + seg.start..range.start + seg.end] {
                    plan.recompute = plan.recompute.saturating_add(f.forward);
                }
            }
        }
        if teacher_online {
            plan.teacher_forward = match teacher.and_then(|t| t.layers.as_ref().map(|l| (t, l))) {
                Some((_, layers)) => forward_flops(layers, cuda),
                None => {
                    let params = teacher.map_or(0, |t| t.params);
                    let tokens = match config.student.family {
                        Family::Transformer => config.data.input_shape.first().copied().unwrap_or(1),
                        _ => 1,
                    };
                    self.notes.push(
                        "the teacher's FLOPs are 2 x params per token (its layers are unknown): give [teacher] preset or arch"
                            .into(),
                    );
                    params.saturating_mul(2).saturating_mul(tokens)
                }
            };
        }
        let elements = loss_rows.saturating_mul(config.data.classes);
        plan.loss = elements.saturating_mul(loss_per_element(config.kd.objective, kd));
        plan
    }
}
