//! GPT-2 (Radford et al. 2019) from a Hugging Face folder (`model_type` gpt2), built from its
//! `config.json` ([`Gpt2Config`]) and safetensors and run as transformers' eager forward
//! (`modeling_gpt2.py`) computes it, for a frozen teacher:
//!
//! `h = wte(ids) + wpe(0..S)`; per layer `h += c_proj(attn(split(c_attn(ln_1(h)))))`,
//! `h += mlp.c_proj(act(mlp.c_fc(ln_2(h))))`; `logits = ln_f(h) head^T`, the head the token
//! embedding (`tie_word_embeddings`, GPT-2's default) or `lm_head.weight`. The projections are
//! `Conv1D`s (weight [in, out]); attention is `softmax(q k^T * scale + mask) v` with
//! `scale = 1/sqrt(d_head)` (`scale_attn_weights`), further divided by the layer's 1-based index
//! under `scale_attn_by_inverse_layer_idx`, the mask hiding later keys and padding.
//!
//! The tensors are read as `transformer.wte.weight`, ... (`GPT2LMHeadModel`, what
//! `save_pretrained` writes) or, when the folder holds a bare `GPT2Model` (the Hub's original
//! `gpt2` checkpoints), `wte.weight`, ...; the model's names are the folder's.
use serde_json::{Map, Value};
use tch::{Device, Kind, Tensor};

use super::keys::{flag, int, number, opt_int};
use super::layers::{attention, embed_with_positions, feed_forward, Act, LayerNorm, Linear, Loader};
use super::weights::Checkpoint;
use crate::host::error::Result;

/// The root of `GPT2LMHeadModel`'s tensors (`transformer.wte.weight`, ...), what
/// `save_pretrained` writes; a bare `GPT2Model` has none.
pub const ROOT: &str = "transformer.";
/// The token table [vocab, n_embd], the position table [n_positions, n_embd] and the final
/// LayerNorm, under the root.
pub const WTE: &str = "wte";
pub const WPE: &str = "wpe";
pub const LN_F: &str = "ln_f";
/// A layer's modules, under [`layer`]: its two LayerNorms and its four `Conv1D`s (weight
/// [in, out], the transpose of `nn.Linear`'s): `c_attn` [n_embd, 3 n_embd] (q | k | v columns),
/// the attention's `c_proj` [n_embd, n_embd], `c_fc` [n_embd, n_inner], the MLP's `c_proj`
/// [n_inner, n_embd].
pub const LN_1: &str = "ln_1";
pub const C_ATTN: &str = "attn.c_attn";
pub const ATTN_PROJ: &str = "attn.c_proj";
pub const LN_2: &str = "ln_2";
pub const C_FC: &str = "mlp.c_fc";
pub const MLP_PROJ: &str = "mlp.c_proj";

/// The prefix of layer `i` (0-based) under `root`: `{root}h.{i}`.
pub fn layer(root: &str, i: i64) -> String {
    format!("{root}h.{i}")
}

/// GPT-2's `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    pub vocab: i64,
    /// `n_embd`.
    pub hidden: i64,
    pub layers: i64,
    pub heads: i64,
    /// `n_inner`, or `4 * n_embd` when null.
    pub inner: i64,
    /// `n_positions`: rows of the learned position table.
    pub positions: i64,
    pub act: Act,
    pub eps: f64,
    pub tied: bool,
    pub scale_attn_weights: bool,
    pub scale_by_layer: bool,
}

