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
mod tests {
    //! [`FormField::of_cfg_key`] against every key validation can name, collected from the schema's
    //! sources, and [`FormField::key`] against the fields' serde names.
    use super::FormField::{self, *};

    /// Every key an error of validation names (validate.rs, and arch.rs, teacher_presets.rs that it
    /// calls), plus the estimator's own, with the field that marks it (`None`: the whole form).
    const KEYS: &[(&str, Option<FormField>)] = &[
        ("data.input_shape", Some(Input)),
        ("data.classes", None),
        ("data.scale", None),
        ("data.mean", None),
        ("data.std", None),
        ("data.holdout", None),
        ("data.tokenizer", None),
        ("data.bucket_by_length", None),
        ("student.channels", Some(Depth)),
        ("student.hidden", Some(Width)),
        ("student.kernel", None),
        ("student.dropout", None),
        ("student.norm", None),
        ("student.transformer", Some(Width)),
        ("student.transformer.layers", Some(Depth)),
        ("student.transformer.vocab", None),
        ("student.transformer.d_model", Some(Width)),
        ("student.transformer.heads", Some(Width)),
        ("student.transformer.kv_heads", Some(Width)),
        ("student.transformer.mlp_width", Some(Width)),
        ("student.transformer.max_positions", Some(Input)),
        ("student.transformer.attention_dropout", None),
        ("student.transformer.tie_embeddings", None),
        ("student.transformer.head_rank", None),
        ("student.transformer.norm_eps", None),
        ("student.transformer.rope_theta", None),
        ("student.transformer.token_types", None),
        ("student.transformer.normalize", None),
        ("student.init_from_teacher", None),
        ("teacher", Some(Teacher)),
        ("teacher.preset", Some(Input)),
        ("teacher.params", None),
        ("teacher.buffers", None),
        ("teacher.arch.channels", None),
        ("teacher.arch.hidden", None),
        ("teacher.arch.kernel", None),
        ("teacher.arch.dropout", None),
        ("teacher.arch.init_from_teacher", None),
        ("teacher.arch.transformer.norm_eps", None),
        ("teacher.arch.transformer.rope_theta", None),
        ("teacher.arch.transformer.token_types", None),
        ("teacher.arch.transformer.normalize", None),
        ("teacher.arch.norm", None),
        ("teacher.arch.transformer", None),
        ("teacher.arch.transformer.layers", None),
        ("teacher.arch.transformer.vocab", None),
        ("teacher.arch.transformer.d_model", None),
        ("teacher.arch.transformer.heads", None),
        ("teacher.arch.transformer.kv_heads", None),
        ("teacher.arch.transformer.mlp_width", None),
        ("teacher.arch.transformer.max_positions", None),
        ("teacher.arch.transformer.attention_dropout", None),
        ("teacher.arch.transformer.tie_embeddings", None),
        ("teacher.arch.transformer.head_rank", None),
        ("kd.temperature", None),
        ("kd.objective", None),
        ("kd.alpha", None),
        ("kd.beta", None),
        ("kd.divergence", None),
        ("kd.fused_head", None),
        ("kd.hidden", None),
        ("train.epochs", None),
        ("train.batch_size", Some(Batch)),
        ("train.eval_batch_size", Some(EvalBatch)),
        ("train.lr", None),
        ("train.min_lr", None),
        ("train.weight_decay", None),
        ("train.momentum", None),
        ("train.betas", None),
        ("train.eps", None),
        ("train.log_every", None),
        ("estimate.data_parallel", Some(DataParallel)),
        ("estimate.tensor_parallel", Some(Width)),
        ("estimate.pipeline_stages", None),
        ("estimate.zero_stage", Some(ZeroStage)),
        ("estimate.fragmentation", None),
        ("estimate.cuda_context_mib", None),
        ("estimate.nccl_mib", None),
        ("estimate.safety_margin", None),
        ("estimate.gpu", Some(Gpu)),
        ("estimate.target", None),
        ("prune.scope", Some(Sparsity)),
        ("prune.method", Some(Sparsity)),
        ("prune.sparsity", Some(Sparsity)),
        ("prune.initial_sparsity", Some(Sparsity)),
        ("prune.end_epoch", Some(Sparsity)),
        ("prune.every_steps", Some(Sparsity)),
        ("prune.l1", Some(Sparsity)),
    ];

    /// The string literals of `source` before its tests.
    fn literals(source: &str) -> Vec<String> {
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        let (mut out, mut chars) = (Vec::new(), code.chars());
        while let Some(c) = chars.next() {
            if c != '"' {
                continue;
            }
            let mut lit = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => lit.extend(chars.next()),
                    '"' => break,
                    c => lit.push(c),
                }
            }
            out.push(lit);
        }
        out
    }

    const VALIDATE: &str = include_str!("../schema/validate.rs");

    fn is_key(s: &str) -> bool {
        !s.is_empty() && s.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    }

    #[test]
    fn every_key_validation_names_maps_to_its_field() {
        for &(key, field) in KEYS {
            assert_eq!(FormField::of_cfg_key(key), field, "{key}");
        }
        let known = |k: &str| KEYS.iter().any(|&(key, _)| key == k || key.starts_with(&format!("{k}.")));
        // whole keys (or a prefix validation puts names under, `teacher.arch`) in every source
        let sources = [VALIDATE, include_str!("../schema/arch.rs"), include_str!("../schema/teacher_presets.rs")];
        let keys: Vec<String> =
            sources.iter().flat_map(|s| literals(s)).filter(|s| is_key(s) && s.contains('.')).collect();
        assert!(keys.len() > 40, "collected {keys:?}");
        for key in keys {
            assert!(known(&key), "validation names {key}: add it to KEYS with its form field");
        }
        // names validate.rs puts under a prefix: `student.` and `teacher.arch.`, or their `transformer.`
        for name in literals(VALIDATE).into_iter().filter(|s| is_key(s) && !s.contains('.')) {
            if name != "student" {
                for prefix in ["student", "teacher.arch"] {
                    let under = [format!("{prefix}.{name}"), format!("{prefix}.transformer.{name}")];
                    assert!(under.iter().any(|k| known(k)), "validation names {prefix}...{name}: add it to KEYS");
                }
            }
        }
    }

    #[test]
    fn an_unknown_key_marks_the_whole_form_not_a_field() {
        for key in ["student.pool", "student.transformer.rope", "train.precision", "nonsense", ""] {
            assert_eq!(FormField::of_cfg_key(key), None, "{key}");
        }
    }

    /// `key()` spells each field as serde does (the form's JSON and the page's URL query).
    #[test]
    fn keys_are_the_serde_names() {
        for f in FormField::ALL.into_iter().chain([Cfg]) {
            assert_eq!(serde_json::to_value(f).unwrap(), f.key(), "{f:?}");
            assert_eq!(FormField::from_key(f.key()), (f != Cfg).then_some(f));
        }
    }
}
