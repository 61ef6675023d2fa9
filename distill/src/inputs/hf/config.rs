//! A Hugging Face model folder's `config.json`, for the Llama family of decoders that distill
//! builds natively ([`super::llama`]): `model_type` llama, mistral or qwen2. Both forms of the
//! rotary keys are read: `rope_theta` and `rope_scaling` (transformers 4, as the Hub's
//! checkpoints hold them) and `rope_parameters` (transformers 5).
//!
//! What the three share (transformers' `modeling_llama.py`, `modeling_mistral.py`,
//! `modeling_qwen2.py`): a token embedding, pre-norm blocks of RMSNorm, grouped-query causal
//! attention with rotary positions and a SwiGLU feed-forward, a final RMSNorm and a head that is
//! the embedding (`tie_word_embeddings`) or its own `lm_head`. What differs: biases (llama's
//! `attention_bias` on q/k/v/o and `mlp_bias`; qwen2's biases on q/k/v only; none in mistral)
//! and mistral's sliding window.
use serde_json::{Map, Value};

use super::keys::{flag, int, number, opt_int};

/// The `model_type`s of the Llama family ([`super::keys::SUPPORTED`] lists every
/// family distill builds).
pub const LLAMA_FAMILY: [&str; 3] = ["llama", "mistral", "qwen2"];

/// A decoder of the Llama family as its `config.json` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    pub model_type: String,
    pub vocab: i64,
    pub hidden: i64,
    /// The SwiGLU width (`intermediate_size`).
    pub intermediate: i64,
    pub layers: i64,
    pub heads: i64,
    pub kv_heads: i64,
    /// `head_dim`, or `hidden / heads` when the config does not set it.
    pub head_dim: i64,
    pub rms_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    /// `tie_word_embeddings`: the head is the token embedding (default false for all three).
    pub tied: bool,
    /// Biases on the q, k and v projections (llama's `attention_bias`; always in qwen2).
    pub qkv_bias: bool,
    /// A bias on the output projection (llama's `attention_bias`).
    pub o_bias: bool,
    /// Biases on the SwiGLU projections (llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Mistral's `sliding_window`: a query sees the keys less than this many positions back.
    pub sliding_window: Option<i64>,
    /// `max_position_embeddings`, for the memory plan's position limit.
    pub max_positions: u64,
}

/// How the rotary frequencies are rescaled (`rope_scaling.rope_type`, or `type` in older
/// files): the kinds whose function does not depend on the sequence length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `default`, or no scaling.
    None,
    /// `linear`: every frequency divided by `factor` (positions interpolated).
    Linear { factor: f64 },
    /// `llama3` (Llama 3.1): low frequencies divided by `factor`, high ones kept, the band
    /// between smoothly interpolated.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_positions: f64 },
}

impl HfConfig {
    /// Reads `config.json`'s text `text`.
    ///
    /// # Errors
    /// One line (without the file name, which the caller adds) naming the key at fault: not
    /// JSON, a `model_type` outside the Llama family ([`LLAMA_FAMILY`];
    /// [`super::model_config::ModelConfig::parse`] sends the others elsewhere), a missing or
    /// mistyped key, an activation other than SiLU, or a rotary scaling distill cannot compute
    /// exactly.
    pub fn parse(text: &str) -> Result<HfConfig, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        let c = json.as_object().ok_or("not a JSON object")?;
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        if !LLAMA_FAMILY.contains(&model_type) {
            return Err(super::keys::unsupported(model_type));
        }
        let act = c.get("hidden_act").and_then(Value::as_str).unwrap_or("silu");
        if act != "silu" {
            return Err(format!("hidden_act \"{act}\": distill's {model_type} runs SwiGLU with SiLU only"));
        }
        let hidden = int(c, "hidden_size")?;
        let heads = int(c, "num_attention_heads")?;
        let kv_heads = opt_int(c, "num_key_value_heads")?.unwrap_or(heads);
        if heads % kv_heads != 0 {
            return Err(format!("num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv_heads}"));
        }
        let head_dim = opt_int(c, "head_dim")?.unwrap_or(hidden / heads);
        let (rope_theta, rope_scaling) = rope(c)?;
        let llama = model_type == "llama";
        let attention_bias = llama && flag(c, "attention_bias", false);
        if model_type == "qwen2" && flag(c, "use_sliding_window", false) {
            return Err("use_sliding_window = true: distill runs qwen2 with full attention only".into());
        }
        let sliding_window = match model_type {
            "mistral" => opt_int(c, "sliding_window")?,
            _ => None,
        };
        Ok(HfConfig {
            model_type: model_type.to_string(),
            vocab: int(c, "vocab_size")?,
            hidden,
            intermediate: int(c, "intermediate_size")?,
            layers: int(c, "num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            rms_eps: number(c, "rms_norm_eps")?,
            rope_theta,
            rope_scaling,
            tied: flag(c, "tie_word_embeddings", false),
            qkv_bias: attention_bias || model_type == "qwen2",
            o_bias: attention_bias,
            mlp_bias: llama && flag(c, "mlp_bias", false),
            sliding_window,
            max_positions: opt_int(c, "max_position_embeddings")?.unwrap_or(2048) as u64,
        })
    }
}

