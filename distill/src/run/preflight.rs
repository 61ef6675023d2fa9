//! Checks of the teacher and the data against each other, run before any output is written, so a
//! bad combination fails in seconds with a message that names the file, the row and the fix
//! (docs/kd-pitfalls.md T1, T4). A message blames a cause only after checking it (the teacher's
//! outputs are checked finite wherever they are computed: `Teacher::finite_output`).
use estimator_wasm::schema::{Config, Family, HeadKind};
use tch::{Device, Kind, Tensor};

use crate::host::error::{DistillError, Result};
use crate::inputs::data::{Dataset, ModelInput};
use crate::inputs::teacher::Teacher;
use crate::inputs::vocab_check::{token_logits_problem, VocabSizes};
use crate::student::Student;

/// `--device auto|cpu|cuda|cuda:N`: auto picks CUDA device 0 when libtorch sees one.
///
/// # Errors
/// [`DistillError::Usage`] for an unknown name or a CUDA device that is not there.
pub fn parse_device(name: &str) -> Result<Device> {
    let cuda_count = tch::Cuda::device_count() as usize;
    let device = match name {
        "auto" => return Ok(Device::cuda_if_available()),
        "cpu" => return Ok(Device::Cpu),
        "cuda" => 0,
        other => match other.strip_prefix("cuda:").and_then(|i| i.parse::<usize>().ok()) {
            Some(i) => i,
            None => return Err(DistillError::Usage(format!("--device {name}: use auto, cpu, cuda or cuda:N"))),
        },
    };
    if device >= cuda_count {
        return Err(DistillError::Usage(format!(
            "--device {name}: libtorch sees {cuda_count} CUDA device(s); use --device cpu or auto"
        )));
    }
    Ok(Device::Cuda(device))
}

/// Refuses a transformer student `distill` builds but cannot yet train end to end: sentence
/// encoders (`head = "embedding"`) and language models (`head = "lm"`) on text
/// (`data.tokenizer`) run through its data, objectives and exports; classifier heads are for
/// `distill plan` (the explorer says the same: `estimator_wasm::schema::untrainable`).
///
/// # Errors
/// [`DistillError::Config`] naming `path` and the key.
pub fn check_transformer_head(spec: &Config, path: &std::path::Path) -> Result<()> {
    let Some(t) = spec.student.transformer.as_ref().filter(|_| spec.student.family == Family::Transformer) else {
        return Ok(());
    };
    let problem = match t.head {
        HeadKind::Embedding | HeadKind::Lm if spec.data.tokenizer.is_some() => return Ok(()),
        HeadKind::Embedding => "head = \"embedding\": a sentence encoder reads text: set data.tokenizer (and .txt train/test files)",
        HeadKind::Lm => "head = \"lm\": a language model reads text: set data.tokenizer (and .txt train/test files)",
        HeadKind::Classifier => "head = \"classifier\": transformer classifiers are planned, not trained yet; distill trains sentence encoders (head = \"embedding\")",
    };
    Err(DistillError::config(path, format!("student.transformer.{problem}")))
}

/// What the teacher must output for a probe batch of B samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeacherOutput {
    /// Class logits [B, classes].
    Logits,
    /// An embedding [B, classes] (an embedding objective).
    Embedding,
    /// A language model's next-token logits [B, seq, vocab] (`head = "lm"`), their width
    /// checked against the vocabularies of `vocab`.
    TokenLogits { seq: i64, vocab: VocabSizes },
}

/// The teacher's output on a probe batch must be what `expected` says, of width `classes`.
///
/// # Errors
/// [`DistillError::Teacher`] saying what [`shape_problem`] (or [`embedding_problem`],
/// [`token_logits_problem`]) finds.
pub fn check_teacher_shape(
    teacher: &Teacher,
    output: &Tensor,
    batch: i64,
    classes: u64,
    expected: TeacherOutput,
) -> Result<()> {
    let size = output.size();
    let problem = match expected {
        TeacherOutput::Logits => shape_problem(&size, batch, classes),
        TeacherOutput::Embedding => embedding_problem(&size, batch, classes),
        TeacherOutput::TokenLogits { seq, vocab } => token_logits_problem(&size, batch, seq, &vocab),
    };
    match problem {
        Some(problem) => Err(DistillError::teacher(&teacher.path, problem)),
        None => Ok(()),
    }
}

