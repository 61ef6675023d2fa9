//! The transformer student (`family = "transformer"`): one block per layer of
//! `estimator_wasm::schema::arch::layers` (`embed`, `embed_norm`, `embed_drop`, `blk{i}_attn`,
//! `blk{i}_mlp`, `final_norm`, `pool`, `head`, `normalize`), so its gradient-checkpointing
//! segments, parameter names and shapes are the ones the memory estimator prices.
//!
//! The forward is the cfg.toml contract (docs/cfg-reference.md, `[student.transformer]`): the
//! embedding sum, post- or pre-norm blocks ([`super::attention`], [`super::feed_forward`]), mean
//! pooling over the attention mask (sentence-transformers) or the first token (`[CLS]`), an
//! optional projection `head`, and L2 normalisation. A `head = "lm"` gives logits [B, S, vocab] per token
//! (its weight the token embedding when `tie_embeddings`, or two factors `head.down` [r, d] and
//! `head.up` [vocab, r] with `head_rank = r`); `"classifier"` logits [B, classes].
//!
//! Block 0 takes token ids int64 [B, S]; every other block a float [B, S, d] (or, after `pool`,
//! [B, d]); the attention mask int [B, S] reaches every block. Every op is shape-agnostic, so
//! the TorchScript traced on one input shape runs on any other (`export/mod.rs`).
use std::ops::Range;

use estimator_wasm::schema::arch::{self, Layer, Op};
use estimator_wasm::schema::Config;
use tch::{nn, Device, Kind, Tensor};

use super::attention::SelfAttention;
use super::embedding::{EmbeddingSizes, TokenEmbedding};
use super::feed_forward::FeedForward;
use super::linear::Linear;
use super::network::Network;
use super::norm::Norm;
use crate::host::error::{DistillError, Result};
use crate::inputs::data::ModelInput;

/// A language model's head: `logits = (down h) weight^T + bias`, `down` [r, d] only for a
/// factorised head (`head_rank = r`), `weight` [vocab, d or r] (the token embedding when tied),
/// `bias` [vocab]. The tensors share the student's variables.
#[derive(Debug)]
pub struct LmHead {
    pub down: Option<Tensor>,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

/// A transformer student: its layers (from `arch::layers`) and the blocks that run them.
#[derive(Debug)]
pub struct Transformer {
    pub layers: Vec<Layer>,
    blocks: Vec<Block>,
    vocab: i64,
    /// `data.input_shape[0]`: the sequence length of [`Network::example_input`].
    seq: i64,
}

#[derive(Debug)]
enum Block {
    Embed(TokenEmbedding),
    Norm(Norm),
    Dropout(f64),
    Attention(SelfAttention),
    FeedForward(FeedForward),
    MeanPool,
    ClsPool,
    Head(Linear),
    /// `student.transformer.head_rank`: `up(down(h))`, [B, S, d] to [B, S, r] to [B, S, vocab].
    LowRankHead {
        down: Linear,
        up: Linear,
    },
    Normalize,
}

impl Transformer {
    /// Builds the transformer `spec.student` describes under `root`, one subpath per layer id.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when `spec.student` has no `[student.transformer]` table or a
    /// layer the transformer cannot run.
    pub fn new(root: &nn::Path, spec: &Config) -> Result<Transformer> {
        let t = spec.student.transformer.as_ref().ok_or_else(|| {
            DistillError::Usage("student.family = \"transformer\" needs a [student.transformer] table".into())
        })?;
        let layers = arch::layers(&spec.student, &spec.data).map_err(|e| DistillError::Usage(e.to_string()))?;
        let eps = t.norm_eps;
        let mut tokens: Option<Tensor> = None;
        let mut blocks = Vec::with_capacity(layers.len());
        for layer in &layers {
            let p = root / layer.id.as_str();
            let block = match layer.op {
                Op::Embedding { vocab, dim, positions, token_types } => {
                    let sizes = EmbeddingSizes {
                        vocab: vocab as i64,
                        dim: dim as i64,
                        positions: positions as i64,
                        token_types: token_types as i64,
                    };
                    let embed = TokenEmbedding::new(&p, &sizes);
                    tokens = Some(embed.tokens.shallow_clone());
                    Block::Embed(embed)
                }
                Op::LayerNorm { features } => Block::Norm(Norm::new(&p, t.norm, features as i64, eps)),
                Op::RmsNorm { features } => Block::Norm(Norm::new(&p, t.norm, features as i64, eps)),
                Op::Dropout { p } => Block::Dropout(p),
                Op::SelfAttention(a) => Block::Attention(SelfAttention::new(&p, &a, eps)),
                Op::FeedForward(f) => Block::FeedForward(FeedForward::new(&p, &f, eps)),
                Op::MeanPool => Block::MeanPool,
                Op::ClsPool => Block::ClsPool,
                Op::Linear { in_features, out_features } => {
                    Block::Head(Linear::new(&p, in_features as i64, out_features as i64, true))
                }
                Op::LmHead { in_features, out_features, bias, rank: Some(rank), .. } => {
                    let (d, v, r) = (in_features as i64, out_features as i64, rank as i64);
                    let down = Linear::new(&(&p / "down"), d, r, false);
                    let up = Linear::new(&(&p / "up"), r, v, false);
                    let bias = bias.then(|| p.zeros("bias", &[v]));
                    Block::LowRankHead { down, up: Linear { bias, ..up } }
                }
                Op::LmHead { in_features, out_features, bias, tied: false, rank: None } => {
                    Block::Head(Linear::new(&p, in_features as i64, out_features as i64, bias))
                }
                Op::LmHead { out_features, bias, tied: true, rank: None, .. } => {
                    let weight = tokens.as_ref().map(Tensor::shallow_clone).ok_or_else(|| {
                        DistillError::Usage("student.transformer.tie_embeddings needs the token embedding".into())
                    })?;
                    let bias = bias.then(|| p.zeros("bias", &[out_features as i64]));
                    Block::Head(Linear { weight, bias })
                }
                Op::L2Normalize => Block::Normalize,
                ref other => {
                    return Err(DistillError::Usage(format!(
                        "layer {} ({other:?}) can be planned but not trained by distill",
                        layer.id
                    )))
                }
            };
            blocks.push(block);
        }
        let seq = spec.data.input_shape.first().copied().unwrap_or(1) as i64;
        Ok(Transformer { layers, blocks, vocab: t.vocab as i64, seq })
    }

