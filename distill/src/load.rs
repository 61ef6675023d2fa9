//! The run's inputs on its device, checked before any output exists: the train and held-out
//! sets (a test file, or a split of the train file; each normalises its own batches) and the teacher, with
//! the preflight checks on a probe batch (teacher output shape, finite, in eval mode; a student
//! that is not the teacher).
use std::path::Path;

use estimator_wasm::schema::Config;
use estimator_wasm::DatasetSize;
use tch::{Device, Tensor};

use crate::config::{HeldOut, RunConfig};
use crate::data::{Dataset, TextLayout, TextTokenizer};
use crate::error::Result;
use crate::memory_plan::{unplanned_pass_rows, LoadedSizes, TextLengths};
use crate::phase_times::Phase;
use crate::preflight::{check_eval_mode, check_not_identical, check_same_range, check_teacher_shape, TeacherOutput};
use crate::student::{StudentInit, TeacherInit, TeacherWeights};
use crate::student_build::{build_student_from, teacher_weights};
use crate::teacher::Teacher;
use crate::vocab_check::{phantom_tokens_warning, tokenizer_warning, VocabSizes};

/// The datasets on the device and the teacher.
pub struct Loaded {
    pub train: Dataset,
    pub test: Dataset,
    pub teacher: Teacher,
    /// The teacher's fp32 parameters on the CPU, for `student.init_from_teacher`.
    pub teacher_weights: Option<TeacherWeights>,
    /// What a fresh student takes from the teacher (`None` without `init_from_teacher`).
    pub teacher_init: Option<TeacherInit>,
    /// A Hugging Face teacher's layers, for the memory plan ([`crate::hf::plan::layers`]).
    pub teacher_layers: Option<Vec<estimator_wasm::schema::arch::Layer>>,
    /// Warnings about the inputs that do not stop the run (a tokenizer that may not be the
    /// teacher's), for the log.
    pub warnings: Vec<String>,
}

impl Loaded {
    /// Loads the data files and the teacher at `teacher` that `cfg` names onto `device`, and
    /// checks them on a probe batch of up to 8 train samples ([`probe_rows`]).
    ///
    /// # Errors
    /// [`crate::DistillError::Data`] or [`crate::DistillError::Teacher`] naming the file at
    /// fault and the fix; [`crate::DistillError::Config`] for a student that cannot be built.
    pub fn load(cfg: &RunConfig, teacher: &Path, device: Device) -> Result<Loaded> {
        let spec = &cfg.spec;
        crate::phase_times::switch(Phase::Data);
        let vocab = spec.student.transformer.as_ref().map(|t| t.vocab);
        let tokenizer = cfg.data.tokenizer.as_deref();
        let layout = if spec.student.is_language_model() { TextLayout::Packed } else { TextLayout::Sentences };
        let window = spec.data.input_shape[0];
        let tokenizer = tokenizer.map(|t| TextTokenizer::load(t, window, vocab, layout)).transpose()?;
        let train = Dataset::load(&cfg.data.train, &spec.data, tokenizer.as_ref())?;
        let (train, test) = match &cfg.data.held_out {
            HeldOut::File(path) => {
                let test = Dataset::load(path, &spec.data, tokenizer.as_ref())?;
                check_same_range(&train, &test)?;
                (train, test)
            }
            // windows of one stream share text across their edges (a window's last label is the
            // next one's first token): a random split would test on what training saw
            HeldOut::Split(_) if spec.student.is_language_model() => {
                return Err(crate::DistillError::config(
                    &cfg.path,
                    "data.holdout: a language model's windows are cut from one stream, so a random split leaks text into the test set: give data.test, a held-out .txt",
                ))
            }
            HeldOut::Split(fraction) => train.split(*fraction, spec.train.seed)?,
        };
        let (train, test) = (train.to_device(device), test.to_device(device));
        crate::phase_times::switch(Phase::TeacherLoad);
        let padded = spec.teacher.padded_vocab(spec.data.classes);
        let teacher = Teacher::load(teacher, spec.teacher.output.clone(), spec.teacher.precision, device)?
            .counted_or(spec.teacher.params)?
            .with_padded_vocab(padded)
            .with_hidden_output(spec.teacher.hidden_output.clone());
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
        let expected = match crate::objective::from_spec(&spec.kd).agreement() {
            _ if spec.student.is_language_model() => TeacherOutput::TokenLogits { seq: probe.input.x.size()[1], vocab },
            crate::objective::Agreement::Cosine => TeacherOutput::Embedding,
            crate::objective::Agreement::Top1 => TeacherOutput::Logits,
        };
        check_teacher_shape(&teacher, &probe_logits, probe.input.rows(), spec.data.classes, expected)?;
        teacher.check_finite(&probe_logits, &probe, &train)?;
        check_eval_mode(&teacher, &probe.input, &probe_logits)?;
        crate::hidden_step::preflight(spec, &teacher, &probe.input)?;
        let teacher_weights = teacher_weights(spec, &teacher, &train, device)?;
        let init = StudentInit { teacher: teacher_weights.as_ref(), file: cfg.init.as_deref() };
        let (_, student, teacher_init) = build_student_from(spec, init, &cfg.path, device)?;
        check_not_identical(&teacher, &probe_logits, &student, &probe.input)?;
        let teacher_layers = match teacher.hf_config() {
            Some(c) => Some(crate::hf::plan::layers(&teacher.path, c, spec)?),
            None => None,
        };
        crate::phase_times::switch(Phase::Other);
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