/// What is wrong with a teacher embedding of shape `size` for a batch of `batch` under
/// `data.classes = width` (expected [batch, width]); `None` when the shape is right.
fn embedding_problem(size: &[i64], batch: i64, width: u64) -> Option<String> {
    Some(match *size {
        [b, e] if b == batch && e == width as i64 => return None,
        [b, e] if b == batch => format!(
            "the teacher outputs embeddings of shape {size:?} for a batch of {batch}, but data.classes = {width}: \
             set data.classes = {e} (the embedding's width)"
        ),
        _ => format!(
            "the teacher outputs shape {size:?} for a batch of {batch}; expected one embedding per sample, [{batch}, {width}] \
             (kd.objective = embedding_*): return the pooled sentence embedding, not token states [B, S, E]"
        ),
    })
}

/// What is wrong with teacher logits of shape `size` for a batch of `batch` under
/// `data.classes = classes` (expected [batch, classes]): not 2-D (an argmax [B], say), another
/// row count, or another class count; `None` when the shape is right.
fn shape_problem(size: &[i64], batch: i64, classes: u64) -> Option<String> {
    let expected = format!("expected logits [N, classes] = [{batch}, {classes}]");
    Some(match *size {
        [b, c] if b == batch && c == classes as i64 => return None,
        [b, c] if b == batch => format!(
            "the teacher outputs logits of shape {size:?} for a batch of {batch}, but data.classes = {classes}: \
             the teacher has {c} classes; set data.classes to match or use a teacher for this label set"
        ),
        [b, _] => format!(
            "the teacher outputs {b} row(s) (shape {size:?}) for a batch of {batch}; {expected}: it must return one row \
             of logits per sample"
        ),
        _ => format!(
            "the teacher outputs a {}-D tensor of shape {size:?} for a batch of {batch}; {expected}: return the \
             logits before any argmax, reshape or per-sample reduction",
            size.len()
        ),
    })
}

