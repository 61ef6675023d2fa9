//! What a run with `[[kd.hidden]]` pairs adds around the step ([`crate::train::objective::hidden_kd`]):
//! the preflight that refuses a pair the teacher cannot serve before anything is written, the
//! projections built from the teacher's widths, and each batch's teacher states, from the same
//! live forward as its soft targets (the teacher runs on every batch: its hidden states are
//! never cached).
use estimator_wasm::schema::arch;
use estimator_wasm::schema::hidden_spec::student_hidden_states;
use estimator_wasm::schema::Config;
use tch::{nn::VarStore, Tensor};

use crate::host::error::{DistillError, Result};
use crate::inputs::data::{Batch, ModelInput};
use crate::inputs::teacher::Teacher;
use crate::train::objective::hidden_kd::HiddenKd;
use crate::train::train_io::{SoftTargets, TrainInputs};

/// The teacher layers the pairs of `spec` read, in pair order.
pub fn teacher_layers(spec: &Config) -> Vec<usize> {
    spec.kd.hidden.iter().map(|p| p.teacher_layer as usize).collect()
}

/// Runs `teacher` on the probe input `probe` and checks that it returns every hidden state the
/// pairs of `spec` ask for, shaped as the student's ([B, S, d] for a transformer, [B, ...] for
/// an mlp or cnn); returns their widths (the last dimension; an mlp's flattened), pair order.
///
/// # Errors
/// As [`Teacher::output_and_hidden`] (no hidden outputs, a layer it does not have);
/// [`DistillError::Teacher`] for a state of another shape, naming the pair.
pub fn preflight(spec: &Config, teacher: &Teacher, probe: &ModelInput) -> Result<Vec<i64>> {
    if spec.kd.hidden.is_empty() {
        return Ok(Vec::new());
    }
    let (_, states) = teacher.output_and_hidden(probe, &teacher_layers(spec))?;
    let layers = arch::layers(&spec.student, &spec.data).map_err(|e| DistillError::Usage(e.to_string()))?;
    let tokens = student_hidden_states(&layers).first().is_some_and(|s| s.tokens);
    let rows = probe.x.size()[0];
    let mut widths = Vec::with_capacity(states.len());
    for (k, h) in states.iter().enumerate() {
        let size = h.size();
        let fits = match tokens {
            true => size.len() == 3 && size[..2] == probe.x.size()[..2],
            false => size.len() >= 2 && size[0] == rows,
        };
        if !fits {
            let want = if tokens { "[B, S, d] as the token ids [B, S]" } else { "[B, ...] with a row per sample" };
            return Err(DistillError::teacher(
                &teacher.path,
                format!(
                    "kd.hidden[{k}]: the teacher's hidden state {} is {size:?} on a batch of {:?}, and the student's is {want}",
                    spec.kd.hidden[k].teacher_layer,
                    probe.x.size()
                ),
            ));
        }
        widths.push(if tokens { size[2] } else { size[1..].iter().product() });
    }
    Ok(widths)
}

/// The pairs of the run `inputs`, their projections in `vs` (before the optimiser lists its
/// variables); `None` without pairs.
///
/// # Errors
/// [`DistillError::Usage`] when the run's teacher does not run on every batch; as [`preflight`].
pub fn build(inputs: &TrainInputs, vs: &VarStore) -> Result<Option<HiddenKd>> {
    let spec = inputs.settings.resolved_spec();
    if spec.kd.hidden.is_empty() {
        return Ok(None);
    }
    let SoftTargets::Live(teacher) = &inputs.soft_targets else {
        return Err(DistillError::Usage(
            "[[kd.hidden]] needs the teacher on every batch, and this run reads no live teacher: remove [[kd.hidden]]"
                .into(),
        ));
    };
    let first = Tensor::from_slice(&[0i64]).to_device(inputs.settings.device());
    let widths = preflight(spec, teacher, &inputs.train.batch(&first).input)?;
    HiddenKd::new(&vs.root(), spec, &widths)
}

/// The batch (model input, labels) of the training rows `rows` of `inputs`, their soft targets
/// and, with pairs, the teacher's hidden states the pairs read, from the same forward
/// ([`HiddenKd::prepare_teacher`]; empty without). At `kd.alpha = 0` the teacher runs for its
/// hidden states alone: its logits are dropped at once (no soft term reads them).
///
/// # Errors
/// As [`SoftTargets`]' and [`Teacher::output_and_hidden`]; a non-finite teacher output.
pub fn batch_of(
    inputs: &TrainInputs,
    hidden: Option<&HiddenKd>,
    rows: &[i64],
) -> Result<(Batch, Option<Tensor>, Vec<Tensor>)> {
    let (targets, data) = (&inputs.soft_targets, inputs.train);
    let index = Tensor::from_slice(rows).to_device(inputs.settings.device());
    let batch = data.batch(&index);
    let (soft, states) = match (hidden, targets) {
        (Some(kd), SoftTargets::Live(teacher)) => {
            let (soft, states) = teacher.output_and_hidden(&batch.input, &kd.teacher_layers())?;
            teacher.check_finite(&soft, &batch, data)?;
            let soft = Some(soft).filter(|_| inputs.settings.kd().alpha > 0.0);
            (soft, kd.prepare_teacher(states))
        }
        _ => (targets.get(&index, &batch, data)?, Vec::new()),
    };
    Ok((batch, soft, states))
}
