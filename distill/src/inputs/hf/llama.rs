//! The Llama-family decoder of a Hugging Face folder (llama, mistral, qwen2), built from its
//! `config.json` ([`HfConfig`]) and safetensors ([`Checkpoint`]) and run as transformers' eager
//! forward (`modeling_llama.py`) computes it, for a frozen teacher:
//!
//! `h = embed(ids)`; per layer `h += o(attn(rope(q(n1(h))), rope(k(n1(h))), v(n1(h))))`,
//! `h += down(silu(gate(n2(h))) * up(n2(h)))`; `logits = norm(h) head^T`, with
//! `rms(x) = w * (x / sqrt(mean(x^2) + eps))` computed in fp32 and cast back,
//! `attn = softmax_fp32(q k^T / sqrt(d_head) + mask) v` over each key/value head's group of
//! query heads, and the mask allowing key `j` to query `i` when `j <= i`, the key is not padding,
//! and (mistral's `sliding_window = w`) `i - j < w`.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::config::HfConfig;
use super::layers::{lowest, Linear, Loader};
use super::weights::Checkpoint;
use crate::host::error::{DistillError, Result};
use crate::torch::rotary::Rotary;

#[derive(Debug)]
struct Layer {
    input_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The decoder, its weights in one kind on one device.
#[derive(Debug)]
pub struct HfDecoder {
    pub config: HfConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// The head [vocab, hidden]: the embedding itself when tied.
    head: Tensor,
    /// Rotary inverse frequencies, fp32 [head_dim / 2].
    inv_freq: Tensor,
    /// Every tensor by its Hugging Face name (the head once when tied).
    named: Vec<(String, Tensor)>,
}

impl HfDecoder {
    /// Builds the decoder of `config` from `checkpoint` (of the folder `dir`) on `device`, its
    /// weights in `kind`.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] for a tensor that is missing or of another shape than the
    /// config makes it (named, with both shapes), or that cannot be read.
    pub fn load(
        dir: &Path,
        config: HfConfig,
        checkpoint: &Checkpoint,
        kind: Kind,
        device: Device,
    ) -> Result<HfDecoder> {
        let c = &config;
        let mut l = Loader::new(checkpoint, kind, device);
        let (d, q_dim, kv_dim) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let embed = l.take("model.embed_tokens.weight".into(), &[c.vocab, d])?;
        let mut layers = Vec::with_capacity(c.layers as usize);
        for i in 0..c.layers {
            let p = format!("model.layers.{i}");
            layers.push(Layer {
                input_norm: l.take(format!("{p}.input_layernorm.weight"), &[d])?,
                q: l.linear(&format!("{p}.self_attn.q_proj"), q_dim, d, c.qkv_bias)?,
                k: l.linear(&format!("{p}.self_attn.k_proj"), kv_dim, d, c.qkv_bias)?,
                v: l.linear(&format!("{p}.self_attn.v_proj"), kv_dim, d, c.qkv_bias)?,
                o: l.linear(&format!("{p}.self_attn.o_proj"), d, q_dim, c.o_bias)?,
                post_norm: l.take(format!("{p}.post_attention_layernorm.weight"), &[d])?,
                gate: l.linear(&format!("{p}.mlp.gate_proj"), c.intermediate, d, c.mlp_bias)?,
                up: l.linear(&format!("{p}.mlp.up_proj"), c.intermediate, d, c.mlp_bias)?,
                down: l.linear(&format!("{p}.mlp.down_proj"), d, c.intermediate, c.mlp_bias)?,
            });
        }
        let norm = l.take("model.norm.weight".into(), &[d])?;
        let head = match c.tied {
            true => embed.shallow_clone(),
            false => l.take("lm_head.weight".into(), &[c.vocab, d])?,
        };
        if c.head_dim % 2 != 0 {
            return Err(DistillError::teacher(
                dir,
                format!("head_dim {} is odd: rotary positions turn pairs", c.head_dim),
            ));
        }
        let inv_freq = super::rope::inverse_frequencies(c.rope_theta, c.head_dim, c.rope_scaling, device);
        let named = l.named;
        Ok(HfDecoder { config, embed, layers, norm, head, inv_freq, named })
    }

    /// Every weight by its Hugging Face name (`model.embed_tokens.weight`, ...,
    /// `lm_head.weight` when untied), sharing storage with the decoder.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
    }

    /// Logits [B, S, vocab] in the weights' kind for token ids `ids` int64 [B, S] and the
    /// attention mask `mask` int [B, S] (1 = token, 0 = padding; `None`: all tokens), without
    /// autograd.
    ///
    /// # Errors
    /// libtorch's, for ids that are not int64 [B, S] within the vocabulary.
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> std::result::Result<Tensor, tch::TchError> {
        Ok(self.forward_keeping(ids, mask, &[])?.0)
    }