/// Refuses a teacher that was traced (`torch.jit.trace`) in training mode: `eval()` cannot undo
/// a trace, so dropout stays on (the output changes from call to call: the soft targets are
/// noise, and a logit cache freezes one random draw per sample) or batch norm keeps using batch
/// statistics (a sample's output depends on the rest of its batch). `logits` [B, C] are the
/// teacher's on the probe batch's model input `input`; the teacher runs on it again, and on
/// its first half alone. Differences up to 1e-4 (fp32) or 2e-2 (16-bit) of 1 + max |logit| are
/// float rounding.
///
/// # Errors
/// [`DistillError::Teacher`] saying how to re-export the teacher in eval mode.
pub fn check_eval_mode(teacher: &Teacher, input: &ModelInput, logits: &Tensor) -> Result<()> {
    let fix = "re-export it in eval mode: call model.eval() before torch.jit.trace(model, example)";
    let rel = if teacher.precision() == "fp32" { 1e-4 } else { 2e-2 };
    let tol = rel * (1.0 + logits.abs().max().double_value(&[]));
    let again = teacher.output(input)?;
    let diff = max_abs_diff(&again, logits);
    if diff > tol {
        return Err(DistillError::teacher(
            &teacher.path,
            format!(
                "the teacher gives different logits for the same input on two calls (max difference {diff:.4}): \
                 it was traced in training mode with dropout on, which eval() cannot undo; {fix}"
            ),
        ));
    }
    let b = input.rows();
    if b >= 2 {
        let half = b / 2;
        let alone = teacher.output(&input.narrow(0, half)).map_err(|e| {
            DistillError::teacher(
                &teacher.path,
                format!(
                    "the teacher runs on a batch of {b} but fails on its first {half} rows alone ({}): its output depends \
                     on the batch, as batch norm traced in training mode does; {fix}",
                    crate::host::error::first_line(&e.to_string())
                ),
            )
        })?;
        let diff = max_abs_diff(&alone, &logits.narrow(0, 0, half));
        if diff > tol {
            return Err(DistillError::teacher(
                &teacher.path,
                format!(
                    "the teacher's logits for a sample change with the other samples in its batch (max difference \
                     {diff:.4} between a batch of {half} and of {b}): it normalises with batch statistics, as batch norm \
                     traced in training mode does; {fix}"
                ),
            ));
        }
    }
    Ok(())
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Refuses a test file whose inputs are on another scale than the train file's (uint8 0..255
/// against floats 0..16, say: the student would be tested on inputs it never saw). Per channel
/// ([`Dataset::channel_stats`]), the two means may differ by at most the larger std, and the
/// stds by at most a factor of 4; far beyond what samples of one distribution show.
///
/// # Errors
/// [`DistillError::Data`] naming the test file, the train file and both ranges.
pub fn check_same_range(train: &Dataset, test: &Dataset) -> Result<()> {
    for (c, (tr, te)) in train.channel_stats().iter().zip(test.channel_stats()).enumerate() {
        let spread = tr.std.max(te.std);
        let apart = (tr.mean - te.mean).abs();
        let mismatch = if spread == 0.0 {
            apart > 1e-6 * (1.0 + tr.mean.abs())
        } else {
            apart > spread || 4.0 * tr.std.min(te.std) < spread
        };
        if mismatch {
            return Err(DistillError::data(
                test.path(),
                format!(
                    "its inputs x span {te} in channel {c}, but those of the train file {} span {tr}: train and \
                     test inputs must be in the same units; convert one file to the other's range and dtype",
                    train.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// Rows per batch of a check that reads a whole dataset on the device: at most the smallest
/// `train.eval_batch_size` people set (the plan prices the evaluation's batch and more).
pub const CHECK_ROWS: usize = 64;

/// The share `p` of the most frequent class among `test`'s labels, and a warning when the
/// teacher's test `accuracy` is no better than `p` plus three binomial standard errors
/// (sqrt(p (1 - p) / n)) and nearer `p` than 1: a teacher at chance level usually sees inputs
/// normalised unlike its training data. No warning when `p` is over 1/2: such a test set (one
/// class, one sample) cannot tell a good teacher from one that always answers that class.
pub fn chance_warning(accuracy: f64, test: &Dataset, classes: u64) -> (f64, Option<String>) {
    let n = test.len().max(1) as f64;
    // a language model's labels are tokens [N, S]: no class to guess
    let Some(labels) = test.labels().filter(|y| y.dim() == 1) else { return (0.0, None) };
    let counts = labels.bincount(None::<Tensor>, classes as i64);
    let chance = counts.max().double_value(&[]) / n;
    let cannot_tell = chance > 0.5;
    let above = accuracy > chance + 3.0 * (chance * (1.0 - chance) / n).sqrt() || accuracy > (chance + 1.0) / 2.0;
    if cannot_tell || above {
        return (chance, None);
    }
    let (mut lo, mut hi, mut sum, mut sq, mut count) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0);
    // in batches no larger than the evaluation's: a check must fit in what the memory plan
    // prices (4,096 rows of Fashion-MNIST in f64 held 61 MiB more than the plan on an H200)
    for batch in test.chunks(CHECK_ROWS) {
        let x = batch.input.x.to_kind(Kind::Double);
        count += x.numel();
        lo = lo.min(x.min().double_value(&[]));
        hi = hi.max(x.max().double_value(&[]));
        sum += x.sum(Kind::Double).double_value(&[]);
        sq += x.square().sum(Kind::Double).double_value(&[]);
    }
    let count = count.max(1) as f64;
    let mean = sum / count;
    let std = (sq / count - mean * mean).max(0.0).sqrt();
    let warning = format!(
        "warning: the teacher's test accuracy {accuracy:.4} is at chance level (the most frequent class is {chance:.4} \
         of the {} test labels): check that data.scale/mean/std normalise the inputs as the teacher was trained \
         (normalised test inputs span [{lo:.4}, {hi:.4}], mean {mean:.4}, std {std:.4}) and that the labels follow \
         the teacher's classes",
        test.len()
    );
    (chance, Some(warning))
}

/// Below this spread (the largest distance of a held-out sentence's unit embedding from their
/// mean direction), a teacher's embeddings are one point: the differences are within 16-bit
/// rounding (bf16 keeps 8 bits of mantissa, 4e-3), and real sentence encoders spread them over
/// 0.5 or more (all-MiniLM-L6-v2 on WordNet: 0.9).
pub const COLLAPSED_SPREAD: f64 = 2e-2;

/// The problem with a teacher whose embeddings `embeddings` [N, E] of the held-out sentences
/// are all (nearly) the same direction: it gives nothing to learn, and no figure that compares
/// cosines (Spearman, cosine agreement) means anything; `None` for fewer than 2 rows or a
/// teacher whose embeddings spread.
pub fn collapse_problem(embeddings: &Tensor) -> Option<String> {
    let n = embeddings.size().first().copied().unwrap_or(0);
    if embeddings.dim() != 2 || n < 2 {
        return None;
    }
    let e = embeddings.to_kind(Kind::Double);
    let unit = &e / e.norm_scalaropt_dim(2.0, [1i64], true).clamp_min(1e-30);
    let mean = unit.mean_dim(&[0i64][..], true, Kind::Double);
    let spread = (&unit - &mean).norm_scalaropt_dim(2.0, [1i64], false).max().double_value(&[]);
    (spread < COLLAPSED_SPREAD).then(|| {
        format!(
            "its embeddings of the {n} held-out sentences are all the same direction (each within {spread:.2e} of their \
             mean, under {COLLAPSED_SPREAD}): a teacher that maps every sentence to one point teaches nothing, and no \
             Spearman or cosine figure could mean anything; check that the file is the trained teacher and that it \
             returns one embedding per sentence"
        )
    })
}

/// Refuses a student that computes the same function as the teacher (docs/kd-pitfalls.md T4: KD from a
/// copy of yourself has a zero KL term and silently wastes the run).
pub fn check_not_identical(
    teacher: &Teacher,
    teacher_logits: &Tensor,
    student: &Student,
    input: &ModelInput,
) -> Result<()> {
    let student_logits = tch::no_grad(|| student.forward(input, false));
    let diff = (student_logits - teacher_logits).abs().max().double_value(&[]);
    if diff < 1e-6 {
        return Err(DistillError::teacher(
            &teacher.path,
            "the teacher and the student are identical (same outputs on the first batch): \
             distilling a network into itself learns nothing; use a different student.init or teacher",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::inputs::data::{Examples, Images, Normalizer};

    /// Images `x` with labels `y`, normalised by `x * scale`.
    fn scaled(name: &str, x: Tensor, y: Tensor, scale: f64) -> Dataset {
        let spec = estimator_wasm::Config::from_toml_str(&format!(
            "[data]\ninput_shape=[2]\nclasses=3\nscale={scale:?}\n[student]\nfamily=\"mlp\""
        ))
        .unwrap();
        let images = Images::new(x, Normalizer::new(&spec.data, Device::Cpu));
        Dataset::new(PathBuf::from(name), Examples::Images(images), Some(y))
    }

    fn dataset(name: &str, x: Tensor, y: Tensor) -> Dataset {
        scaled(name, x, y, 1.0)
    }

    #[test]
    fn train_and_test_on_other_scales_are_refused() {
        // channel 0 of the train set: 0, 16, 0, 16, 8, 8, 4, 12 -> mean 8, std 6
        let x = Tensor::from_slice(&[0f32, 16., 0., 16., 8., 8., 4., 12.]).reshape([4, 1, 1, 2]);
        let y = Tensor::from_slice(&[0i64, 1, 0, 1]);
        let train = dataset("train.npz", x.shallow_clone(), y.shallow_clone());
        assert_eq!(
            train.channel_stats(),
            [crate::inputs::data::ChannelStats { min: 0.0, max: 16.0, mean: 8.0, std: 6.0 }]
        );
        // the same data shifted by 1: one distribution
        check_same_range(&train, &dataset("near.npz", &x + 1.0, y.shallow_clone())).unwrap();
        // 16 times larger (uint8 0..255 against floats 0..16)
        let e = check_same_range(&train, &dataset("test.npz", &x * 16.0, y.shallow_clone())).unwrap_err().to_string();
        assert_eq!(
            e,
            "test.npz: its inputs x span [0.0000, 256.0000] (mean 128.0000, std 96.0000) in channel 0, but those of \
             the train file train.npz span [0.0000, 16.0000] (mean 8.0000, std 6.0000): train and test inputs must be \
             in the same units; convert one file to the other's range and dtype"
        );
        // shifted by more than the spread (normalised already against raw)
        assert!(check_same_range(&train, &dataset("shift.npz", &x + 7.0, y)).is_err());
    }

    /// A test set of `counts[c]` labels of class `c`, all inputs 3 (normalised to 6).
    fn labelled(counts: &[i64]) -> Dataset {
        let y: Vec<i64> =
            counts.iter().enumerate().flat_map(|(c, &k)| std::iter::repeat_n(c as i64, k as usize)).collect();
        let n = y.len() as i64;
        scaled("test.npz", Tensor::full([n, 2], 3, (Kind::Uint8, Device::Cpu)), Tensor::from_slice(&y), 2.0)
    }

    #[test]
    fn a_teacher_no_better_than_the_most_frequent_class_is_flagged() {
        // 40/30/30 labels: chance 0.4, three standard errors 3 * sqrt(0.4 * 0.6 / 100)
        let test = labelled(&[40, 30, 30]);
        let threshold = 0.4 + 3.0 * (0.4f64 * 0.6 / 100.0).sqrt();
        assert_eq!(chance_warning(threshold + 1e-9, &test, 3), (0.4, None));
        let (chance, warning) = chance_warning(threshold, &test, 3);
        assert_eq!(chance, 0.4);
        let warning = warning.unwrap();
        assert!(warning.starts_with("warning: the teacher's test accuracy 0.5470 is at chance level (the most frequent class is 0.4000 of the 100 test labels)"), "{warning}");
        assert!(warning.contains("normalised test inputs span [6.0000, 6.0000], mean 6.0000, std 0.0000"), "{warning}");
    }

    #[test]
    fn a_teacher_whose_embeddings_are_one_point_is_named() {
        let rows = |v: &[f32], n: i64| Tensor::from_slice(v).reshape([n, v.len() as i64 / n]);
        // identical, and identical up to a scale (the same direction)
        let same = rows(&[0.6, 0.8, 0.6, 0.8, 1.2, 1.6], 3);
        let p = collapse_problem(&same).unwrap();
        assert!(
            p.starts_with("its embeddings of the 3 held-out sentences are all the same direction (each within 0.00e0 "),
            "{p}"
        );
        // differences within 16-bit rounding
        assert!(collapse_problem(&rows(&[0.6, 0.8, 0.601, 0.8, 0.6, 0.799], 3)).is_some());
        // a spread like a real encoder's, and too few rows to tell
        assert_eq!(collapse_problem(&rows(&[1.0, 0.0, 0.0, 1.0, 0.7, 0.7], 3)), None);
        assert_eq!(collapse_problem(&rows(&[0.6, 0.8], 1)), None);
    }

    #[test]
    fn teacher_output_shapes_are_named_for_what_is_wrong() {
        assert_eq!(shape_problem(&[8, 10], 8, 10), None);
        let one_d = "the teacher outputs a 1-D tensor of shape [8] for a batch of 8; expected logits [N, classes] = \
                     [8, 10]: return the logits before any argmax, reshape or per-sample reduction";
        assert_eq!(shape_problem(&[8], 8, 10).as_deref(), Some(one_d));
        assert!(shape_problem(&[8, 10, 1], 8, 10)
            .unwrap()
            .starts_with("the teacher outputs a 3-D tensor of shape [8, 10, 1]"));
        assert!(shape_problem(&[], 8, 10).unwrap().starts_with("the teacher outputs a 0-D tensor of shape []"));
        assert_eq!(
            shape_problem(&[1, 10], 8, 10).as_deref(),
            Some(
                "the teacher outputs 1 row(s) (shape [1, 10]) for a batch of 8; expected logits [N, classes] = [8, 10]: \
                 it must return one row of logits per sample"
            )
        );
        assert!(shape_problem(&[8, 12], 8, 10).unwrap().contains("data.classes = 10: the teacher has 12 classes"));
        assert_eq!(embedding_problem(&[8, 384], 8, 384), None);
        assert!(embedding_problem(&[8, 384], 8, 256).unwrap().contains("set data.classes = 384"));
        assert!(embedding_problem(&[8, 12, 384], 8, 384).unwrap().contains("not token states [B, S, E]"));
    }

    #[test]
    fn no_chance_warning_where_the_test_set_cannot_tell() {
        // one class (27 of 28 right), one sample (right), 75% one class (at chance exactly)
        for (counts, accuracy, chance) in
            [(&[0, 0, 28][..], 27.0 / 28.0, 1.0), (&[1], 1.0, 1.0), (&[75, 25], 0.75, 0.75)]
        {
            let test = labelled(counts);
            assert_eq!(chance_warning(accuracy, &test, 3), (chance, None), "{counts:?}");
        }
        // two samples of two classes, both right: nearer 1 than chance 0.5, although within
        // three standard errors (0.5 + 3 * sqrt(0.25 / 2) = 1.56)
        let test = labelled(&[1, 1]);
        assert_eq!(chance_warning(1.0, &test, 3), (0.5, None));
        assert!(chance_warning(0.5, &test, 3).1.is_some(), "half right on a balanced pair is chance");
    }
}
