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

const VALIDATE: &str = include_str!("../../schema/validate.rs");

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
    let sources = [VALIDATE, include_str!("../../schema/arch.rs"), include_str!("../../schema/teacher_presets.rs")];
    let keys: Vec<String> = sources.iter().flat_map(|s| literals(s)).filter(|s| is_key(s) && s.contains('.')).collect();
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
