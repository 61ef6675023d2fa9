//! Building a student: libtorch seeded, the network of the cfg, then its starting weights: the
//! teacher's (`student.init_from_teacher`, with a factorised head fitted to the teacher's) and
//! then a `student.init` file.
use std::path::Path;

use estimator_wasm::schema::{BatchSize, Config};
use tch::nn::VarStore;
use tch::{Device, Tensor};

use crate::host::error::{DistillError, Result};
use crate::inputs::data::Dataset;
use crate::inputs::teacher::Teacher;
use crate::student::{head_fit, init_from_teacher, llama_init, Student, StudentInit, TeacherInit, TeacherWeights};

/// What `student.init_from_teacher` takes: the teacher's parameters with its file's values
/// ([`Teacher::file_parameters`]: its own tensors where they hold them exactly, else fp32 on the
/// CPU; copying casts them to the student's kind and device) and, for a factorised head (`head_rank`), the first training inputs
/// of `train` (on `device`) to fit it on; `None` when `spec` does not ask for them. A teacher
/// vocabulary padded past the tokenizer's (`teacher.vocab`) gives its token tables' shared rows.
///
/// # Errors
/// [`DistillError::Teacher`] when the teacher cannot be loaded again in fp32.
pub fn teacher_weights(
    spec: &Config,
    teacher: &Teacher,
    train: &Dataset,
    device: Device,
) -> Result<Option<TeacherWeights>> {
    if spec.student.init_from_teacher.is_empty() {
        return Ok(None);
    }
    let params = crate::inputs::vocab_check::shared_vocab_tables(teacher.file_parameters()?, teacher.padded_vocab);
    let factorised = spec.student.transformer.as_ref().is_some_and(|t| t.head_rank.is_some());
    let sample = factorised.then(|| {
        let rows = (train.len() as i64).min(head_fit::HEAD_FIT_WINDOWS);
        train.batch(&Tensor::arange(rows, (tch::Kind::Int64, device))).input
    });
    Ok(Some(TeacherWeights { params, sample }))
}

/// Seeds libtorch, builds the student of `spec` (read from `cfg_path`) and applies `init`: the
/// teacher's weights (returning what was copied), then `student.init`.
///
/// # Errors
/// [`DistillError::Config`] naming `cfg_path` for a student that cannot be built or an `init`
/// that does not load; [`DistillError::Usage`] for teacher weights that do not fit the student.
pub fn build_student_from(
    spec: &Config,
    init: StudentInit,
    cfg_path: &Path,
    device: Device,
) -> Result<(VarStore, Student, Option<TeacherInit>)> {
    tch::manual_seed(spec.train.seed as i64);
    let mut vs = VarStore::new(device);
    let student = Student::new(&vs.root(), spec)?;
    let from_teacher = match init.teacher {
        Some(weights) => Some(start_from_teacher(&vs, &student, spec, weights)?),
        None => None,
    };
    if let Some(path) = init.file {
        let unreadable = |why: String| {
            DistillError::config(
                cfg_path,
                format!(
                    "student.init = {}: {why}: point it at a .safetensors file of this student's variables, e.g. a run's \
                     student.safetensors ({})",
                    path.display(),
                    crate::inputs::data::PATHS_RULE
                ),
            )
        };
        match std::fs::metadata(path) {
            Err(e) => return Err(unreadable(format!("cannot read ({e})"))),
            Ok(m) if m.is_dir() => return Err(unreadable("a folder, not a file".into())),
            Ok(_) => {}
        }
        vs.load(path).map_err(|e| crate::student::init_error(cfg_path, path, &e))?;
    }
    Ok((vs, student, from_teacher))
}

/// Copies the teacher's weights into the student, then fits a factorised head to the teacher's.
fn start_from_teacher(
    vs: &VarStore,
    student: &Student,
    spec: &Config,
    weights: &TeacherWeights,
) -> Result<TeacherInit> {
    let mut init = init_from_teacher(vs, spec, &weights.params)?;
    // a teacher without an LM head (not a Llama) leaves the factors random, as a whole head
    // is left, and `kept` says so
    if let (Some(sample), Some(head)) = (&weights.sample, llama_init::teacher_head(&weights.params, &init.prefix)) {
        init.head_fit = Some(head_fit::fit_head(student, vs, head, sample, unplanned_pass_rows(spec))?);
        init.kept.retain(|name| !name.starts_with("head."));
    }
    Ok(init)
}

/// [`build_student_from`] with `student.init` alone (`init`, resolved), for students that take
/// nothing from the teacher.
///
/// # Errors
/// As [`build_student_from`].
pub fn build_student(
    spec: &Config,
    init: Option<&Path>,
    cfg_path: &Path,
    device: Device,
) -> Result<(VarStore, Student)> {
    let init = StudentInit { teacher: None, file: init };
    build_student_from(spec, init, cfg_path, device).map(|(vs, student, _)| (vs, student))
}

/// Rows of a no-grad pass that runs outside the batches the plan prices (the preflight's probe of
/// the teacher and the student, the factorised head's fit): at most 8, and no more than the
/// micro-batch and the evaluation batch the cfg sets, so those passes fit within the plan (a
/// causal LM's teacher returns fp32 logits [rows, S, vocab]: 8 windows of 1,024 tokens over
/// 32,000 tokens held 4.5 GB against a plan of 278 MiB at batch 1). At least 2 where the
/// evaluation batch allows: the eval-mode check compares a batch with its first half.
pub fn unplanned_pass_rows(spec: &Config) -> i64 {
    let micro_batch = match spec.train.batch_size {
        BatchSize::Fixed(b) => b.max(2),
        BatchSize::Auto => u64::MAX,
    };
    8u64.min(micro_batch).min(spec.train.eval_batch_size).max(1) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_outside_the_plan_are_no_larger_than_the_batches_it_prices() {
        let rows = |train: &str| {
            let text = format!(
                "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [4]\n[train]\n{train}\n"
            );
            unplanned_pass_rows(&Config::from_toml_str(&text).unwrap())
        };
        assert_eq!(rows("batch_size = 64\neval_batch_size = 256"), 8);
        assert_eq!(rows("batch_size = 1\neval_batch_size = 256"), 2);
        assert_eq!(rows("batch_size = 1\neval_batch_size = 1"), 1);
        assert_eq!(rows("batch_size = \"auto\"\neval_batch_size = 4"), 4);
        assert_eq!(rows("batch_size = 64\neval_batch_size = 3"), 3);
    }
}
