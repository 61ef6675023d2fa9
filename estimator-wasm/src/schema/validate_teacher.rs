//! Validation of `[teacher]`: its counts, its preset or architecture (read at the teacher's own
//! logit width, [`TeacherSpec::logit_data`]), a vocabulary padded past the tokenizer's
//! (`teacher.vocab`), and the attention split a student that copies its layers must share.
use crate::schema::errors::SpecError;
use crate::schema::layer_ops::Op;
use crate::schema::limits::{self, MAX_SIZE};
use crate::schema::spec::*;
use crate::schema::validate::invalid;

impl TeacherSpec {
    pub(crate) fn validate(&self, data: &DataSpec, language_model: bool) -> Result<(), SpecError> {
        if self.preset.is_some() && self.arch.is_some() {
            return invalid("teacher.preset", "give either preset or arch, not both");
        }
        if self.hf.is_some() && (self.preset.is_some() || self.arch.is_some()) {
            return invalid(
                "teacher.hf",
                "the model folder's config.json describes the teacher: remove teacher.preset and teacher.arch",
            );
        }
        check_teacher_counts(self.params.unwrap_or(1), self.buffers.unwrap_or(0))?;
        if let Some(vocab) = self.vocab {
            limits::within("teacher.vocab", vocab, 1, MAX_SIZE)?;
            if !language_model {
                return invalid(
                    "teacher.vocab",
                    "only a language model's teacher has a vocabulary to cut to the tokenizer's (student.transformer.head = \"lm\"): remove it",
                );
            }
            if vocab < data.classes {
                return invalid(
                    "teacher.vocab",
                    &format!(
                        "is {vocab}, less than data.classes = {}: it is the width of the teacher's logits, its vocabulary padded past \
                         the tokenizer's (e.g. 640 for 512 tokens); KD compares their first data.classes columns",
                        data.classes
                    ),
                );
            }
        }
        let data = self.logit_data(data);
        if let Some(name) = &self.preset {
            crate::schema::teacher_presets::preset_layers(name, &data)?;
        }
        if let Some(arch) = &self.arch {
            arch.validate_at("teacher.arch", &data)?;
        }
        Ok(())
    }
}

impl Config {
    /// A student that copies teacher layers (`student.init_from_teacher`) splits attention as the
    /// teacher that `[teacher]` describes (preset or arch) does: the same `heads`, `kv_heads` and
    /// `rope_theta`. None is in the teacher's parameters (a head split is a reshape, rotary
    /// positions a formula), so a copied layer with another split would train silently as another
    /// function. A teacher described by counts alone is taken at the student's word.
    pub(crate) fn validate_teacher_copy(&self) -> Result<(), SpecError> {
        let Some(student) = self.student.transformer.as_ref().filter(|_| !self.student.init_from_teacher.is_empty())
        else {
            return Ok(());
        };
        let data = self.teacher.logit_data(&self.data);
        let (layers, described) = match (&self.teacher.preset, &self.teacher.arch) {
            (Some(name), _) => {
                (crate::schema::teacher_presets::preset_layers(name, &data)?, format!("the {name} teacher"))
            }
            (None, Some(arch)) => (crate::schema::arch::layers(arch, &data)?, "teacher.arch".to_string()),
            (None, None) => return Ok(()),
        };
        let Some(teacher) = layers.iter().find_map(|l| match &l.op {
            Op::SelfAttention(a) => Some(a),
            _ => None,
        }) else {
            return Ok(());
        };
        let theta = |t: Option<f64>| t.map_or("none (learned positions)".to_string(), |t| t.to_string());
        for (key, mine, theirs) in [
            ("heads", student.heads.to_string(), teacher.heads.to_string()),
            ("kv_heads", student.kv_heads().to_string(), teacher.kv_heads.to_string()),
            ("rope_theta", theta(student.rope_theta), theta(teacher.rope_theta)),
        ] {
            if mine != theirs {
                return invalid(
                    &format!("student.transformer.{key}"),
                    &format!("is {mine}, but {described} has {theirs}, and a layer copied by student.init_from_teacher splits its attention as the teacher's does: set {key} to the teacher's"),
                );
            }
        }
        Ok(())
    }
}

/// `teacher.params` and `teacher.buffers` (or the counts a caller passes): 1 to 2^50
/// parameters (a thousand times the largest published model; their bytes then fit 64 bits)
/// and at most 2^50 buffers.
///
/// # Errors
/// [`SpecError::Invalid`] on `teacher.params` or `teacher.buffers` otherwise.
pub fn check_teacher_counts(params: u64, buffers: u64) -> Result<(), SpecError> {
    limits::within("teacher.params", params, 1, 1 << 50)?;
    limits::within("teacher.buffers", buffers, 0, 1 << 50)
}
