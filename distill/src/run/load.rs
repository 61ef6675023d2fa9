//! The run's inputs on its device, checked before any output exists: the train and held-out
//! sets (a test file, or a split of the train file; each normalises its own batches; read and
//! tokenised on a thread while the teacher loads) and the teacher, with
//! the preflight checks on a probe batch (teacher output shape, finite, in eval mode; a student
//! that is not the teacher).
use std::path::Path;

use estimator_wasm::schema::Config;
use estimator_wasm::DatasetSize;
use tch::{Device, Tensor};

use crate::config::{HeldOutSet, WrittenCfg};
use crate::host::error::Result;
use crate::host::phase_times::Phase;
use crate::inputs::data::{Dataset, TextLayout, TextTokenizer};
use crate::inputs::teacher::Teacher;
use crate::inputs::vocab_check::{phantom_tokens_warning, tokenizer_warning, VocabSizes};
use crate::run::preflight::{
    check_eval_mode, check_not_identical, check_same_range, check_teacher_shape, TeacherOutput,
};
use crate::student::build::unplanned_pass_rows;
use crate::student::build::{build_student_from, teacher_weights};
use crate::student::{StudentInit, TeacherInit, TeacherWeights};
use crate::train::memory_plan::{LoadedSizes, TextLengths};
use crate::train::objective::Agreement;

/// The datasets on the device and the teacher.
pub struct Loaded {
    pub train: Dataset,
    pub test: Dataset,
    pub teacher: Teacher,
    /// The teacher's fp32 parameters on the CPU, for `student.init_from_teacher`.
    pub teacher_weights: Option<TeacherWeights>,
    /// What a fresh student takes from the teacher (`None` without `init_from_teacher`).
    pub teacher_init: Option<TeacherInit>,
    /// A Hugging Face teacher's layers, for the memory plan ([`crate::inputs::hf::plan::layers`]).
    pub teacher_layers: Option<Vec<estimator_wasm::schema::arch::Layer>>,
    /// Warnings about the inputs that do not stop the run (a tokenizer that may not be the
    /// teacher's), for the log.
    pub warnings: Vec<String>,
}

impl Loaded {
    /// Loads the data files and the teacher at `teacher` that `cfg` names onto `device`, and
    /// checks them on a probe batch of up to 8 train samples ([`probe_rows`]); `agreement` is the
    /// run's objective's, which says what the teacher's output must be.
    ///
    /// # Errors
    /// [`crate::DistillError::Data`] or [`crate::DistillError::Teacher`] naming the file at
    /// fault and the fix; [`crate::DistillError::Config`] for a student that cannot be built.
    pub fn load(cfg: &WrittenCfg, teacher: &Path, agreement: Agreement, device: Device) -> Result<Loaded> {
        let spec = &cfg.spec;
        crate::host::phase_times::switch(Phase::TeacherLoad);
        // The data files are read and tokenised (pure Rust: the tokenizers crate) on a thread of
        // their own while this one loads the teacher (libtorch's objects stay on the thread that
        // made them); neither waits for the other. The clock is this thread's: the teacher's
        // loading is teacher load, the wait for the data after it is data.
        let (data, loaded_teacher) = std::thread::scope(|scope| {
            let data = scope.spawn(|| read_data(cfg));
            let teacher = load_teacher(spec, teacher, device);
            crate::host::phase_times::switch(Phase::Data);
            let data = data.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (data, teacher)
        });
        // the data's mistakes first, as when the data was read before the teacher
        let (tokenizer, train, test) = data?;
        let teacher = loaded_teacher?;
        let (train, test) = (train.to_device(device), test.to_device(device));
        crate::host::phase_times::switch(Phase::TeacherLoad);
        let vocab = VocabSizes {
            classes: spec.data.classes,
            tokenizer: tokenizer.as_ref().map(|t| t.vocab_size()),
            teacher: spec.teacher.vocab,
        };
        let mut warnings: Vec<String> = match (&tokenizer, cfg.data.tokenizer.as_deref()) {
            (Some(t), Some(path)) => tokenizer_warning(t.vocab_size(), &teacher.named_parameters()?, path),
            _ => None,
        }
        .into_iter()
        .collect();
        if spec.student.is_language_model() {
            warnings.extend(phantom_tokens_warning(&vocab));
        }

        // Preflight on a probe batch: teacher output shape, finite, in eval mode; student != teacher.
        let probe = Tensor::arange(probe_rows(spec, train.len()), (tch::Kind::Int64, device));
        let probe = train.batch(&probe);
        let probe_logits = teacher.output(&probe.input)?;
        let expected = match agreement {
            _ if spec.student.is_language_model() => TeacherOutput::TokenLogits { seq: probe.input.x.size()[1], vocab },
            Agreement::Cosine => TeacherOutput::Embedding,
            Agreement::Top1 => TeacherOutput::Logits,
        };
        check_teacher_shape(&teacher, &probe_logits, probe.input.rows(), spec.data.classes, expected)?;
        teacher.check_finite(&probe_logits, &probe, &train)?;
        check_eval_mode(&teacher, &probe.input, &probe_logits)?;
        crate::train::hidden_step::preflight(spec, &teacher, &probe.input)?;
        let teacher_weights = teacher_weights(spec, &teacher, &train, device)?;
        let init = StudentInit { teacher: teacher_weights.as_ref(), file: cfg.init.as_deref() };
        let (_, student, teacher_init) = build_student_from(spec, init, &cfg.path, device)?;
        check_not_identical(&teacher, &probe_logits, &student, &probe.input)?;
        let teacher_layers = match teacher.hf_config() {
            Some(c) => Some(crate::inputs::hf::plan::layers(&teacher.path, c, spec)?),
            None => None,
        };
        crate::host::phase_times::switch(Phase::Other);
        Ok(Loaded { train, test, teacher, teacher_weights, teacher_init, teacher_layers, warnings })
    }

