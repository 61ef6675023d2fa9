//! The form's fields (the estimator's `FormField`, keyed as in `ExplorerForm` and the URL
//! query): the text each input shows for a form, and how a text sets it. The inputs and the
//! URL query share these, so a link holds exactly what the inputs show.
use std::fmt::Debug;

use estimator_wasm::explorer::form::{MAX_GPUS, MAX_INPUT};
use estimator_wasm::explorer::{ExplorerForm, FormField};
use estimator_wasm::schema::catalogue;
use estimator_wasm::schema::limits::MAX_BATCH;
use estimator_wasm::schema::names::short;
use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::de::DeserializeOwned;

use crate::format;

/// What an input of the page does with its field: whether it is a number box, the text it
/// shows, how a text sets the form.
pub trait Input: Copy {
    /// Whether the input is a text box for a number (kept as typed while it is edited).
    fn is_number(self) -> bool;
    /// `form`'s value of this field as its input shows it.
    fn text(self, form: &ExplorerForm) -> String;
    /// Sets this field of `form` from `text`.
    ///
    /// # Errors
    /// The message to show beside the input.
    fn set(self, form: &mut ExplorerForm, text: &str) -> Result<(), String>;
}

impl Input for FormField {
    fn is_number(self) -> bool {
        matches!(
            self,
            FormField::Width
                | FormField::Depth
                | FormField::Input
                | FormField::Batch
                | FormField::EvalBatch
                | FormField::Sparsity
                | FormField::DataParallel
        )
    }

    /// `form`'s value of this field as its input shows it: a number as typed (`0.5`, `128`),
    /// an enum's snake_case name, a string as is. [`Input::set`] reads it back unchanged.
    fn text(self, form: &ExplorerForm) -> String {
        match self {
            FormField::Teacher => form.teacher.clone(),
            FormField::Family => word_of(&form.family),
            FormField::Width => format::number(form.width),
            FormField::Depth => format::number(form.depth),
            FormField::Input => form.input.to_string(),
            FormField::Batch => form.batch.to_string(),
            FormField::EvalBatch => form.eval_batch.to_string(),
            FormField::Precision => word_of(&form.precision),
            FormField::TeacherPrecision => word_of(&form.teacher_precision),
            FormField::Optimizer => word_of(&form.optimizer),
            FormField::Checkpointing => form.checkpointing.clone(),
            FormField::Sparsity => format::number(form.sparsity),
            FormField::Prune => word_of(&form.prune),
            FormField::DataParallel => form.data_parallel.to_string(),
            FormField::ZeroStage => form.zero_stage.to_string(),
            FormField::Gpu => form.gpu.clone(),
            FormField::Cfg => form.cfg.clone().unwrap_or_default(),
        }
    }

    /// Sets this field of `form` from `text` (the teacher's key as is: its defaults are
    /// `ExplorerForm::with_teacher`'s job). No cross-field check: that is `ExplorerForm::check`'s.
    ///
    /// # Errors
    /// The message to show beside the input: not a number, negative, not one of the names.
    fn set(self, form: &mut ExplorerForm, text: &str) -> Result<(), String> {
        match self {
            FormField::Teacher => form.teacher = text.to_string(),
            FormField::Family => form.family = word(text)?,
            FormField::Width => form.width = decimal(text)?,
            FormField::Depth => form.depth = decimal(text)?,
            FormField::Input => form.input = whole(text, MAX_INPUT)?,
            FormField::Batch => form.batch = whole(text, MAX_BATCH)?,
            FormField::EvalBatch => form.eval_batch = whole(text, MAX_BATCH)?,
            FormField::Precision => form.precision = word(text)?,
            FormField::TeacherPrecision => form.teacher_precision = word(text)?,
            FormField::Optimizer => form.optimizer = word(text)?,
            FormField::Checkpointing => form.checkpointing = text.to_string(),
            FormField::Sparsity => form.sparsity = decimal(text)?,
            FormField::Prune => form.prune = word(text)?,
            FormField::DataParallel => form.data_parallel = whole(text, MAX_GPUS)?,
            FormField::ZeroStage => form.zero_stage = whole(text, 3)?,
            // a known GPU by its catalogue name (`h200` -> `H200`), so its option is the one shown
            FormField::Gpu => form.gpu = catalogue::gpu(text).map_or_else(|_| text.to_string(), |g| g.name.to_string()),
            FormField::Cfg => form.cfg = Some(text.to_string()),
        }
        Ok(())
    }
}

/// The snake_case name of a unit enum value (a select's option value), as
/// `#[serde(rename_all = "snake_case")]` names it: `PureBf16` -> `pure_bf16`. Made from the
/// `Debug` name so that the page needs no serialiser (tests check it against serde's).
pub fn word_of<T: Debug>(value: &T) -> String {
    let mut word = String::new();
    for (i, c) in format!("{value:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            word.push('_');
        }
        word.push(c.to_ascii_lowercase());
    }
    word
}

/// One of an enum's snake_case names (a select's option value).
fn word<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    T::deserialize(StrDeserializer::<ValueError>::new(text)).map_err(|e| e.to_string())
}