    /// A language model's head (`head = "lm"`, the last block) as shallow clones of its
    /// variables, for the fused head and loss (`kd.fused_head`); `None` for other heads.
    pub fn lm_head(&self) -> Option<LmHead> {
        let clone = |t: &Option<Tensor>| t.as_ref().map(Tensor::shallow_clone);
        match (self.layers.last().map(|l| &l.op), self.blocks.last()) {
            (Some(Op::LmHead { .. }), Some(Block::Head(l))) => {
                Some(LmHead { down: None, weight: l.weight.shallow_clone(), bias: clone(&l.bias) })
            }
            (Some(Op::LmHead { .. }), Some(Block::LowRankHead { down, up })) => Some(LmHead {
                down: Some(down.weight.shallow_clone()),
                weight: up.weight.shallow_clone(),
                bias: clone(&up.bias),
            }),
            _ => None,
        }
    }

    /// Index of the block whose layer id is `id`.
    pub fn block_index(&self, id: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.id == id)
    }
}

impl Network for Transformer {
    fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks `blocks` on `h` (token ids [B, S] for block 0) with the attention mask `mask`.
    fn forward_blocks(&self, h: &Tensor, blocks: Range<usize>, mask: Option<&Tensor>, train: bool) -> Tensor {
        self.blocks[blocks].iter().fold(h.shallow_clone(), |h, block| block.forward(&h, mask, train))
    }

    /// No running statistics (no BatchNorm).
    fn running_stats(&self, _blocks: Range<usize>) -> Vec<Tensor> {
        Vec::new()
    }

    /// Uniform token ids in `[0, vocab)` of [batch, data.input_shape[0]] and a full attention
    /// mask: the longest sentence the run admits, the latency's worst case.
    fn example_input(&self, batch: i64) -> ModelInput {
        let ids = Tensor::randint(self.vocab, [batch, self.seq], (Kind::Int64, Device::Cpu));
        let mask = ids.ones_like();
        ModelInput { x: ids, mask: Some(mask) }
    }

    /// `arch::param_count` of the layers (a tied head counted once, in `embed`).
    fn params(&self) -> u64 {
        arch::param_count(&self.layers)
    }

    /// The block of the layer id that prefixes `name` (`blk2_attn.qkv.weight` -> `blk2_attn`).
    fn block_of(&self, name: &str) -> Option<usize> {
        self.block_index(name.split('.').next().unwrap_or(name))
    }
}

impl Block {
    fn forward(&self, h: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        match self {
            Block::Embed(e) => e.forward(h),
            Block::Norm(n) => n.forward(h),
            Block::Dropout(p) => h.dropout(*p, train),
            Block::Attention(a) => a.forward(h, mask, train),
            Block::FeedForward(f) => f.forward(h, train),
            Block::MeanPool => mean_pool(h, mask),
            Block::ClsPool => h.select(1, 0),
            Block::Head(l) => l.forward(h),
            Block::LowRankHead { down, up } => up.forward(&down.forward(h)),
            Block::Normalize => l2_normalize(h),
        }
    }
}

/// Mean of `h` [B, S, d] over the tokens whose `mask` [B, S] is 1:
/// `sum(h * m) / max(sum(m), 1e-9)` (sentence-transformers' mean pooling); all tokens without
/// a mask. [B, d].
pub fn mean_pool(h: &Tensor, mask: Option<&Tensor>) -> Tensor {
    match mask {
        Some(mask) => {
            let m = mask.to_kind(h.kind());
            let sum = (h * m.unsqueeze(-1)).sum_dim_intlist(1, false, None);
            sum / m.sum_dim_intlist(1, true, None).clamp_min(1e-9)
        }
        None => h.mean_dim(1, false, None),
    }
}

/// `x / max(||x||_2, 1e-12)` over the last dimension (`torch.nn.functional.normalize`).
pub fn l2_normalize(x: &Tensor) -> Tensor {
    x / x.norm_scalaropt_dim(2, [-1], true).clamp_min(1e-12)
}

#[cfg(test)]
#[path = "transformer_tests.rs"]
pub(crate) mod tests;
