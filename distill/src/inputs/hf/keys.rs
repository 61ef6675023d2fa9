//! Reading a model folder's `config.json`: typed getters that name the key at fault, and the
//! `model_type`s distill builds, as a refusal lists them.
use serde_json::{Map, Value};

/// The `model_type`s distill builds, as the refusal lists them.
pub const SUPPORTED: [&str; 5] = ["llama", "mistral", "qwen2", "gpt2", "bert"];

/// The `model_type`s among [`SUPPORTED`] whose folders teach a language-model student
/// (`head = "lm"`): the causal decoders, whose forward gives logits [B, S, vocab]. The rest
/// (bert) give a sentence embedding and teach sentence encoders.
pub const LANGUAGE_MODELS: [&str; 4] = ["llama", "mistral", "qwen2", "gpt2"];

/// The refusal of `model_type` (`""`: the key is missing).
pub fn unsupported(model_type: &str) -> String {
    let shown = if model_type.is_empty() { "missing".to_string() } else { format!("\"{model_type}\"") };
    format!(
        "model_type {shown} is not supported: distill builds {} (the Llama family), {} and {}; give a TorchScript teacher for other models",
        SUPPORTED[..3].join(", "),
        SUPPORTED[3],
        SUPPORTED[4]
    )
}

/// The positive integer `key`.
///
/// # Errors
/// `"{key} is missing"`, or `"{key} = V is not a positive integer"`.
pub fn int(c: &Map<String, Value>, key: &str) -> Result<i64, String> {
    opt_int(c, key)?.ok_or_else(|| format!("{key} is missing"))
}

/// The positive integer `key`, `None` when missing or null.
///
/// # Errors
/// `"{key} = V is not a positive integer"`.
pub fn opt_int(c: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_i64().filter(|&n| n > 0).map(Some).ok_or_else(|| format!("{key} = {v} is not a positive integer"))
        }
    }
}

/// The positive finite number `key`.
///
/// # Errors
/// `"{key} is missing"`, or `"{key} = V is not a positive number"`.
pub fn number(c: &Map<String, Value>, key: &str) -> Result<f64, String> {
    match c.get(key) {
        None | Some(Value::Null) => Err(format!("{key} is missing")),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| format!("{key} = {v} is not a positive number")),
    }
}

/// The boolean `key`, `default` when missing or not a boolean.
pub fn flag(c: &Map<String, Value>, key: &str, default: bool) -> bool {
    c.get(key).and_then(Value::as_bool).unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_models_are_the_supported_types_less_the_encoder() {
        let encoders: Vec<&str> = SUPPORTED.iter().copied().filter(|t| !LANGUAGE_MODELS.contains(t)).collect();
        assert_eq!(encoders, ["bert"]);
        assert!(LANGUAGE_MODELS.iter().all(|t| SUPPORTED.contains(t)));
    }
}
