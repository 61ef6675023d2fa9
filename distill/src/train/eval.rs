//! Evaluation passes: predictions, accuracy, a language model's perplexity and teacher-student
//! agreement on a held-out set.
//! What a prediction is (the top-1 class of logits) is the objective's
//! ([`Objective::predictions`]); here they are counted.
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::ProgressBar;
use tch::{Kind, Tensor};

use crate::host::error::{DistillError, Result};
use crate::inputs::data::{Batch, Dataset};
use crate::inputs::teacher::Teacher;
use crate::student::Student;
use crate::train::objective::Objective;

/// What a model's pass over a held-out set gives.
#[derive(Debug)]
pub struct HeldOutPass {
    /// Its predictions in row order (top-1 classes [N] Int64 for logits, embeddings [N, E], a
    /// language model's top-1 next tokens [N, S]).
    pub predictions: Tensor,
    /// A language model's perplexity: `exp` of the mean next-token cross-entropy (nats) over
    /// the positions with a label; `None` for other outputs.
    pub perplexity: Option<f64>,
}

/// The student's [`HeldOutPass`] over `data` in eval mode, in batches of `batch`.
pub fn student_pass(student: &Student, data: &Dataset, objective: &dyn Objective, batch: usize) -> HeldOutPass {
    tch::no_grad(|| held_out_pass(data, batch, objective, |b| Ok(student.forward(&b.input, false))))
        .expect("the student's forward returns no error")
}

/// The teacher's [`HeldOutPass`] over `data` (the test set), in batches of `batch`, advancing
/// `bar` by the samples done. Only predictions are kept: a language model's logits [N, S, V] of
/// a whole test set would not fit.
///
/// # Errors
/// As [`Teacher::finite_output`]; [`DistillError::TeacherPassInterrupted`] when `stop` is set
/// before a batch.
pub fn teacher_pass(
    teacher: &Teacher,
    data: &Dataset,
    objective: &dyn Objective,
    batch: usize,
    bar: &ProgressBar,
    stop: &AtomicBool,
) -> Result<HeldOutPass> {
    let mut watch = StopWatch { stop, set: "test", done: 0, total: data.len() as u64 };
    let pass = held_out_pass(data, batch, objective, |b| watch.forward(teacher, data, b, bar));
    bar.finish_and_clear();
    pass
}

/// A teacher pass's samples done, and the stop flag it checks before each batch.
struct StopWatch<'a> {
    stop: &'a AtomicBool,
    set: &'static str,
    done: u64,
    total: u64,
}

impl StopWatch<'_> {
    /// The teacher's checked output on batch `b` of `data`, unless the stop flag is set;
    /// counts the batch's samples and advances `bar` by them.
    fn forward(&mut self, teacher: &Teacher, data: &Dataset, b: &Batch, bar: &ProgressBar) -> Result<Tensor> {
        self.check()?;
        let out = teacher.finite_output(b, data);
        self.done += b.input.rows() as u64;
        bar.inc(b.input.rows() as u64);
        out
    }

    fn check(&self) -> Result<()> {
        match self.stop.load(Ordering::SeqCst) {
            true => Err(DistillError::TeacherPassInterrupted { set: self.set, done: self.done, total: self.total }),
            false => Ok(()),
        }
    }
}

/// Predictions of `forward`'s outputs over `data` in row order, and for token logits
/// [B, S, V] with labels [B, S] the perplexity (see [`HeldOutPass`]).
fn held_out_pass(
    data: &Dataset,
    batch: usize,
    objective: &dyn Objective,
    mut forward: impl FnMut(&Batch) -> Result<Tensor>,
) -> Result<HeldOutPass> {
    let (mut nats, mut tokens) = (0.0, 0.0);
    let predictions = in_row_order(data, batch, |b| {
        let out = forward(b)?;
        if let (3, Some(labels)) = (out.dim(), b.labels.as_ref()) {
            let (sum, count) = next_token_nats(&out, labels);
            (nats, tokens) = (nats + sum, tokens + count);
        }
        Ok(objective.predictions(&out))
    })?;
    let perplexity = (tokens > 0.0).then(|| (nats / tokens).exp());
    Ok(HeldOutPass { predictions, perplexity })
}

