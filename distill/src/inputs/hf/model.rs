//! The model a Hugging Face folder holds, whichever family distill built it as: the calls a
//! teacher makes of it (its forward, its named parameters, its config).
use tch::{TchError, Tensor};

use super::bert::BertEncoder;
use super::gpt2::Gpt2;
use super::llama::HfDecoder;
use super::model_config::ModelConfig;

/// A Llama-family decoder, GPT-2 or a BERT-style encoder, and the config it was built from.
#[derive(Debug)]
pub struct HfModel {
    pub config: ModelConfig,
    net: Net,
}

#[derive(Debug)]
enum Net {
    Llama(HfDecoder),
    Gpt2(Gpt2),
    Bert(BertEncoder),
}

impl From<HfDecoder> for HfModel {
    fn from(m: HfDecoder) -> HfModel {
        HfModel { config: ModelConfig::Llama(m.config.clone()), net: Net::Llama(m) }
    }
}

impl From<Gpt2> for HfModel {
    fn from(m: Gpt2) -> HfModel {
        HfModel { config: ModelConfig::Gpt2(m.config.clone()), net: Net::Gpt2(m) }
    }
}

impl From<BertEncoder> for HfModel {
    fn from(m: BertEncoder) -> HfModel {
        HfModel { config: ModelConfig::Bert(m.config.clone()), net: Net::Bert(m) }
    }
}

impl HfModel {
    /// Logits [B, S, vocab] (the decoders) or the sentence embedding [B, E] (an encoder) in the
    /// weights' kind, for token ids `ids` int64 [B, S] and the attention mask `mask` [B, S]
    /// (1 = token, 0 = padding; `None`: all tokens), without autograd.
    ///
    /// # Errors
    /// libtorch's, for ids that are not int64 [B, S] within the vocabulary, or a sequence past
    /// a learned position table.
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> Result<Tensor, TchError> {
        if ids.dim() != 2 || ids.kind() != tch::Kind::Int64 {
            return Err(TchError::Torch(format!(
                "token ids must be int64 [B, S], not {:?} {:?}",
                ids.kind(),
                ids.size()
            )));
        }
        match &self.net {
            Net::Llama(m) => m.forward(ids, mask),
            Net::Gpt2(m) => m.forward(ids, mask),
            Net::Bert(m) => m.forward(ids, mask),
        }
    }

    /// Every weight by the folder's name, sharing storage with the model.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        match &self.net {
            Net::Llama(m) => m.named_parameters(),
            Net::Gpt2(m) => m.named_parameters(),
            Net::Bert(m) => m.named_parameters(),
        }
    }

    /// The token states [B, S, hidden] of an encoder before its pooling; `None` for a decoder.
    ///
    /// # Errors
    /// As [`HfModel::forward`].
    pub fn states(&self, ids: &Tensor, mask: Option<&Tensor>) -> Option<Result<Tensor, TchError>> {
        match &self.net {
            Net::Bert(m) => Some(m.states(ids, mask)),
            _ => None,
        }
    }

    /// How many hidden states a `[[kd.hidden]]` pair can name: `num_hidden_layers + 1` for a
    /// Llama-family decoder (0 the embeddings' output, as Hugging Face's `output_hidden_states`
    /// numbers them); `None` for GPT-2 and BERT, whose hidden states distill does not collect yet.
    pub fn hidden_states(&self) -> Option<usize> {
        match &self.net {
            Net::Llama(m) => Some(m.config.layers as usize + 1),
            _ => None,
        }
    }

    /// The logits and the hidden states `keep` (each [B, S, hidden]) of a Llama-family decoder
    /// ([`HfDecoder::forward_keeping`]), without autograd.
    ///
    /// # Errors
    /// As [`HfModel::forward`]; a model other than a Llama-family decoder (see
    /// [`HfModel::hidden_states`]).
    pub fn forward_keeping(
        &self,
        ids: &Tensor,
        mask: Option<&Tensor>,
        keep: &[usize],
    ) -> Result<(Tensor, Vec<Tensor>), TchError> {
        match &self.net {
            Net::Llama(m) => m.forward_keeping(ids, mask, keep),
            _ => Err(TchError::Torch(format!("a {} folder gives no hidden states", self.config.model_type()))),
        }
    }
}
