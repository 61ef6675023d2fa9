//! A BERT-style encoder (Devlin et al. 2019; `model_type` bert) from a Hugging Face folder,
//! built from its `config.json` ([`BertConfig`]) and safetensors and run as transformers' eager
//! `BertModel` (`modeling_bert.py`) computes it, then pooled to a sentence embedding as the
//! folder says ([`SentencePooling`]), for a frozen teacher:
//!
//! `h = LN(word(ids) + position(0..S) + token_type(0))`; per layer
//! `h = LN(h + dense(attn(query(h), key(h), value(h))))`, `h = LN(h + out(act(inter(h))))`
//! (post-norm), attention `softmax(q k^T / sqrt(d_head) + mask) v` over every unpadded key;
//! then the pooling over the unpadded tokens. Every token is of type 0, as when transformers is
//! given no `token_type_ids`. BERT's pooler (a tanh layer on `[CLS]`) is not part of a sentence
//! embedding and is not read.
//!
//! The tensors are read as `embeddings.word_embeddings.weight`, ... (`BertModel`, what
//! all-MiniLM-L6-v2 holds) or `bert.embeddings...` (a checkpoint saved with a task head, such
//! as `bert-base-uncased`'s `BertForPreTraining`), LayerNorms as `weight`/`bias` or the older
//! `gamma`/`beta`.
use std::path::Path;

use serde_json::{Map, Value};
use tch::{Device, Kind, Tensor};

use super::keys::{flag, int, number, opt_int};
use super::layers::{attention, embed_with_positions, feed_forward, Act, LayerNorm, Linear, Loader};
use super::pooling::SentencePooling;
use super::weights::Checkpoint;
use crate::host::error::Result;

/// A BERT's `config.json`, and the folder's pooling.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    pub vocab: i64,
    pub hidden: i64,
    pub layers: i64,
    pub heads: i64,
    pub intermediate: i64,
    pub act: Act,
    /// `max_position_embeddings`.
    pub positions: i64,
    /// `type_vocab_size` (2 in BERT; default 2).
    pub token_types: i64,
    pub eps: f64,
    /// The folder's sentence embedding (set by [`super::read_config`] from `modules.json`).
    pub pooling: SentencePooling,
}

impl BertConfig {
    /// Reads the config object `c` (the pooling left at its default).
    ///
    /// # Errors
    /// One line naming the key: missing or not a positive integer, an activation distill does
    /// not compute, relative position embeddings, a decoder (`is_decoder`), `hidden_size` not a
    /// multiple of `num_attention_heads`.
    pub fn parse(c: &Map<String, Value>) -> std::result::Result<BertConfig, String> {
        let hidden = int(c, "hidden_size")?;
        let heads = int(c, "num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(format!("hidden_size = {hidden} is not a multiple of num_attention_heads = {heads}"));
        }
        let name = c.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu");
        let act = Act::from_name(name)
            .ok_or_else(|| format!("hidden_act \"{name}\" is not supported: distill computes {}", Act::NAMES))?;
        let positions = c.get("position_embedding_type").and_then(Value::as_str).unwrap_or("absolute");
        if positions != "absolute" {
            return Err(format!(
                "position_embedding_type \"{positions}\" is not supported: distill's bert has absolute positions"
            ));
        }
        if flag(c, "is_decoder", false) {
            return Err("is_decoder = true: distill's bert is an encoder (bidirectional attention)".into());
        }
        Ok(BertConfig {
            vocab: int(c, "vocab_size")?,
            hidden,
            layers: int(c, "num_hidden_layers")?,
            heads,
            intermediate: int(c, "intermediate_size")?,
            act,
            positions: int(c, "max_position_embeddings")?,
            token_types: opt_int(c, "type_vocab_size")?.unwrap_or(2),
            eps: c.get("layer_norm_eps").map(|_| number(c, "layer_norm_eps")).transpose()?.unwrap_or(1e-12),
            pooling: SentencePooling::default(),
        })
    }