/// `rope_theta` and the scaling, from `rope_parameters` (transformers 5) or `rope_theta` and
/// `rope_scaling` (transformers 4).
fn rope(c: &Map<String, Value>) -> Result<(f64, RopeScaling), String> {
    let (params, key) = match c.get("rope_parameters").and_then(Value::as_object) {
        Some(p) => (Some(p), "rope_parameters"),
        None => (c.get("rope_scaling").and_then(Value::as_object), "rope_scaling"),
    };
    let theta = match params.and_then(|p| p.get("rope_theta")) {
        Some(_) => number(params.unwrap_or(c), "rope_theta")?,
        None => c.get("rope_theta").map(|_| number(c, "rope_theta")).transpose()?.unwrap_or(10_000.0),
    };
    let Some(p) = params else {
        return Ok((theta, RopeScaling::None));
    };
    let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
    let get = |name: &str| number(p, name).map_err(|e| format!("{key}.{e}"));
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: get("factor")? },
        "llama3" => RopeScaling::Llama3 {
            factor: get("factor")?,
            low_freq_factor: get("low_freq_factor")?,
            high_freq_factor: get("high_freq_factor")?,
            original_max_positions: get("original_max_position_embeddings")?,
        },
        other => {
            return Err(format!(
                "{key} type \"{other}\" is not supported: distill computes the default, \"linear\" and \"llama3\" rotary positions exactly \
                 (\"{other}\" would need its own formula)"
            ))
        }
    };
    Ok((theta, scaling))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: &str = r#"{"model_type": "llama", "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": true, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}}"#;

    #[test]
    fn a_hub_llama_config_is_read_with_its_defaults() {
        let c = HfConfig::parse(LLAMA).unwrap();
        assert_eq!((c.vocab, c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim), (512, 32, 2, 4, 2, 8));
        assert_eq!((c.tied, c.qkv_bias, c.o_bias, c.mlp_bias, c.sliding_window), (true, false, false, false, None));
        assert_eq!(c.rope_theta, 500_000.0);
        let want = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192.0,
        };
        assert_eq!(c.rope_scaling, want);
    }

    #[test]
    fn qwen2_has_qkv_biases_and_mistral_its_window() {
        let qwen = LLAMA.replace("\"llama\"", "\"qwen2\"").replace("\"rope_scaling\"", "\"unused\"");
        let c = HfConfig::parse(&qwen).unwrap();
        assert_eq!((c.qkv_bias, c.o_bias, c.rope_scaling), (true, false, RopeScaling::None));
        let mistral =
            LLAMA.replace("\"llama\"", "\"mistral\"").replace("\"hidden_act\"", "\"sliding_window\": 4096, \"x\"");
        assert_eq!(HfConfig::parse(&mistral).unwrap().sliding_window, Some(4096));
    }

    #[test]
    fn unsupported_configs_are_named() {
        let t5 = LLAMA.replace("\"llama\"", "\"t5\"");
        assert_eq!(
            HfConfig::parse(&t5).unwrap_err(),
            "model_type \"t5\" is not supported: distill builds llama, mistral, qwen2 (the Llama family), gpt2 and bert; give a TorchScript teacher for other models"
        );
        let yarn = LLAMA.replace("\"llama3\"", "\"yarn\"");
        assert!(HfConfig::parse(&yarn).unwrap_err().starts_with("rope_scaling type \"yarn\" is not supported"));
        let gelu = LLAMA.replace("\"silu\"", "\"gelu\"");
        assert_eq!(
            HfConfig::parse(&gelu).unwrap_err(),
            "hidden_act \"gelu\": distill's llama runs SwiGLU with SiLU only"
        );
        let v5 = r#"{"model_type": "llama", "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0}}"#;
        assert!(HfConfig::parse(v5).unwrap_err().starts_with("hidden_size is missing"));
    }
}