    /// What the memory plan needs of the loaded run: the teacher's parameter count and the
    /// datasets' sizes (samples, and bytes per sample as kept on the device).
    pub fn sizes(&self) -> LoadedSizes {
        let train = &self.train;
        let lengths = |d: &Dataset| d.text().map(|t| (0..t.len()).map(|i| t.sentence(i).len()).collect::<Vec<_>>());
        LoadedSizes {
            teacher_params: self.teacher.params,
            teacher_layers: self.teacher_layers.clone(),
            dataset: DatasetSize {
                train_samples: train.len() as u64,
                test_samples: self.test.len() as u64,
                sample_bytes: train.sample_bytes(),
            },
            text: lengths(train).map(|train| TextLengths { train, test: lengths(&self.test).unwrap_or_default() }),
        }
    }
}

/// The run's tokenizer (text data) and its train and held-out sets on the CPU, read from the
/// files `cfg` names (a held-out split of the train file where it names no test file).
///
/// # Errors
/// [`crate::DistillError::Data`] naming the file at fault; [`crate::DistillError::Config`] for
/// a language model's random split.
fn read_data(cfg: &WrittenCfg) -> Result<(Option<TextTokenizer>, Dataset, Dataset)> {
    let spec = &cfg.spec;
    let vocab = spec.student.transformer.as_ref().map(|t| t.vocab);
    let layout = if spec.student.is_language_model() { TextLayout::Packed } else { TextLayout::Sentences };
    let window = spec.data.input_shape[0];
    let tokenizer = cfg.data.tokenizer.as_deref().map(|t| TextTokenizer::load(t, window, vocab, layout)).transpose()?;
    let train = Dataset::load(&cfg.data.train, &spec.data, tokenizer.as_ref())?;
    let (train, test) = match &cfg.data.held_out {
        HeldOutSet::File(path) => {
            let test = Dataset::load(path, &spec.data, tokenizer.as_ref())?;
            check_same_range(&train, &test)?;
            (train, test)
        }
        // windows of one stream share text across their edges (a window's last label is the
        // next one's first token): a random split would test on what training saw
        HeldOutSet::Split(_) if spec.student.is_language_model() => {
            return Err(crate::DistillError::config(
                &cfg.path,
                "data.holdout: a language model's windows are cut from one stream, so a random split leaks text into the test set: give data.test, a held-out .txt",
            ))
        }
        HeldOutSet::Split(fraction) => train.split(*fraction, spec.train.seed)?,
    };
    Ok((tokenizer, train, test))
}

/// The teacher at `path` on `device`, its parameters counted (or `teacher.params`) and its
/// vocabulary padded as `spec` says.
///
/// # Errors
/// [`crate::DistillError::Teacher`] naming the file and the fix.
fn load_teacher(spec: &Config, path: &Path, device: Device) -> Result<Teacher> {
    let padded = spec.teacher.padded_vocab(spec.data.classes);
    Ok(Teacher::load(path, spec.teacher.output.clone(), spec.teacher.precision, device)?
        .counted_or(spec.teacher.params)?
        .with_padded_vocab(padded)
        .with_hidden_output(spec.teacher.hidden_output.clone()))
}

/// Rows of the preflight's probe batch: [`unplanned_pass_rows`], and no more than the train set
/// holds.
pub fn probe_rows(spec: &Config, train_samples: usize) -> i64 {
    unplanned_pass_rows(spec).min(train_samples as i64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_batch_is_no_larger_than_the_batches_the_plan_prices() {
        let spec = |train: &str| {
            Config::from_toml_str(&format!(
                "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [4]\n[train]\n{train}\n"
            ))
            .unwrap()
        };
        assert_eq!(probe_rows(&spec("batch_size = 64"), 1000), 8);
        // the eval-mode check needs two rows: as many as the evaluation's batch
        assert_eq!(probe_rows(&spec("batch_size = 1"), 1000), 2);
        assert_eq!(probe_rows(&spec("batch_size = 1\neval_batch_size = 1"), 1000), 1);
        assert_eq!(probe_rows(&spec("batch_size = 64\neval_batch_size = 2"), 1000), 2);
        assert_eq!(probe_rows(&spec("batch_size = \"auto\""), 1000), 8);
        assert_eq!(probe_rows(&spec("batch_size = 64"), 3), 3);
    }
}
