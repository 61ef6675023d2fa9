//! The fields of the [`ExplorerForm`](crate::explorer::form::ExplorerForm) ([`FormField`])
//! and why a form cannot be priced ([`FormError`], naming the field to mark).
use serde::Serialize;

use crate::memory::errors::EstimateError;
use crate::schema::errors::SpecError;

/// A field of the [`ExplorerForm`], serialised (and keyed in the page's URL query) by its
/// name there: `teacher`, `teacher_precision`, `data_parallel`, ...
///
/// [`ExplorerForm`]: crate::explorer::form::ExplorerForm
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FormField {
    Teacher,
    Family,
    Width,
    Depth,
    Input,
    Batch,
    EvalBatch,
    Precision,
    TeacherPrecision,
    Optimizer,
    Checkpointing,
    Sparsity,
    Prune,
    DataParallel,
    ZeroStage,
    Gpu,
    /// The pasted cfg.toml (with `teacher = "custom"`); not one of [`FormField::ALL`].
    Cfg,
}

impl FormField {
    /// Every field the page shows as an input, in form order (the pasted cfg.toml has its own
    /// box and is not one).
    pub const ALL: [FormField; 16] = [
        FormField::Teacher,
        FormField::Family,
        FormField::Width,
        FormField::Depth,
        FormField::Input,
        FormField::Batch,
        FormField::EvalBatch,
        FormField::Precision,
        FormField::TeacherPrecision,
        FormField::Optimizer,
        FormField::Checkpointing,
        FormField::Sparsity,
        FormField::Prune,
        FormField::DataParallel,
        FormField::ZeroStage,
        FormField::Gpu,
    ];

    /// The field's name in the form (and its URL query key).
    pub const fn key(self) -> &'static str {
        match self {
            FormField::Teacher => "teacher",
            FormField::Family => "family",
            FormField::Width => "width",
            FormField::Depth => "depth",
            FormField::Input => "input",
            FormField::Batch => "batch",
            FormField::EvalBatch => "eval_batch",
            FormField::Precision => "precision",
            FormField::TeacherPrecision => "teacher_precision",
            FormField::Optimizer => "optimizer",
            FormField::Checkpointing => "checkpointing",
            FormField::Sparsity => "sparsity",
            FormField::Prune => "prune",
            FormField::DataParallel => "data_parallel",
            FormField::ZeroStage => "zero_stage",
            FormField::Gpu => "gpu",
            FormField::Cfg => "cfg",
        }
    }

    /// The input called `key` (one of [`FormField::ALL`]).
    pub fn from_key(key: &str) -> Option<FormField> {
        FormField::ALL.into_iter().find(|f| f.key() == key)
    }

    /// The form field that sets the cfg.toml key `key` (as named in estimator errors), or `None`
    /// for a key no input of the form sets (a pasted cfg.toml's own, a teacher architecture's):
    /// the message then stands for the whole form. Every key validation names is mapped
    /// deliberately (a test feeds them all).
    pub fn of_cfg_key(key: &str) -> Option<FormField> {
        if let Some(name) = key.strip_prefix("student.transformer.") {
            return match name {
                "layers" => Some(FormField::Depth),
                "max_positions" => Some(FormField::Input),
                "d_model" | "heads" | "kv_heads" | "mlp_width" => Some(FormField::Width),
                _ => None,
            };
        }
        Some(match key {
            "train.batch_size" => FormField::Batch,
            "train.eval_batch_size" => FormField::EvalBatch,
            "data.input_shape" | "teacher.preset" => FormField::Input,
            "student.channels" => FormField::Depth,
            // the width lever scales these; a transformer block too large to price names its table
            "student.hidden" | "student.transformer" | "estimate.tensor_parallel" => FormField::Width,
            "teacher" => FormField::Teacher,
            "estimate.gpu" => FormField::Gpu,
            "estimate.data_parallel" => FormField::DataParallel,
            "estimate.zero_stage" => FormField::ZeroStage,
            // every [prune] key: the form sets the method and the sparsity, the rest follow them
            k if k.starts_with("prune.") => FormField::Sparsity,
            _ => return None,
        })
    }
}

/// Why the form cannot be priced: the form field to mark (`None`: the form as a whole) and a
/// one-line message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FormError {
    pub field: Option<FormField>,
    pub message: String,
}

impl std::fmt::Display for FormError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormError {}

impl FormError {
    pub(crate) fn on(field: FormField, message: impl Into<String>) -> FormError {
        FormError { field: Some(field), message: message.into() }
    }
}

impl From<EstimateError> for FormError {
    fn from(e: EstimateError) -> FormError {
        let field = match &e {
            // too many blocks is the depth lever's doing (the width lever only widens them)
            EstimateError::Spec(SpecError::Invalid { key, message })
                if (key == "student.hidden" || key == "student.channels") && message.contains(" entries; at most ") =>
            {
                Some(FormField::Depth)
            }
            EstimateError::Spec(SpecError::Invalid { key, .. }) | EstimateError::Invalid { key, .. } => {
                FormField::of_cfg_key(key)
            }
            EstimateError::Spec(SpecError::Parse { .. }) => Some(FormField::Cfg),
            EstimateError::UnknownGpu { .. } => Some(FormField::Gpu),
            // the step's bytes grow with the micro-batch: that is the input to lower
            EstimateError::Overflow { what } if what.contains("micro-batch") => Some(FormField::Batch),
            EstimateError::Overflow { .. } => None,
        };
        FormError { field, message: e.to_string() }
    }
}

impl From<SpecError> for FormError {
    fn from(e: SpecError) -> FormError {
        EstimateError::Spec(e).into()
    }
}

#[cfg(test)]
mod tests;
