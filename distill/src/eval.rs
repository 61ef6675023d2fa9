//! Evaluation passes: predictions, accuracy and teacher-student agreement on a held-out set.
use tch::{Device, Kind, Tensor};

use crate::data::{Dataset, Normalizer};
use crate::error::Result;
use crate::preflight::finite_teacher_logits;
use crate::student::Student;
use crate::teacher::Teacher;

/// Top-1 predictions [N] (Int64) of the student in eval mode.
pub fn student_predictions(student: &Student, data: &Dataset, norm: &Normalizer, batch: usize) -> Tensor {
    tch::no_grad(|| {
        let preds: Vec<Tensor> =
            data.chunks(batch).map(|(x, _)| student.forward(&norm.apply(&x), false).argmax(-1, false)).collect();
        Tensor::cat(&preds, 0)
    })
}

/// Teacher logits [N, C] (fp32) over a whole dataset, in order.
///
/// # Errors
/// As [`finite_teacher_logits`]: a forward that fails, or a NaN/inf logit (naming its row).
pub fn teacher_logits(teacher: &Teacher, data: &Dataset, norm: &Normalizer, batch: usize) -> Result<Tensor> {
    let logits = data
        .chunks(batch)
        .enumerate()
        .map(|(i, (x, _))| {
            let rows =
                Tensor::arange_start((i * batch) as i64, (i * batch) as i64 + x.size()[0], (Kind::Int64, Device::Cpu));
            finite_teacher_logits(teacher, &norm.apply(&x), &data.file_rows(&rows), &data.path)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Tensor::cat(&logits, 0))
}

/// Fraction of `preds` equal to `labels`.
pub fn accuracy(preds: &Tensor, labels: &Tensor) -> f64 {
    preds.eq_tensor(labels).to_kind(Kind::Float).mean(Kind::Float).double_value(&[])
}