    /// Parameter elements the encoder reads: the three tables and their LayerNorm, per layer
    /// four `d x d` projections, two LayerNorms and the feed-forward, with biases (no pooler),
    /// and the pooling's `Dense` projections.
    pub fn params(&self) -> u64 {
        let (v, d, i) = (self.vocab, self.hidden, self.intermediate);
        let layer = 4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d);
        let dense: i64 = self
            .pooling
            .dense
            .iter()
            .map(|l| l.in_features * l.out_features + if l.bias { l.out_features } else { 0 })
            .sum();
        ((v + self.positions + self.token_types) * d + 2 * d + self.layers * layer + dense) as u64
    }

    /// Width of the sentence embedding.
    pub fn width(&self) -> i64 {
        self.pooling.width(self.hidden)
    }
}

#[derive(Debug)]
struct Block {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    inter: Linear,
    out: Linear,
    out_norm: LayerNorm,
}

/// The encoder and its pooling, its weights in one kind on one device.
#[derive(Debug)]
pub struct BertEncoder {
    pub config: BertConfig,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    embed_norm: LayerNorm,
    blocks: Vec<Block>,
    /// The pooling's `Dense` projections, and whether each ends in tanh.
    dense: Vec<(Linear, bool)>,
    named: Vec<(String, Tensor)>,
}

impl BertEncoder {
    /// Builds the encoder of `config` from `checkpoint` (of the folder `dir`, whose `Dense`
    /// modules' folders hold their own weights) on `device`, its weights in `kind`.
    ///
    /// # Errors
    /// [`crate::host::error::DistillError::Teacher`] for a tensor that is missing or of another shape
    /// than the config makes it (named, with both shapes), or that cannot be read.
    pub fn load(
        dir: &Path,
        config: BertConfig,
        checkpoint: &Checkpoint,
        kind: Kind,
        device: Device,
    ) -> Result<BertEncoder> {
        let c = &config;
        let mut l = Loader::new(checkpoint, kind, device);
        let root = match checkpoint.has("bert.embeddings.word_embeddings.weight") {
            true => "bert.",
            false => "",
        };
        let (d, e) = (c.hidden, format!("{root}embeddings"));
        let word = l.take(format!("{e}.word_embeddings.weight"), &[c.vocab, d])?;
        let position = l.take(format!("{e}.position_embeddings.weight"), &[c.positions, d])?;
        let token_type = l.take(format!("{e}.token_type_embeddings.weight"), &[c.token_types, d])?;
        let embed_norm = l.layer_norm(&format!("{e}.LayerNorm"), d, c.eps)?;
        let mut blocks = Vec::with_capacity(c.layers as usize);
        for i in 0..c.layers {
            let p = format!("{root}encoder.layer.{i}");
            blocks.push(Block {
                query: l.linear(&format!("{p}.attention.self.query"), d, d, true)?,
                key: l.linear(&format!("{p}.attention.self.key"), d, d, true)?,
                value: l.linear(&format!("{p}.attention.self.value"), d, d, true)?,
                attn_out: l.linear(&format!("{p}.attention.output.dense"), d, d, true)?,
                attn_norm: l.layer_norm(&format!("{p}.attention.output.LayerNorm"), d, c.eps)?,
                inter: l.linear(&format!("{p}.intermediate.dense"), c.intermediate, d, true)?,
                out: l.linear(&format!("{p}.output.dense"), d, c.intermediate, true)?,
                out_norm: l.layer_norm(&format!("{p}.output.LayerNorm"), d, c.eps)?,
            });
        }
        let mut named = l.named;
        let mut dense = Vec::new();
        for m in &c.pooling.dense {
            let weights = Checkpoint::open(&dir.join(&m.path))?;
            let mut l = Loader::new(&weights, kind, device);
            let linear = l.linear("linear", m.out_features, m.in_features, m.bias)?;
            named.extend(l.named.into_iter().map(|(n, t)| (format!("{}/{n}", m.path), t)));
            dense.push((linear, m.tanh));
        }
        Ok(BertEncoder { config, word, position, token_type, embed_norm, blocks, dense, named })
    }

