//! A sentence-encoder student as Hugging Face's `BertModel` (transformers' `modeling_bert.py`)
//! followed by sentence-transformers' modules (`modules.json`: the transformer, `1_Pooling`,
//! a `2_Dense` projection when the student has a `head`, `Normalize` when it normalises), the
//! layout of all-MiniLM-L6-v2's folder.
//!
//! A transformer student is a BERT when it computes what that stack computes: an embedding head
//! (`head = "embedding"`), post-norm LayerNorm blocks with biases, a standard feed-forward whose
//! `student.activation` transformers names alike (`hidden_act`: gelu is the exact, erf one in
//! both), one key/value head per head, no rotary positions. A student without a position or
//! token-type table gets a table of zeros (of the training window's rows, or one row), which adds
//! nothing, as the student adds nothing.
//!
//! Names (student, `layer_ops.rs`, to BERT's), for student layer `i` (1-based):
//! `embed.{tokens, positions, token_types}.weight` ->
//! `embeddings.{word, position, token_type}_embeddings.weight`; `embed_norm` ->
//! `embeddings.LayerNorm`; `blk{i}_attn.qkv` [3d, d] split by rows into
//! `encoder.layer.{i-1}.attention.self.{query, key, value}`; `blk{i}_attn.proj` ->
//! `attention.output.dense`; `blk{i}_attn.norm` -> `attention.output.LayerNorm`;
//! `blk{i}_mlp.fc1` -> `intermediate.dense`; `blk{i}_mlp.fc2` -> `output.dense`;
//! `blk{i}_mlp.norm` -> `output.LayerNorm` (weights and biases alike); the projection `head` ->
//! `2_Dense/model.safetensors` as `linear.{weight, bias}`. BertModel's pooler (a tanh layer on
//! the first token) is not part of a sentence embedding: the folder has none, and transformers
//! initialises it when it loads the folder, unused.
use estimator_wasm::schema::{Config, NormPosition, Pooling, TransformerSpec};
use serde_json::{json, Value};
use tch::{Kind, Tensor};

use super::hf_tensors::{classic_blocks, fp32, no_equivalent, split_rows, transformer};

/// The architecture written into `config.json`.
pub const ARCHITECTURE: &str = "BertModel";

/// The transformer table of an embedding student (`head = "embedding"`) when it is a BERT.
///
/// # Errors
/// One line saying which key of the student has no BERT equivalent, for `report.json`.
pub fn bert_spec(spec: &Config) -> Result<&TransformerSpec, String> {
    let t = transformer(spec)?;
    let no = |what: &str| Err(no_equivalent(what, ARCHITECTURE));
    if t.norm_position != NormPosition::Post {
        return no("a pre-norm encoder (student.transformer.norm_position = \"pre\"; BERT is post-norm)");
    }
    classic_blocks(t, "BERT", ARCHITECTURE)?;
    Ok(t)
}

/// `config.json` of the BERT student `t` (from [`bert_spec`]) with activation `activation`
/// (transformers' name, `student.activation`'s) trained on windows of `seq` tokens.
pub fn config_json(t: &TransformerSpec, activation: &str, dropout: f64, seq: u64) -> Value {
    json!({
        "architectures": [ARCHITECTURE],
        "model_type": "bert",
        "vocab_size": t.vocab,
        "hidden_size": t.d_model,
        "num_hidden_layers": t.layers,
        "num_attention_heads": t.heads,
        "intermediate_size": t.mlp_width(),
        "hidden_act": activation,
        "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": t.attention_dropout,
        "max_position_embeddings": positions(t, seq),
        "type_vocab_size": t.token_types.max(1),
        "layer_norm_eps": t.norm_eps,
        "position_embedding_type": "absolute",
        "initializer_range": 0.02,
        "torch_dtype": "float32",
    })
}

/// Rows of the position table: the student's, or the training window for a table of zeros.
fn positions(t: &TransformerSpec, seq: u64) -> u64 {
    if t.max_positions > 0 {
        t.max_positions
    } else {
        seq
    }
}

