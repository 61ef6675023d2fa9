//! A model folder's `config.json` by its `model_type`: the Llama family ([`HfConfig`]), GPT-2
//! ([`Gpt2Config`]) or a BERT-style encoder ([`BertConfig`]); anything else is refused with the
//! list of what distill builds.
use serde_json::Value;

use super::bert::BertConfig;
use super::config::HfConfig;
use super::gpt2::Gpt2Config;

/// The config of a model distill builds natively.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelConfig {
    /// llama, mistral, qwen2: a causal decoder, logits [B, S, vocab].
    Llama(HfConfig),
    /// gpt2: a causal decoder, logits [B, S, vocab].
    Gpt2(Gpt2Config),
    /// bert: an encoder, a sentence embedding [B, E].
    Bert(BertConfig),
}

impl ModelConfig {
    /// Reads `config.json`'s text `text` (a BERT's pooling is the folder's, added by
    /// [`super::read_config`]).
    ///
    /// # Errors
    /// One line (the caller adds the file name) naming the key at fault: not JSON, a
    /// `model_type` outside [`super::keys::SUPPORTED`], or the family's own ([`HfConfig::parse`],
    /// [`Gpt2Config::parse`], [`BertConfig::parse`]).
    pub fn parse(text: &str) -> Result<ModelConfig, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        let c = json.as_object().ok_or("not a JSON object")?;
        match c.get("model_type").and_then(Value::as_str).unwrap_or("") {
            "gpt2" => Gpt2Config::parse(c).map(ModelConfig::Gpt2),
            "bert" => BertConfig::parse(c).map(ModelConfig::Bert),
            _ => HfConfig::parse(text).map(ModelConfig::Llama),
        }
    }

    /// `model_type` as the config gives it.
    pub fn model_type(&self) -> &str {
        match self {
            ModelConfig::Llama(c) => &c.model_type,
            ModelConfig::Gpt2(_) => "gpt2",
            ModelConfig::Bert(_) => "bert",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_type_goes_to_its_family_and_others_are_refused_with_the_list() {
        let gpt2 =
            r#"{"model_type": "gpt2", "vocab_size": 512, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}"#;
        assert!(matches!(ModelConfig::parse(gpt2), Ok(ModelConfig::Gpt2(_))));
        let bert = r#"{"model_type": "bert", "vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64}"#;
        let c = ModelConfig::parse(bert).unwrap();
        assert_eq!((c.model_type(), matches!(c, ModelConfig::Bert(_))), ("bert", true));
        assert_eq!(
            ModelConfig::parse(r#"{"model_type": "t5"}"#).unwrap_err(),
            "model_type \"t5\" is not supported: distill builds llama, mistral, qwen2 (the Llama family), gpt2 and bert; give a TorchScript teacher for other models"
        );
        assert!(ModelConfig::parse("{}").unwrap_err().starts_with("model_type missing is not supported"));
    }
}
