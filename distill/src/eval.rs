//! Evaluation passes: predictions, accuracy and teacher-student agreement on a held-out set.
//! What a prediction is (the top-1 class of logits) is the objective's
//! ([`Objective::predictions`]); here they are counted.
use indicatif::ProgressBar;
use tch::{Kind, Tensor};

use crate::data::Dataset;
use crate::error::Result;
use crate::objective::Objective;
use crate::student::Student;
use crate::teacher::Teacher;

/// The student's predictions over `data` (top-1 classes [N] Int64 for logits) in eval mode,
/// in batches of `batch`.
pub fn student_predictions(student: &Student, data: &Dataset, objective: &dyn Objective, batch: usize) -> Tensor {
    tch::no_grad(|| {
        let preds: Vec<Tensor> =
            data.chunks(batch).map(|b| objective.predictions(&student.forward(&b.input, false))).collect();
        Tensor::cat(&preds, 0)
    })
}

/// The teacher's outputs [N, ...] (fp32: logits [N, C], or embeddings) over a whole dataset, in
/// order, in batches of `batch`, advancing `bar` by the samples done.
///
/// # Errors
/// As [`Teacher::finite_output`]: a forward that fails, or a NaN/inf output (naming its row).
pub fn teacher_outputs(teacher: &Teacher, data: &Dataset, batch: usize, bar: &ProgressBar) -> Result<Tensor> {
    let outputs = data
        .chunks(batch)
        .map(|b| {
            let out = teacher.finite_output(&b, data);
            bar.inc(b.input.rows() as u64);
            out
        })
        .collect::<Result<Vec<_>>>();
    bar.finish_and_clear();
    Ok(Tensor::cat(&outputs?, 0))
}

/// Fraction of `preds` equal to `labels`.
pub fn accuracy(preds: &Tensor, labels: &Tensor) -> f64 {
    preds.eq_tensor(labels).to_kind(Kind::Float).mean(Kind::Float).double_value(&[])
}

/// How many of `preds` equal `labels` (summed in fp32).
pub fn correct(preds: &Tensor, labels: &Tensor) -> f64 {
    preds.eq_tensor(labels).to_kind(Kind::Float).sum(Kind::Float).double_value(&[])
}