/// The sentence-transformers files of the student: `modules.json`, `sentence_bert_config.json`
/// and each module's `config.json`, as (path in the folder, content).
pub fn sentence_modules(spec: &Config, t: &TransformerSpec, seq: u64) -> Vec<(String, Value)> {
    let dense = spec.data.classes != t.d_model;
    let module = |idx: usize, path: &str, kind: &str| json!({"idx": idx, "name": idx.to_string(), "path": path, "type": format!("sentence_transformers.models.{kind}")});
    let mut modules = vec![module(0, "", "Transformer"), module(1, "1_Pooling", "Pooling")];
    let mut files = vec![(
        "1_Pooling/config.json".to_string(),
        json!({
            "word_embedding_dimension": t.d_model,
            "pooling_mode_cls_token": t.pooling == Pooling::Cls,
            "pooling_mode_mean_tokens": t.pooling == Pooling::Mean,
            "pooling_mode_max_tokens": false,
            "pooling_mode_mean_sqrt_len_tokens": false,
        }),
    )];
    if dense {
        modules.push(module(2, "2_Dense", "Dense"));
        files.push((
            "2_Dense/config.json".to_string(),
            json!({"in_features": t.d_model, "out_features": spec.data.classes, "bias": true,
                   "activation_function": "torch.nn.modules.linear.Identity"}),
        ));
    }
    if t.normalize {
        let idx = modules.len();
        modules.push(module(idx, &format!("{idx}_Normalize"), "Normalize"));
    }
    files.push(("modules.json".to_string(), Value::Array(modules)));
    files.push(("sentence_bert_config.json".to_string(), json!({"max_seq_length": seq, "do_lower_case": false})));
    files
}

/// Named tensors, in name order.
pub type Tensors = Vec<(String, Tensor)>;

