//! Evaluation passes: predictions, accuracy and teacher-student agreement on a held-out set.
//! What a prediction is (the top-1 class of logits) is the objective's
//! ([`Objective::predictions`]); here they are counted.
use indicatif::ProgressBar;
use tch::{Kind, Tensor};

use crate::data::{Batch, Dataset};
use crate::error::Result;
use crate::objective::Objective;
use crate::student::Student;
use crate::teacher::Teacher;

/// The student's predictions over `data` (top-1 classes [N] Int64 for logits, embeddings
/// [N, E]) in eval mode, in batches of `batch`, in row order.
pub fn student_predictions(student: &Student, data: &Dataset, objective: &dyn Objective, batch: usize) -> Tensor {
    tch::no_grad(|| in_row_order(data, batch, |b| Ok(objective.predictions(&student.forward(&b.input, false)))))
        .expect("the student's forward returns no error")
}

/// `f` of every batch of [`Dataset::eval_batches`], concatenated in row order.
fn in_row_order(data: &Dataset, batch: usize, mut f: impl FnMut(&Batch) -> Result<Tensor>) -> Result<Tensor> {
    let (mut rows, mut outputs) = (Vec::new(), Vec::new());
    for b in data.eval_batches(batch) {
        outputs.push(f(&b)?);
        rows.push(b.index.to_device(tch::Device::Cpu));
    }
    let (rows, outputs) = (Tensor::cat(&rows, 0), Tensor::cat(&outputs, 0));
    if rows.size()[0] < 2 || rows.diff(1, 0, None::<Tensor>, None::<Tensor>).min().int64_value(&[]) == 1 {
        return Ok(outputs); // consecutive already (images)
    }
    Ok(outputs.index_select(0, &rows.argsort(0, false).to_device(outputs.device())))
}

/// The teacher's outputs [N, ...] (fp32: logits [N, C], or embeddings) over a whole dataset, in
/// order, in batches of `batch`, advancing `bar` by the samples done.
///
/// # Errors
/// As [`Teacher::finite_output`]: a forward that fails, or a NaN/inf output (naming its row).
pub fn teacher_outputs(teacher: &Teacher, data: &Dataset, batch: usize, bar: &ProgressBar) -> Result<Tensor> {
    let outputs = in_row_order(data, batch, |b| {
        let out = teacher.finite_output(b, data);
        bar.inc(b.input.rows() as u64);
        out
    });
    bar.finish_and_clear();
    outputs
}

/// Fraction of `preds` equal to `labels`.
pub fn accuracy(preds: &Tensor, labels: &Tensor) -> f64 {
    preds.eq_tensor(labels).to_kind(Kind::Float).mean(Kind::Float).double_value(&[])
}

/// How many of `preds` equal `labels` (summed in fp32).
pub fn correct(preds: &Tensor, labels: &Tensor) -> f64 {
    preds.eq_tensor(labels).to_kind(Kind::Float).sum(Kind::Float).double_value(&[])
}