impl Gpt2Config {
    /// Reads the config object `c`.
    ///
    /// # Errors
    /// One line naming the key: missing or not a positive integer, an activation distill does
    /// not compute, `n_embd` not a multiple of `n_head`.
    pub fn parse(c: &Map<String, Value>) -> std::result::Result<Gpt2Config, String> {
        let hidden = int(c, "n_embd")?;
        let heads = int(c, "n_head")?;
        if hidden % heads != 0 {
            return Err(format!("n_embd = {hidden} is not a multiple of n_head = {heads}"));
        }
        let name = c.get("activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
        let act = Act::from_name(name).ok_or_else(|| {
            format!("activation_function \"{name}\" is not supported: distill computes {}", Act::NAMES)
        })?;
        Ok(Gpt2Config {
            vocab: int(c, "vocab_size")?,
            hidden,
            layers: int(c, "n_layer")?,
            heads,
            inner: opt_int(c, "n_inner")?.unwrap_or(4 * hidden),
            positions: int(c, "n_positions")?,
            act,
            eps: c.get("layer_norm_epsilon").map(|_| number(c, "layer_norm_epsilon")).transpose()?.unwrap_or(1e-5),
            tied: flag(c, "tie_word_embeddings", true),
            scale_attn_weights: flag(c, "scale_attn_weights", true),
            scale_by_layer: flag(c, "scale_attn_by_inverse_layer_idx", false),
        })
    }

    /// Parameter elements the model reads: the token and position tables, per layer two
    /// LayerNorms and four `Conv1D`s with biases, the final LayerNorm, and an untied head.
    pub fn params(&self) -> u64 {
        let (v, d, i, p) = (self.vocab, self.hidden, self.inner, self.positions);
        let layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d);
        let head = if self.tied { 0 } else { v * d };
        (v * d + p * d + self.layers * layer + 2 * d + head) as u64
    }
}

#[derive(Debug)]
struct Block {
    ln_1: LayerNorm,
    c_attn: Linear,
    c_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    mlp_proj: Linear,
}

/// GPT-2, its weights in one kind on one device.
#[derive(Debug)]
pub struct Gpt2 {
    pub config: Gpt2Config,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    /// [vocab, hidden]: `wte` itself when tied.
    head: Tensor,
    named: Vec<(String, Tensor)>,
}

impl Gpt2 {
    /// Builds GPT-2 of `config` from `checkpoint` on `device`, its weights in `kind`.
    ///
    /// # Errors
    /// [`crate::host::error::DistillError::Teacher`] for a tensor that is missing or of another shape
    /// than the config makes it (named, with both shapes), or that cannot be read.
    pub fn load(config: Gpt2Config, checkpoint: &Checkpoint, kind: Kind, device: Device) -> Result<Gpt2> {
        let c = &config;
        let mut l = Loader::new(checkpoint, kind, device);
        let bare = !checkpoint.has(&format!("{ROOT}{WTE}.weight")) && checkpoint.has(&format!("{WTE}.weight"));
        let root = if bare { "" } else { ROOT };
        let d = c.hidden;
        let wte = l.take(format!("{root}{WTE}.weight"), &[c.vocab, d])?;
        let wpe = l.take(format!("{root}{WPE}.weight"), &[c.positions, d])?;
        let mut blocks = Vec::with_capacity(c.layers as usize);
        for i in 0..c.layers {
            let p = layer(root, i);
            blocks.push(Block {
                ln_1: l.layer_norm(&format!("{p}.{LN_1}"), d, c.eps)?,
                c_attn: l.conv1d(&format!("{p}.{C_ATTN}"), d, 3 * d)?,
                c_proj: l.conv1d(&format!("{p}.{ATTN_PROJ}"), d, d)?,
                ln_2: l.layer_norm(&format!("{p}.{LN_2}"), d, c.eps)?,
                c_fc: l.conv1d(&format!("{p}.{C_FC}"), d, c.inner)?,
                mlp_proj: l.conv1d(&format!("{p}.{MLP_PROJ}"), c.inner, d)?,
            });
        }
        let ln_f = l.layer_norm(&format!("{root}{LN_F}"), d, c.eps)?;
        let head = match c.tied {
            true => wte.shallow_clone(),
            false => l.take("lm_head.weight".into(), &[c.vocab, d])?,
        };
        Ok(Gpt2 { config, wte, wpe, blocks, ln_f, head, named: l.named })
    }