    /// As [`HfDecoder::forward`], and the hidden states `keep` lists (in that order) as
    /// `transformers`' `output_hidden_states` numbers them: 0 the embeddings' output, `i` layer
    /// `i`'s, the last (`num_hidden_layers`) after the final norm; each [B, S, hidden] in the
    /// weights' kind, the others never copied.
    ///
    /// # Errors
    /// As [`HfDecoder::forward`]; a state past `num_hidden_layers`.
    pub fn forward_keeping(
        &self,
        ids: &Tensor,
        mask: Option<&Tensor>,
        keep: &[usize],
    ) -> std::result::Result<(Tensor, Vec<Tensor>), tch::TchError> {
        let n = self.layers.len();
        if let Some(&bad) = keep.iter().find(|&&i| i > n) {
            return Err(tch::TchError::Torch(format!("hidden state {bad} of a decoder with {} ({n} layers)", n + 1)));
        }
        if ids.dim() != 2 || ids.kind() != Kind::Int64 {
            return Err(tch::TchError::Torch(format!(
                "token ids must be int64 [B, S], not {:?} {:?}",
                ids.kind(),
                ids.size()
            )));
        }
        tch::no_grad(|| {
            let mut kept: Vec<(usize, Tensor)> = Vec::new();
            let mut keep_at = |i: usize, h: &Tensor| {
                if keep.contains(&i) {
                    kept.push((i, h.copy())); // h is added to in place
                }
            };
            let c = &self.config;
            let kind = self.embed.kind();
            let seq = ids.size()[1];
            let mut h = Tensor::f_embedding(&self.embed, ids, -1, false, false)?;
            keep_at(0, &h);
            let (cos, sin) = super::rope::angles(&self.inv_freq, seq, kind);
            let blocked = self.blocked(ids, mask);
            for (i, layer) in self.layers.iter().enumerate() {
                let x = self.rms(&h, &layer.input_norm);
                let heads = |t: Tensor, n: i64| t.unflatten(-1, [n, c.head_dim]).transpose(1, 2);
                let q = Rotary::apply(&heads(layer.q.forward(&x), c.heads), &cos, &sin);
                let k = Rotary::apply(&heads(layer.k.forward(&x), c.kv_heads), &cos, &sin);
                let v = heads(layer.v.forward(&x), c.kv_heads);
                let group = c.heads / c.kv_heads;
                let (k, v) = match group {
                    1 => (k, v),
                    g => (k.repeat_interleave_self_int(g, 1, None), v.repeat_interleave_self_int(g, 1, None)),
                };
                let scores = q.matmul(&k.transpose(-2, -1)) * (c.head_dim as f64).powf(-0.5);
                let scores = scores.masked_fill(&blocked, lowest(kind));
                let p = scores.softmax(-1, Kind::Float).to_kind(kind);
                let o = p.matmul(&v).transpose(1, 2).flatten(2, -1);
                h += layer.o.forward(&o);
                let x = self.rms(&h, &layer.post_norm);
                let mlp = layer.down.forward(&(layer.gate.forward(&x).silu() * layer.up.forward(&x)));
                h += mlp;
                if i + 1 < n {
                    keep_at(i + 1, &h);
                }
            }
            let normed = self.rms(&h, &self.norm);
            keep_at(n, &normed);
            let logits = normed.matmul(&self.head.tr());
            let states = keep.iter().map(|k| kept.iter().find(|(i, _)| i == k).expect("kept above").1.shallow_clone());
            Ok((logits, states.collect()))
        })
    }

    /// Bool [B or 1, 1, S, S]: true where key `j` is hidden from query `i` (later, padding, or
    /// outside the sliding window).
    fn blocked(&self, ids: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let seq = ids.size()[1];
        let i = Tensor::arange(seq, (Kind::Int64, ids.device()));
        let back = i.unsqueeze(1) - i.unsqueeze(0); // i - j
        let mut blocked = back.lt(0);
        if let Some(w) = self.config.sliding_window {
            blocked = blocked.logical_or(&back.ge(w));
        }
        let blocked = blocked.unsqueeze(0).unsqueeze(0);
        match mask {
            Some(m) => blocked.logical_or(&m.eq(0).unsqueeze(1).unsqueeze(1)),
            None => blocked,
        }
    }

    /// `w * (x / sqrt(mean(x^2) + eps))`, normalised in fp32 and cast back before the weight
    /// (transformers' `LlamaRMSNorm`).
    fn rms(&self, x: &Tensor, weight: &Tensor) -> Tensor {
        let x32 = x.to_kind(Kind::Float);
        let variance = x32.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
        let y = &x32 * (variance + self.config.rms_eps).rsqrt();
        weight * y.to_kind(x.kind())
    }
}