/// A decimal number (`-0` read as 0); a message echoes at most a short prefix of the text.
fn decimal(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v + 0.0),
        _ if text.is_empty() => Err("enter a number".into()),
        _ => Err(format!("\"{}\" is not a number", short(text))),
    }
}

/// A whole number; a message gives the field's real range, 1 (0 for the ZeRO stage) to `max`,
/// and echoes at most a short prefix of the text. Values above `max` are `ExplorerForm::check`'s.
fn whole(text: &str, max: u64) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) => Ok(v),
        _ if text.is_empty() => Err("enter a whole number".into()),
        _ if text.starts_with('-') => Err("must be positive".into()),
        _ => Err(format!(
            "\"{}\" is not a whole number from {} to {}",
            short(text),
            u64::from(max != 3),
            format::grouped(max)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::schema::{Family, OptimizerKind, Precision, PruneMethod};
    use estimator_wasm::Moment;
    use serde::Serialize;

    /// serde's own name of a unit variant (the reference `word_of` must equal).
    fn serde_word<T: Serialize>(value: &T) -> String {
        serde_json::to_value(value).unwrap().as_str().unwrap().to_string()
    }

    #[test]
    fn words_are_serdes_snake_case_names() {
        let precisions =
            [Precision::Fp32, Precision::Fp16, Precision::Bf16, Precision::PureBf16, Precision::Bf16Master];
        for p in precisions {
            assert_eq!(word_of(&p), serde_word(&p));
            assert_eq!(word::<Precision>(&word_of(&p)), Ok(p));
        }
        assert_eq!(word_of(&Precision::Bf16Master), "bf16_master");
        for f in [Family::Mlp, Family::Cnn, Family::Transformer] {
            assert_eq!(word_of(&f), serde_word(&f));
        }
        for o in [OptimizerKind::Adamw, OptimizerKind::Sgd] {
            assert_eq!(word_of(&o), serde_word(&o));
        }
        for m in [PruneMethod::Magnitude, PruneMethod::Structured] {
            assert_eq!(word_of(&m), serde_word(&m));
        }
        for ph in [Moment::TeacherCache, Moment::Forward, Moment::OptimizerStep] {
            assert_eq!(word_of(&ph), serde_word(&ph));
        }
    }

    #[test]
    fn every_field_reads_back_its_own_text() {
        let form = ExplorerForm {
            width: 0.1 + 0.2, // no short decimal: the text must still be exact
            depth: 1e-7,
            sparsity: 0.9,
            precision: Precision::PureBf16,
            prune: PruneMethod::Structured,
            checkpointing: "4".into(),
            ..ExplorerForm::default()
        };
        let mut back = ExplorerForm { teacher: String::new(), gpu: String::new(), ..ExplorerForm::default() };
        for f in FormField::ALL {
            f.set(&mut back, &f.text(&form)).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        }
        assert_eq!(back, form);
        assert_eq!(FormField::Width.text(&form), "0.30000000000000004");
    }

    #[test]
    fn bad_texts_say_why() {
        let mut form = ExplorerForm::default();
        for (field, text, message) in [
            (FormField::Batch, "", "enter a whole number"),
            (FormField::Batch, "-4", "must be positive"),
            (FormField::Batch, "99999999999999999999999", "not a whole number from 1 to 1,099,511,627,776"),
            (FormField::Batch, "2.5", "\"2.5\" is not a whole number from 1 to 1,099,511,627,776"),
            (FormField::Input, "1e3", "\"1e3\" is not a whole number from 1 to 1,048,576"),
            (FormField::DataParallel, "x", "\"x\" is not a whole number from 1 to 1,048,576"),
            (FormField::ZeroStage, "x", "\"x\" is not a whole number from 0 to 3"),
            (FormField::Width, "abc", "\"abc\" is not a number"),
            (FormField::Width, "inf", "\"inf\" is not a number"),
            (FormField::Width, "", "enter a number"),
            (FormField::Precision, "fp8", "unknown variant `fp8`"),
        ] {
            let e = field.set(&mut form, text).unwrap_err();
            assert!(e.contains(message), "{field:?} {text}: {e}");
        }
        assert_eq!(form, ExplorerForm::default(), "a bad text leaves the form as it was");
        // a long text is echoed as a short prefix, never whole
        for field in [FormField::Width, FormField::Batch, FormField::Precision] {
            let e = field.set(&mut form, &"9x".repeat(10_000)).unwrap_err();
            assert!(e.contains(&format!("{}...", "9x".repeat(12))) && e.len() < 200, "{field:?}: {} chars", e.len());
        }
        FormField::Sparsity.set(&mut form, "-0").unwrap();
        assert_eq!(FormField::Sparsity.text(&form), "0", "-0 reads as 0");
        FormField::Gpu.set(&mut form, "nvidia h200").unwrap();
        assert_eq!(form.gpu, "H200", "a known GPU takes its catalogue name");
        FormField::Gpu.set(&mut form, "TPU").unwrap();
        assert_eq!(form.gpu, "TPU", "an unknown one is kept for the estimator to name");
    }
}
