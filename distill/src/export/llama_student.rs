//! A decoder student as Hugging Face's `LlamaForCausalLM` (transformers' `modeling_llama.py`):
//! which students are one, their `config.json`, and their tensors under Llama's names.
//!
//! A transformer student is a Llama when it computes what `LlamaForCausalLM` computes: a
//! language-model head (`head = "lm"`) over `data.classes = vocab` tokens, pre-norm RMSNorm
//! blocks, a SwiGLU feed-forward, rotary positions (`rope_theta`) and nothing else added to the
//! token embedding, one output matrix (no `head_rank`), and biases only where Llama has them
//! (`attention_bias` on q, k, v, o and `mlp_bias` on the SwiGLU, which `student.transformer.bias`
//! sets together; no bias on `lm_head`, so a biased student must tie its head). Grouped-query
//! attention is `num_key_value_heads`; the head width is `d_model / heads`.
//!
//! Names (student, `layer_ops.rs`, to Llama's), for student layer `i` (1-based):
//! `embed.tokens.weight` -> `model.embed_tokens.weight`; `blk{i}_attn.norm.weight` ->
//! `model.layers.{i-1}.input_layernorm.weight`; `blk{i}_attn.qkv` [d + 2 kv, d] split by rows
//! into `self_attn.q_proj` [d, d], `k_proj` [kv, d], `v_proj` [kv, d]; `blk{i}_attn.proj` ->
//! `self_attn.o_proj`; `blk{i}_mlp.norm.weight` -> `post_attention_layernorm.weight`;
//! `blk{i}_mlp.fc1` [2F, d] split into `mlp.gate_proj` (rows 0..F) and `mlp.up_proj` (F..2F);
//! `blk{i}_mlp.fc2` -> `mlp.down_proj`; `final_norm.weight` -> `model.norm.weight`; an untied
//! `head.weight` -> `lm_head.weight` (a tied head is not stored, as `save_pretrained` does).
use estimator_wasm::schema::{Config, MlpKind, NormKind, NormPosition, TransformerSpec};
use serde_json::{json, Value};
use tch::Tensor;

use super::hf_tensors::{fp32, no_equivalent, split_rows, transformer};

/// The architecture written into `config.json`.
pub const ARCHITECTURE: &str = "LlamaForCausalLM";

/// The transformer table of a language-model student (`head = "lm"`) when it is a Llama.
///
/// # Errors
/// One line saying which key of the student has no Llama equivalent, for `report.json`.
pub fn llama_spec(spec: &Config) -> Result<&TransformerSpec, String> {
    let t = transformer(spec)?;
    let no = |what: &str| Err(no_equivalent(what, ARCHITECTURE));
    if t.norm_position != NormPosition::Pre {
        return no("a post-norm decoder (student.transformer.norm_position = \"post\")");
    }
    if t.norm != NormKind::Rms {
        return no("LayerNorm (student.transformer.norm = \"layer\"; Llama uses RMSNorm)");
    }
    if t.mlp != MlpKind::Swiglu {
        return no("a feed-forward other than SwiGLU (student.transformer.mlp = \"standard\")");
    }
    if t.max_positions > 0 || t.token_types > 0 {
        return no("a learned position or token-type embedding (student.transformer.max_positions, token_types)");
    }
    if t.rope_theta.is_none() {
        return no("a decoder without rotary positions (student.transformer.rope_theta unset)");
    }
    if let Some(rank) = t.head_rank {
        return no(&format!("a factorised LM head (student.transformer.head_rank = {rank})"));
    }
    if t.bias && !t.tie_embeddings {
        return no("a bias on an untied LM head (student.transformer.bias = true, tie_embeddings = false)");
    }
    if spec.data.classes != t.vocab {
        return no(&format!(
            "an LM head of data.classes = {} rows over a token embedding of vocab = {}",
            spec.data.classes, t.vocab
        ));
    }
    Ok(t)
}