/// The student's tensors `named` (by student name) under BERT's names, fp32, in name order,
/// and the `2_Dense` projection's (`linear.weight`, `linear.bias`; empty without a `head`).
///
/// # Errors
/// The student name that is missing, or whose rows do not split as `t` says.
pub fn bert_tensors(t: &TransformerSpec, named: &[(String, Tensor)], seq: u64) -> Result<(Tensors, Tensors), String> {
    let get = |name: &str| fp32(named, name);
    let d = t.d_model as i64;
    let zeros = |rows: u64| Tensor::zeros([rows as i64, d], (Kind::Float, tch::Device::Cpu));
    let table = |name: &str, rows: u64, fallback: u64| if rows > 0 { get(name) } else { Ok(zeros(fallback)) };
    let mut out = vec![
        ("embeddings.word_embeddings.weight".to_string(), get("embed.tokens.weight")?),
        ("embeddings.position_embeddings.weight".to_string(), table("embed.positions.weight", t.max_positions, seq)?),
        ("embeddings.token_type_embeddings.weight".to_string(), table("embed.token_types.weight", t.token_types, 1)?),
    ];
    for leaf in ["weight", "bias"] {
        out.push((format!("embeddings.LayerNorm.{leaf}"), get(&format!("embed_norm.{leaf}"))?));
        for i in 1..=t.layers {
            let (attn, mlp, to) = (format!("blk{i}_attn"), format!("blk{i}_mlp"), format!("encoder.layer.{}", i - 1));
            let qkv = split_rows(&get(&format!("{attn}.qkv.{leaf}"))?, &[d, d, d], &format!("{attn}.qkv.{leaf}"))?;
            for (part, rows) in ["query", "key", "value"].iter().zip(qkv) {
                out.push((format!("{to}.attention.self.{part}.{leaf}"), rows));
            }
            let moves = [
                ("proj", &attn, "attention.output.dense"),
                ("norm", &attn, "attention.output.LayerNorm"),
                ("fc1", &mlp, "intermediate.dense"),
                ("fc2", &mlp, "output.dense"),
                ("norm", &mlp, "output.LayerNorm"),
            ];
            for (from, block, into) in moves {
                out.push((format!("{to}.{into}.{leaf}"), get(&format!("{block}.{from}.{leaf}"))?));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    let dense = match named.iter().any(|(n, _)| n == "head.weight") {
        true => {
            vec![("linear.bias".to_string(), get("head.bias")?), ("linear.weight".to_string(), get("head.weight")?)]
        }
        false => Vec::new(),
    };
    Ok((out, dense))
}

#[cfg(test)]
mod tests {
    use super::super::hf_tensors::tests::ramp;
    use super::*;

    fn spec(edits: &[(&str, &str)]) -> Config {
        super::super::hf_tensors::tests::spec("text/text-student.toml", edits)
    }

    #[test]
    fn the_text_fixture_student_is_a_bert_with_mean_pooling_and_normalize() {
        let s = spec(&[]);
        let t = bert_spec(&s).unwrap();
        let c = config_json(t, "gelu", 0.0, 64);
        for (key, value) in [
            ("vocab_size", json!(1000)),
            ("hidden_size", json!(32)),
            ("num_hidden_layers", json!(1)),
            ("intermediate_size", json!(64)),
            ("max_position_embeddings", json!(64)),
            ("type_vocab_size", json!(2)),
            ("layer_norm_eps", json!(1e-12)),
            ("hidden_act", json!("gelu")),
        ] {
            assert_eq!(c[key], value, "{key}");
        }
        // classes = d_model: no Dense; normalize: module 2
        let files = sentence_modules(&s, t, 64);
        let modules = &files.iter().find(|(p, _)| p == "modules.json").unwrap().1;
        let paths: Vec<&str> = modules.as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["", "1_Pooling", "2_Normalize"]);
        let pooling = &files[0].1;
        assert_eq!(
            (pooling["pooling_mode_mean_tokens"].as_bool(), pooling["word_embedding_dimension"].as_u64()),
            (Some(true), Some(32))
        );
        let projected = spec(&[("classes = 32", "classes = 16")]);
        let files = sentence_modules(&projected, bert_spec(&projected).unwrap(), 64);
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["1_Pooling/config.json", "2_Dense/config.json", "modules.json", "sentence_bert_config.json"]
        );
    }

    #[test]
    fn encoders_without_a_bert_equivalent_are_named() {
        let pre = spec(&[("norm_position = \"post\"", "norm_position = \"pre\"")]);
        assert_eq!(
            bert_spec(&pre).unwrap_err(),
            "a pre-norm encoder (student.transformer.norm_position = \"pre\"; BERT is post-norm): Hugging Face's BertModel has no equivalent"
        );
        let gqa = spec(&[("heads = 4", "heads = 4\nkv_heads = 2")]);
        assert!(bert_spec(&gqa).unwrap_err().starts_with("grouped-query attention"));
    }

    #[test]
    fn missing_tables_become_zeros_and_the_fused_qkv_splits_into_thirds() {
        let s = spec(&[("max_positions = 64\ntoken_types = 2\n", "")]);
        let t = bert_spec(&s).unwrap();
        let mut named = vec![("embed.tokens.weight".to_string(), ramp(&[1000, 32]))];
        for (name, shape) in [
            ("embed_norm", vec![32]),
            ("blk1_attn.qkv", vec![96, 32]),
            ("blk1_attn.proj", vec![32, 32]),
            ("blk1_attn.norm", vec![32]),
            ("blk1_mlp.fc1", vec![64, 32]),
            ("blk1_mlp.fc2", vec![32, 64]),
            ("blk1_mlp.norm", vec![32]),
        ] {
            named.push((format!("{name}.weight"), ramp(&shape)));
            named.push((format!("{name}.bias"), ramp(&shape[..1])));
        }
        let (out, dense) = bert_tensors(t, &named, 48).unwrap();
        assert_eq!((out.len(), dense.len()), (3 + 2 + 2 * 8, 0));
        let find = |n: &str| out.iter().find(|(name, _)| name == n).unwrap().1.shallow_clone();
        let positions = find("embeddings.position_embeddings.weight");
        assert_eq!((positions.size(), positions.abs().sum(Kind::Float).double_value(&[])), (vec![48, 32], 0.0));
        assert_eq!(find("embeddings.token_type_embeddings.weight").size(), [1, 32]);
        // the key's rows are qkv's 32..64: first weight 32 * 32, first bias 32
        assert_eq!(find("encoder.layer.0.attention.self.key.weight").flatten(0, -1).double_value(&[0]), 1024.0);
        assert_eq!(find("encoder.layer.0.attention.self.value.bias").double_value(&[0]), 64.0);
        assert_eq!(find("encoder.layer.0.output.dense.weight").size(), [32, 64]);
    }
}