/// The summed next-token cross-entropy (nats, fp32 log-softmax) of logits `logits` [B, S, V]
/// against `labels` [B, S], and the count of positions with a label (>= 0).
pub fn next_token_nats(logits: &Tensor, labels: &Tensor) -> (f64, f64) {
    let logp = logits.to_kind(Kind::Float).log_softmax(-1, Kind::Float).flatten(0, 1);
    let sum = logp.nll_loss_nd(&labels.reshape([-1]), None::<Tensor>, tch::Reduction::Sum, -100);
    (sum.double_value(&[]), labels.ge(0).sum(Kind::Float).double_value(&[]))
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

/// The teacher's outputs [N, ...] (fp32: logits [N, C], or embeddings) over a whole dataset
/// (the train set), in order, in batches of `batch`, advancing `bar` by the samples done.
///
/// # Errors
/// As [`Teacher::finite_output`]: a forward that fails, or a NaN/inf output (naming its row);
/// [`DistillError::TeacherPassInterrupted`] when `stop` is set before a batch.
pub fn soft_targets(
    teacher: &Teacher,
    data: &Dataset,
    batch: usize,
    bar: &ProgressBar,
    stop: &AtomicBool,
) -> Result<Tensor> {
    let mut watch = StopWatch { stop, set: "train", done: 0, total: data.len() as u64 };
    let outputs = in_row_order(data, batch, |b| watch.forward(teacher, data, b, bar));
    bar.finish_and_clear();
    outputs
}

/// Fraction of `preds` equal to `labels` (same shape: classes [N], or a language model's next
/// tokens [N, S]), over the labels that are not negative (-100: no next token).
pub fn accuracy(preds: &Tensor, labels: &Tensor) -> f64 {
    let scored = labels.ge(0);
    let hits = preds.eq_tensor(labels).logical_and(&scored).to_kind(Kind::Float).sum(Kind::Float);
    (hits / scored.to_kind(Kind::Float).sum(Kind::Float).clamp_min(1.0)).double_value(&[])
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use tch::Device;

    use super::*;
    use crate::inputs::data::{Examples, Images, Normalizer};
    use estimator_wasm::schema::Precision;

    /// The digits fixture teacher and 10 random 8 x 8 images.
    fn digits() -> (Teacher, Dataset) {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let cfg = std::fs::read_to_string(fixtures.join("digits-student.toml")).unwrap();
        let spec = estimator_wasm::schema::Config::from_toml_str(&cfg).unwrap();
        let path = fixtures.join("teacher-scripted.pt");
        let teacher = Teacher::load(&path, spec.teacher.output.clone(), Precision::Fp32, Device::Cpu).unwrap();
        let raw = Tensor::rand([10, 1, 8, 8], (Kind::Float, Device::Cpu));
        let images = Images::new(raw, Normalizer::new(&spec.data, Device::Cpu));
        (teacher, Dataset::new(PathBuf::from("digits.npz"), Examples::Images(images), None))
    }

    #[test]
    fn a_teacher_pass_stops_before_its_next_batch_when_asked() {
        let (teacher, data) = digits();
        let bar = ProgressBar::hidden();
        let outputs = soft_targets(&teacher, &data, 4, &bar, &AtomicBool::new(false)).unwrap();
        assert_eq!(outputs.size(), [10, 10]);
        let interrupted = |e: DistillError| match e {
            DistillError::TeacherPassInterrupted { set, done, total } => (set, done, total),
            other => panic!("{other}"),
        };
        let stop = AtomicBool::new(true);
        let e = soft_targets(&teacher, &data, 4, &bar, &stop).unwrap_err();
        assert!(e.is_interrupt(), "exit status 130: {e}");
        assert_eq!(interrupted(e), ("train", 0, 10));
        let objective = crate::train::objective::from_spec(&estimator_wasm::schema::spec::KdSpec::default());
        let e = teacher_pass(&teacher, &data, objective.as_ref(), 4, &bar, &stop).unwrap_err();
        assert_eq!(interrupted(e), ("test", 0, 10));
        // stopped after two batches of 4: the samples done are counted
        let watch = StopWatch { stop: &stop, set: "train", done: 8, total: 10 };
        let e = watch.check().unwrap_err();
        assert_eq!(
            e.to_string(),
            "interrupted during the teacher's pass over the train set (8 of 10 samples), before training"
        );
    }
}