    /// Every weight by the folder's name, sharing storage with the model.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
    }

    /// Logits [B, S, vocab] in the weights' kind for token ids `ids` int64 [B, S] (S at most
    /// `n_positions`) and the attention mask `mask` [B, S] (1 = token, 0 = padding; `None`: all
    /// tokens), without autograd.
    ///
    /// # Errors
    /// libtorch's, for ids out of the vocabulary or a sequence past the position table.
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> std::result::Result<Tensor, tch::TchError> {
        let c = &self.config;
        tch::no_grad(|| {
            let mut h = embed_with_positions(&self.wte, &self.wpe, ids, "GPT-2's n_positions")?;
            let blocked = blocked(ids, mask);
            let d_head = c.hidden / c.heads;
            for (i, b) in self.blocks.iter().enumerate() {
                let qkv = b.c_attn.forward(&b.ln_1.forward(&h)).split(c.hidden, -1);
                let mut scale = if c.scale_attn_weights { (d_head as f64).powf(-0.5) } else { 1.0 };
                if c.scale_by_layer {
                    scale /= (i + 1) as f64;
                }
                h += b.c_proj.forward(&attention(&qkv[0], &qkv[1], &qkv[2], c.heads, scale, Some(&blocked)));
                h += feed_forward(&b.c_fc, c.act, &b.mlp_proj, &b.ln_2.forward(&h));
            }
            Ok(self.ln_f.forward(&h).matmul(&self.head.tr()))
        })
    }
}

/// Bool [B or 1, 1, S, S]: true where key `j` is hidden from query `i` (`j > i`, or padding).
pub fn blocked(ids: &Tensor, mask: Option<&Tensor>) -> Tensor {
    let seq = ids.size()[1];
    let i = Tensor::arange(seq, (Kind::Int64, ids.device()));
    let later = (i.unsqueeze(1) - i.unsqueeze(0)).lt(0).unsqueeze(0).unsqueeze(0);
    match mask {
        Some(m) => later.logical_or(&m.eq(0).unsqueeze(1).unsqueeze(1)),
        None => later,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Gpt2Config, String> {
        let v: Value = serde_json::from_str(text).unwrap();
        Gpt2Config::parse(v.as_object().unwrap())
    }

    const GPT2: &str = r#"{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_positions": 1024, "n_inner": null, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}"#;

    #[test]
    fn the_hub_gpt2_config_reads_with_its_defaults_and_counts_124m() {
        let c = parse(GPT2).unwrap();
        assert_eq!(
            (c.inner, c.tied, c.act, c.scale_attn_weights, c.scale_by_layer),
            (3072, true, Act::GeluTanh, true, false)
        );
        // GPT-2 small: 124,439,808 parameters (the Hub's model card, lm_head tied)
        assert_eq!(c.params(), 124_439_808);
    }

    #[test]
    fn bad_keys_are_named() {
        let swish = GPT2.replace("gelu_new", "swish");
        assert_eq!(
            parse(&swish).unwrap_err(),
            "activation_function \"swish\" is not supported: distill computes gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu"
        );
        assert_eq!(
            parse(&GPT2.replace("\"n_head\": 12", "\"n_head\": 10")).unwrap_err(),
            "n_embd = 768 is not a multiple of n_head = 10"
        );
        assert_eq!(parse(&GPT2.replace("\"n_layer\": 12,", "")).unwrap_err(), "n_layer is missing");
    }

    #[test]
    fn the_mask_hides_later_keys_and_padding() {
        let ids = Tensor::zeros([1, 3], (Kind::Int64, Device::Cpu));
        let mask = Tensor::from_slice(&[1i64, 1, 0]).reshape([1, 3]);
        let b = blocked(&ids, Some(&mask)).to_kind(Kind::Int64).flatten(0, -1);
        // rows: queries 0..2; columns: keys; key 2 is padding
        assert_eq!(Vec::<i64>::try_from(b).unwrap(), [0, 1, 1, 0, 0, 1, 0, 0, 1]);
    }
}
