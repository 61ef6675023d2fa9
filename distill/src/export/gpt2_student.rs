//! A decoder student as Hugging Face's `GPT2LMHeadModel` (transformers' `modeling_gpt2.py`):
//! which students are one, their `config.json`, and their tensors under GPT-2's names.
//!
//! A transformer student is a GPT-2 when it computes what `GPT2LMHeadModel` computes: a
//! language-model head (`head = "lm"`) over `data.classes = vocab` tokens, pre-norm LayerNorm
//! blocks, a standard feed-forward, biases on every projection (`student.transformer.bias`), a
//! learned position table (`max_positions`) and nothing else added to the token embedding, one
//! key/value head per head, the head tied to the token embedding (GPT-2's `lm_head` has no bias,
//! a biased student's untied head has one), and a `student.activation` that transformers and
//! distill's GPT-2 reader name alike (`activation_function`: `gelu`, the exact erf GELU, as
//! distill computes it, not GPT-2's default `gelu_new`, the tanh approximation; or `relu`).
//!
//! Names (student, `layer_ops.rs`, to GPT-2's, the table [`crate::inputs::hf::gpt2`] reads), for
//! student layer `i` (1-based), under `transformer.`: `embed.tokens.weight` -> `wte.weight`;
//! `embed.positions.weight` -> `wpe.weight`; `blk{i}_attn.norm` -> `h.{i-1}.ln_1`;
//! `blk{i}_attn.qkv` [3d, d] -> `attn.c_attn` [d, 3d]; `blk{i}_attn.proj` -> `attn.c_proj`;
//! `blk{i}_mlp.norm` -> `ln_2`; `blk{i}_mlp.fc1` [F, d] -> `mlp.c_fc` [d, F]; `blk{i}_mlp.fc2`
//! [d, F] -> `mlp.c_proj` [F, d]; `final_norm` -> `ln_f` (weights and biases alike). GPT-2's
//! projections are `Conv1D`s, whose weight is the transpose of the student's `nn.Linear` one;
//! biases are as they are. The tied head is not stored, as `save_pretrained` does.
use estimator_wasm::schema::{Activation, Config, NormPosition, TransformerSpec};
use serde_json::{json, Map, Value};
use tch::Tensor;

use super::hf_tensors::{classic_blocks, fp32, no_equivalent, transformer};
use crate::inputs::hf::gpt2::{layer, ATTN_PROJ, C_ATTN, C_FC, LN_1, LN_2, LN_F, MLP_PROJ, ROOT, WPE, WTE};

/// The architecture written into `config.json`.
pub const ARCHITECTURE: &str = "GPT2LMHeadModel";

/// The transformer table of a language-model student (`head = "lm"`) when it is a GPT-2.
///
/// # Errors
/// One line saying which key of the student has no GPT-2 equivalent, for `report.json`.
pub fn gpt2_spec(spec: &Config) -> Result<&TransformerSpec, String> {
    let t = transformer(spec)?;
    let no = |what: &str| Err(no_equivalent(what, ARCHITECTURE));
    if t.norm_position != NormPosition::Pre {
        return no("a post-norm decoder (student.transformer.norm_position = \"post\")");
    }
    classic_blocks(t, "GPT-2", ARCHITECTURE)?;
    if t.max_positions == 0 {
        return no("a decoder without a learned position table (student.transformer.max_positions = 0)");
    }
    if t.token_types > 0 {
        return no("a token-type embedding (student.transformer.token_types)");
    }
    if let Some(rank) = t.head_rank {
        return no(&format!("a factorised LM head (student.transformer.head_rank = {rank})"));
    }
    if !t.tie_embeddings {
        return no(
            "an untied LM head with a bias (student.transformer.tie_embeddings = false; GPT-2's lm_head has none)",
        );
    }
    if !matches!(spec.student.activation, Activation::Gelu | Activation::Relu) {
        return no(&format!(
            "student.activation = \"{}\" (GPT-2 folders are written with gelu or relu)",
            spec.student.activation.name()
        ));
    }
    if spec.data.classes != t.vocab {
        return no(&format!(
            "an LM head of data.classes = {} rows over a token embedding of vocab = {}",
            spec.data.classes, t.vocab
        ));
    }
    Ok(t)
}