    /// Every weight by the folder's name (a `Dense` module's as `2_Dense/linear.weight`),
    /// sharing storage with the encoder.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
    }

    /// The last layer's token states [B, S, hidden] (`last_hidden_state`) in the weights' kind
    /// for token ids `ids` int64 [B, S] (S at most `max_position_embeddings`) and the attention
    /// mask `mask` [B, S] (1 = token, 0 = padding; `None`: all tokens), without autograd.
    ///
    /// # Errors
    /// libtorch's, for ids out of the vocabulary or a sequence past the position table.
    pub fn states(&self, ids: &Tensor, mask: Option<&Tensor>) -> std::result::Result<Tensor, tch::TchError> {
        let c = &self.config;
        tch::no_grad(|| {
            let what = "the encoder's max_position_embeddings";
            let h = embed_with_positions(&self.word, &self.position, ids, what)? + self.token_type.get(0);
            let mut h = self.embed_norm.forward(&h);
            let scale = ((c.hidden / c.heads) as f64).powf(-0.5);
            // [B, 1, 1, S]: true where the key is padding
            let padding = mask.map(|m| m.eq(0).unsqueeze(1).unsqueeze(1));
            for b in &self.blocks {
                let (q, k, v) = (b.query.forward(&h), b.key.forward(&h), b.value.forward(&h));
                let o = attention(&q, &k, &v, c.heads, scale, padding.as_ref());
                h = b.attn_norm.forward(&(b.attn_out.forward(&o) + &h));
                h = b.out_norm.forward(&(feed_forward(&b.inter, c.act, &b.out, &h) + &h));
            }
            Ok(h)
        })
    }

    /// The sentence embedding [B, width] ([`BertConfig::width`]) of `ids` and `mask`, as
    /// [`BertEncoder::states`] then the folder's pooling, `Dense` projections and
    /// normalisation.
    ///
    /// # Errors
    /// As [`BertEncoder::states`].
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> std::result::Result<Tensor, tch::TchError> {
        let states = self.states(ids, mask)?;
        let pooling = &self.config.pooling;
        Ok(tch::no_grad(|| {
            let mut x = pooling.pool(&states, mask);
            for (linear, tanh) in &self.dense {
                x = linear.forward(&x);
                if *tanh {
                    x = x.tanh();
                }
            }
            pooling.finish(x)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<BertConfig, String> {
        let v: Value = serde_json::from_str(text).unwrap();
        BertConfig::parse(v.as_object().unwrap())
    }

    /// all-MiniLM-L6-v2's config.json.
    const MINILM: &str = r#"{"model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu", "max_position_embeddings": 512,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}"#;

    #[test]
    fn minilm_reads_and_counts_its_parameters_without_the_pooler() {
        let c = parse(MINILM).unwrap();
        assert_eq!((c.act, c.token_types, c.eps, c.width()), (Act::Gelu, 2, 1e-12, 384));
        // the teacher preset's count: the file's 22,713,216 floats less the pooler (384 x 384 + 384)
        assert_eq!(c.params(), 22_713_216 - 384 * 384 - 384);
    }

    #[test]
    fn bad_keys_are_named() {
        let relative = MINILM.replace("\"absolute\"", "\"relative_key\"");
        assert_eq!(
            parse(&relative).unwrap_err(),
            "position_embedding_type \"relative_key\" is not supported: distill's bert has absolute positions"
        );
        assert_eq!(
            parse(&MINILM.replace("\"gelu\"", "\"tanh\"")).unwrap_err(),
            "hidden_act \"tanh\" is not supported: distill computes gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu"
        );
        assert_eq!(
            parse(&MINILM.replace("\"num_hidden_layers\": 6,", "")).unwrap_err(),
            "num_hidden_layers is missing"
        );
        assert!(parse(&MINILM.replace("\"model_type\": \"bert\",", "\"is_decoder\": true,"))
            .unwrap_err()
            .starts_with("is_decoder = true"));
    }
}