/// `config.json` of the Llama student `t` (from [`llama_spec`]) trained on windows of `seq`
/// tokens, with the tokenizer's special ids `tokens` (`bos_token_id`, `eos_token_id`,
/// `pad_token_id` where known). The rotary base is written in both forms that transformers
/// reads (`rope_theta`, version 4; `rope_parameters`, version 5); `max_position_embeddings` is
/// the training window, the longest context the student was taught.
pub fn config_json(t: &TransformerSpec, seq: u64, tokens: &serde_json::Map<String, Value>) -> Value {
    let theta = t.rope_theta.unwrap_or(10_000.0);
    let mut config = json!({
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "vocab_size": t.vocab,
        "hidden_size": t.d_model,
        "intermediate_size": t.mlp_width(),
        "num_hidden_layers": t.layers,
        "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads(),
        "head_dim": t.d_model / t.heads.max(1),
        "hidden_act": "silu",
        "max_position_embeddings": seq,
        "rms_norm_eps": t.norm_eps,
        "rope_theta": theta,
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "attention_bias": t.bias,
        "mlp_bias": t.bias,
        "attention_dropout": t.attention_dropout,
        "tie_word_embeddings": t.tie_embeddings,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": true,
        "torch_dtype": "float32",
    });
    if let Some(c) = config.as_object_mut() {
        c.extend(tokens.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    config
}

/// The student's tensors `named` (its `student.safetensors`, by student name) under Llama's
/// names, fp32, in name order; the tied head left out.
///
/// # Errors
/// The student name that is missing, or whose rows do not split as `t` says.
pub fn llama_tensors(t: &TransformerSpec, named: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, String> {
    let get = |name: &str| fp32(named, name);
    let (d, width) = (t.d_model as i64, t.mlp_width() as i64);
    let kv = d / t.heads.max(1) as i64 * t.kv_heads() as i64;
    let leaves: &[&str] = if t.bias { &["weight", "bias"] } else { &["weight"] };
    let mut out = vec![("model.embed_tokens.weight".to_string(), get("embed.tokens.weight")?)];
    for i in 1..=t.layers {
        let (attn, mlp, to) = (format!("blk{i}_attn"), format!("blk{i}_mlp"), format!("model.layers.{}", i - 1));
        out.push((format!("{to}.input_layernorm.weight"), get(&format!("{attn}.norm.weight"))?));
        out.push((format!("{to}.post_attention_layernorm.weight"), get(&format!("{mlp}.norm.weight"))?));
        for leaf in leaves {
            let qkv = split_rows(&get(&format!("{attn}.qkv.{leaf}"))?, &[d, kv, kv], &format!("{attn}.qkv.{leaf}"))?;
            for (part, rows) in ["q", "k", "v"].iter().zip(qkv) {
                out.push((format!("{to}.self_attn.{part}_proj.{leaf}"), rows));
            }
            out.push((format!("{to}.self_attn.o_proj.{leaf}"), get(&format!("{attn}.proj.{leaf}"))?));
            let fc1 = split_rows(&get(&format!("{mlp}.fc1.{leaf}"))?, &[width, width], &format!("{mlp}.fc1.{leaf}"))?;
            for (part, rows) in ["gate", "up"].iter().zip(fc1) {
                out.push((format!("{to}.mlp.{part}_proj.{leaf}"), rows));
            }
            out.push((format!("{to}.mlp.down_proj.{leaf}"), get(&format!("{mlp}.fc2.{leaf}"))?));
        }
    }
    out.push(("model.norm.weight".to_string(), get("final_norm.weight")?));
    if !t.tie_embeddings {
        out.push(("lm_head.weight".to_string(), get("head.weight")?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::hf_tensors::tests::ramp;
    use super::*;

    fn spec(edits: &[(&str, &str)]) -> Config {
        super::super::hf_tensors::tests::spec("lm/lm-student.toml", edits)
    }

    #[test]
    fn the_fixture_student_is_a_llama_and_its_config_says_so() {
        let s = spec(&[]);
        let t = llama_spec(&s).unwrap();
        let mut tokens = serde_json::Map::new();
        tokens.insert("eos_token_id".into(), json!(0));
        let c = config_json(t, 64, &tokens);
        let want = [
            ("vocab_size", json!(512)),
            ("hidden_size", json!(32)),
            ("intermediate_size", json!(64)),
            ("num_hidden_layers", json!(1)),
            ("num_attention_heads", json!(4)),
            ("num_key_value_heads", json!(2)),
            ("head_dim", json!(8)),
            ("rope_theta", json!(10000.0)),
            ("rms_norm_eps", json!(1e-5)),
            ("tie_word_embeddings", json!(true)),
            ("attention_bias", json!(false)),
            ("max_position_embeddings", json!(64)),
            ("eos_token_id", json!(0)),
            ("model_type", json!("llama")),
        ];
        for (key, value) in want {
            assert_eq!(c[key], value, "{key}");
        }
        // distill reads back what it writes, as a teacher folder
        let back = crate::inputs::hf::HfConfig::parse(&c.to_string()).unwrap();
        assert_eq!((back.hidden, back.kv_heads, back.head_dim, back.tied, back.rope_theta), (32, 2, 8, true, 1e4));
    }

    #[test]
    fn students_without_a_llama_equivalent_are_named() {
        let cases: [(&[(&str, &str)], &str); 3] = [
            (
                &[("tie_embeddings = true", "tie_embeddings = false\nhead_rank = 8")],
                "a factorised LM head (student.transformer.head_rank = 8): Hugging Face's LlamaForCausalLM has no equivalent",
            ),
            (
                &[("norm = \"rms\"", "norm = \"rms\"\nnorm_position = \"post\"")],
                "a post-norm decoder (student.transformer.norm_position = \"post\"): Hugging Face's LlamaForCausalLM has no equivalent",
            ),
            (
                &[("bias = false", "bias = true"), ("tie_embeddings = true", "tie_embeddings = false")],
                "a bias on an untied LM head (student.transformer.bias = true, tie_embeddings = false): Hugging Face's LlamaForCausalLM has no equivalent",
            ),
        ];
        for (edits, want) in cases {
            assert_eq!(llama_spec(&spec(edits)).unwrap_err(), want);
        }
        // a biased student with a tied head is a Llama with attention_bias and mlp_bias
        let biased = spec(&[("bias = false", "bias = true")]);
        assert!(llama_spec(&biased).is_ok());
        let plain = spec(&[("rope_theta = 10000.0\n", "")]);
        assert!(llama_spec(&plain).unwrap_err().starts_with("a decoder without rotary positions"));
    }

    #[test]
    fn fused_projections_split_into_llamas_rows() {
        let s = spec(&[]);
        let t = llama_spec(&s).unwrap();
        let named: Vec<(String, Tensor)> = [
            ("embed.tokens.weight", vec![512, 32]),
            ("blk1_attn.norm.weight", vec![32]),
            ("blk1_attn.qkv.weight", vec![64, 32]),
            ("blk1_attn.proj.weight", vec![32, 32]),
            ("blk1_mlp.norm.weight", vec![32]),
            ("blk1_mlp.fc1.weight", vec![128, 32]),
            ("blk1_mlp.fc2.weight", vec![32, 64]),
            ("final_norm.weight", vec![32]),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), ramp(&s)))
        .collect();
        let out = llama_tensors(t, &named).unwrap();
        let shapes: Vec<(&str, Vec<i64>)> = out.iter().map(|(n, t)| (n.as_str(), t.size())).collect();
        let l = "model.layers.0";
        let want = [
            ("model.embed_tokens.weight".to_string(), vec![512, 32]),
            (format!("{l}.input_layernorm.weight"), vec![32]),
            (format!("{l}.mlp.down_proj.weight"), vec![32, 64]),
            (format!("{l}.mlp.gate_proj.weight"), vec![64, 32]),
            (format!("{l}.mlp.up_proj.weight"), vec![64, 32]),
            (format!("{l}.post_attention_layernorm.weight"), vec![32]),
            (format!("{l}.self_attn.k_proj.weight"), vec![16, 32]),
            (format!("{l}.self_attn.o_proj.weight"), vec![32, 32]),
            (format!("{l}.self_attn.q_proj.weight"), vec![32, 32]),
            (format!("{l}.self_attn.v_proj.weight"), vec![16, 32]),
            ("model.norm.weight".to_string(), vec![32]),
        ];
        let want: Vec<(&str, Vec<i64>)> = want.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        assert_eq!(shapes, want);
        // k_proj holds qkv's rows 32..48: its first element is 32 * 32
        let first = |name: &str| out.iter().find(|(n, _)| n == name).unwrap().1.flatten(0, -1).double_value(&[0]);
        assert_eq!(first(&format!("{l}.self_attn.k_proj.weight")), 1024.0);
        assert_eq!(first(&format!("{l}.self_attn.v_proj.weight")), 48.0 * 32.0);
        assert_eq!(first(&format!("{l}.mlp.up_proj.weight")), 64.0 * 32.0);
        let mut named = named;
        named[2].1 = ramp(&[60, 32]);
        assert_eq!(
            llama_tensors(t, &named).unwrap_err(),
            "blk1_attn.qkv.weight has shape [60, 32], not 64 rows ([32, 16, 16])"
        );
    }
}