/// `config.json` of the GPT-2 student `t` (from [`gpt2_spec`]) with activation `activation`
/// (transformers' name, `student.activation`'s), dropout `dropout` (`student.dropout`: GPT-2's
/// residual and embedding dropout) and the tokenizer's special ids `tokens` (`bos_token_id`,
/// `eos_token_id`, `pad_token_id` where known; GPT2Config's own defaults, 50256, are replaced by
/// null where not, as they may lie past the vocabulary). `n_positions` is the student's position
/// table.
pub fn config_json(t: &TransformerSpec, activation: &str, dropout: f64, tokens: &Map<String, Value>) -> Value {
    let mut config = json!({
        "architectures": [ARCHITECTURE],
        "model_type": "gpt2",
        "vocab_size": t.vocab,
        "n_embd": t.d_model,
        "n_layer": t.layers,
        "n_head": t.heads,
        "n_inner": t.mlp_width(),
        "n_positions": t.max_positions,
        "activation_function": activation,
        "layer_norm_epsilon": t.norm_eps,
        "resid_pdrop": dropout,
        "embd_pdrop": dropout,
        "attn_pdrop": t.attention_dropout,
        "scale_attn_weights": true,
        "scale_attn_by_inverse_layer_idx": false,
        "reorder_and_upcast_attn": false,
        "tie_word_embeddings": true,
        "initializer_range": 0.02,
        "use_cache": true,
        "torch_dtype": "float32",
        "bos_token_id": null,
        "eos_token_id": null,
    });
    if let Some(c) = config.as_object_mut() {
        c.extend(tokens.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    config
}

/// The student's tensors `named` (its `student.safetensors`, by student name) under GPT-2's
/// names, fp32, in name order; projection weights transposed to `Conv1D`'s [in, out], the tied
/// head left out.
///
/// # Errors
/// The student name that is missing, or a projection weight that is not a matrix.
pub fn gpt2_tensors(t: &TransformerSpec, named: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, String> {
    let get = |name: &str| fp32(named, name);
    let conv1d = |name: &str| {
        let w = get(name)?;
        match w.dim() {
            2 => Ok(w.tr().contiguous()),
            _ => Err(format!("{name} has shape {:?}, not a matrix", w.size())),
        }
    };
    let mut out = vec![
        (format!("{ROOT}{WTE}.weight"), get("embed.tokens.weight")?),
        (format!("{ROOT}{WPE}.weight"), get("embed.positions.weight")?),
    ];
    for i in 1..=t.layers {
        let (attn, mlp, to) = (format!("blk{i}_attn"), format!("blk{i}_mlp"), layer(ROOT, i as i64 - 1));
        for (from, module) in [
            (format!("{attn}.qkv"), C_ATTN),
            (format!("{attn}.proj"), ATTN_PROJ),
            (format!("{mlp}.fc1"), C_FC),
            (format!("{mlp}.fc2"), MLP_PROJ),
        ] {
            out.push((format!("{to}.{module}.weight"), conv1d(&format!("{from}.weight"))?));
            out.push((format!("{to}.{module}.bias"), get(&format!("{from}.bias"))?));
        }
        for (from, module) in [(&attn, LN_1), (&mlp, LN_2)] {
            for leaf in ["weight", "bias"] {
                out.push((format!("{to}.{module}.{leaf}"), get(&format!("{from}.norm.{leaf}"))?));
            }
        }
    }
    for leaf in ["weight", "bias"] {
        out.push((format!("{ROOT}{LN_F}.{leaf}"), get(&format!("final_norm.{leaf}"))?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::hf_tensors::tests::ramp;
    use super::*;

    fn spec(edits: &[(&str, &str)]) -> Config {
        super::super::hf_tensors::tests::spec("explorer-gpt2.toml", edits)
    }

    #[test]
    fn the_explorer_gpt2_student_is_a_gpt2_and_its_config_says_so() {
        let s = spec(&[]);
        let t = gpt2_spec(&s).unwrap();
        let mut tokens = Map::new();
        tokens.insert("eos_token_id".into(), json!(50256));
        let c = config_json(t, s.student.activation.name(), s.student.dropout, &tokens);
        let want = [
            ("architectures", json!(["GPT2LMHeadModel"])),
            ("model_type", json!("gpt2")),
            ("vocab_size", json!(50257)),
            ("n_embd", json!(64)),
            ("n_layer", json!(1)),
            ("n_head", json!(1)),
            ("n_inner", json!(256)),
            ("n_positions", json!(1024)),
            ("activation_function", json!("gelu")),
            ("layer_norm_epsilon", json!(1e-5)),
            ("resid_pdrop", json!(0.1)),
            ("tie_word_embeddings", json!(true)),
            ("eos_token_id", json!(50256)),
            ("bos_token_id", Value::Null),
        ];
        for (key, value) in want {
            assert_eq!(c[key], value, "{key}");
        }
        // distill reads back what it writes, as a teacher folder: the exact GELU, 1024 positions
        let back = crate::inputs::hf::gpt2::Gpt2Config::parse(c.as_object().unwrap()).unwrap();
        let act = crate::inputs::hf::layers::Act::from_name("gelu").unwrap();
        assert_eq!((back.inner, back.positions, back.act, back.tied), (256, 1024, act, true));
    }

    #[test]
    fn students_without_a_gpt2_equivalent_are_named() {
        let cases: [(&[(&str, &str)], &str); 4] = [
            (
                &[("tie_embeddings = true", "tie_embeddings = false")],
                "an untied LM head with a bias (student.transformer.tie_embeddings = false; GPT-2's lm_head has none): Hugging Face's GPT2LMHeadModel has no equivalent",
            ),
            (
                &[("max_positions = 1024", "max_positions = 0")],
                "a decoder without a learned position table (student.transformer.max_positions = 0): Hugging Face's GPT2LMHeadModel has no equivalent",
            ),
            (
                &[("activation = \"gelu\"", "activation = \"silu\"")],
                "student.activation = \"silu\" (GPT-2 folders are written with gelu or relu): Hugging Face's GPT2LMHeadModel has no equivalent",
            ),
            (
                &[("bias = true", "bias = false")],
                "projections without biases (student.transformer.bias = false): Hugging Face's GPT2LMHeadModel has no equivalent",
            ),
        ];
        for (edits, want) in cases {
            assert_eq!(gpt2_spec(&spec(edits)).unwrap_err(), want);
        }
        assert!(gpt2_spec(&spec(&[("norm = \"layer\"", "norm = \"rms\"")])).unwrap_err().starts_with("RMSNorm"));
    }

    #[test]
    fn projections_are_transposed_to_conv1d_and_norms_keep_their_biases() {
        let s = spec(&[
            ("vocab = 50257", "vocab = 16"),
            ("classes = 50257", "classes = 16"),
            ("max_positions = 1024", "max_positions = 64"),
        ]);
        let t = gpt2_spec(&s).unwrap();
        let named: Vec<(String, Tensor)> = [
            ("embed.tokens.weight", vec![16, 64]),
            ("embed.positions.weight", vec![64, 64]),
            ("blk1_attn.norm.weight", vec![64]),
            ("blk1_attn.norm.bias", vec![64]),
            ("blk1_attn.qkv.weight", vec![192, 64]),
            ("blk1_attn.qkv.bias", vec![192]),
            ("blk1_attn.proj.weight", vec![64, 64]),
            ("blk1_attn.proj.bias", vec![64]),
            ("blk1_mlp.norm.weight", vec![64]),
            ("blk1_mlp.norm.bias", vec![64]),
            ("blk1_mlp.fc1.weight", vec![256, 64]),
            ("blk1_mlp.fc1.bias", vec![256]),
            ("blk1_mlp.fc2.weight", vec![64, 256]),
            ("blk1_mlp.fc2.bias", vec![64]),
            ("final_norm.weight", vec![64]),
            ("final_norm.bias", vec![64]),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), ramp(&s)))
        .collect();
        let out = gpt2_tensors(t, &named).unwrap();
        let shapes: Vec<(&str, Vec<i64>)> = out.iter().map(|(n, t)| (n.as_str(), t.size())).collect();
        let l = "transformer.h.0";
        let want = [
            (format!("{l}.attn.c_attn.bias"), vec![192]),
            (format!("{l}.attn.c_attn.weight"), vec![64, 192]),
            (format!("{l}.attn.c_proj.bias"), vec![64]),
            (format!("{l}.attn.c_proj.weight"), vec![64, 64]),
            (format!("{l}.ln_1.bias"), vec![64]),
            (format!("{l}.ln_1.weight"), vec![64]),
            (format!("{l}.ln_2.bias"), vec![64]),
            (format!("{l}.ln_2.weight"), vec![64]),
            (format!("{l}.mlp.c_fc.bias"), vec![256]),
            (format!("{l}.mlp.c_fc.weight"), vec![64, 256]),
            (format!("{l}.mlp.c_proj.bias"), vec![64]),
            (format!("{l}.mlp.c_proj.weight"), vec![256, 64]),
            ("transformer.ln_f.bias".to_string(), vec![64]),
            ("transformer.ln_f.weight".to_string(), vec![64]),
            ("transformer.wpe.weight".to_string(), vec![64, 64]),
            ("transformer.wte.weight".to_string(), vec![16, 64]),
        ];
        let want: Vec<(&str, Vec<i64>)> = want.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        assert_eq!(shapes, want);
        let get = |name: &str| out.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
        // c_attn[j, r] is qkv[r, j]: row 0 of c_attn runs down qkv's column 0 (0, 64, 128, ...)
        let c_attn = get(&format!("{l}.attn.c_attn.weight"));
        assert_eq!((c_attn.double_value(&[0, 1]), c_attn.double_value(&[1, 0])), (64.0, 1.0));
        // c_fc[2, 3] is fc1[3, 2] = 3 * 64 + 2; mlp.c_proj[5, 1] is fc2[1, 5] = 256 + 5
        assert_eq!(get(&format!("{l}.mlp.c_fc.weight")).double_value(&[2, 3]), 194.0);
        assert_eq!(get(&format!("{l}.mlp.c_proj.weight")).double_value(&[5, 1]), 261.0);
        assert_eq!(get(&format!("{l}.ln_2.bias")).double_value(&[7]), 7.0);
        let mut named = named;
        named.retain(|(n, _)| n != "blk1_mlp.norm.bias");
        assert_eq!(gpt2_tensors(t, &named).unwrap_err(), "the student has no tensor \"blk1_mlp.norm.bias\"");
    }
}
