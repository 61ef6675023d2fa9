//! The layers a student expands into ([`Layer`]): the operation each performs ([`Op`]), with
//! its parameter and buffer counts and parameter shapes as PyTorch names them.
use serde::Serialize;

use crate::schema::student_spec::{Activation, AttentionKernel, MlpKind, NormKind, Pool};

/// One operation of the student, with its input and output shapes per sample (batch excluded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    /// Unique id; also the prefix of this layer's parameter names.
    pub id: String,
    pub op: Op,
    /// Shape of one input sample, e.g. `[C, H, W]` or `[D]`.
    pub input: Vec<u64>,
    /// Shape of one output sample.
    pub output: Vec<u64>,
}

/// The operation a [`Layer`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// `nn.Conv2d(in, out, kernel, stride=1, padding=kernel/2, bias=bias)`.
    Conv2d {
        in_channels: u64,
        out_channels: u64,
        kernel: u64,
        bias: bool,
    },
    /// `nn.Linear(in, out, bias=True)`.
    Linear {
        in_features: u64,
        out_features: u64,
    },
    /// `nn.BatchNorm1d/2d(features)`: affine weight and bias plus running statistics.
    BatchNorm {
        features: u64,
    },
    /// `nn.LayerNorm(features)`.
    LayerNorm {
        features: u64,
    },
    Activation {
        function: Activation,
    },
    Dropout {
        p: f64,
    },
    /// 2x2 pooling with stride 2 (`max` or `avg`), flooring odd sizes as PyTorch does.
    Pool2d {
        pool: Pool,
    },
    /// `[C, H, W]` to `[C * H * W]`.
    Flatten,
    /// `nn.Embedding(vocab, dim)` over int64 token ids `[s]`, plus a learned position
    /// embedding of `positions` rows when `positions > 0` and a token-type embedding of
    /// `token_types` rows (row 0 added to every token) when `token_types > 0`; the three are
    /// summed; output `[s, dim]`.
    Embedding {
        vocab: u64,
        dim: u64,
        positions: u64,
        token_types: u64,
    },
    /// Self-attention block ([`Attention`]), pre- or post-norm.
    SelfAttention(Attention),
    /// Feed-forward block ([`FeedForward`]), pre- or post-norm.
    FeedForward(FeedForward),
    /// `nn.RMSNorm(features)`: weight only.
    RmsNorm {
        features: u64,
    },
    /// Mean over the sequence's tokens whose attention mask is 1: `[s, d]` to `[d]`
    /// (`sum(x * m) / max(sum(m), 1e-9)`, sentence-transformers' mean pooling).
    MeanPool,
    /// The first token's vector (`[CLS]`): `[s, d]` to `[d]`.
    ClsPool,
    /// `x / max(||x||_2, 1e-12)` over the last dimension (`torch.nn.functional.normalize`).
    L2Normalize,
    /// A transformer's output projection `[.., in]` to `[.., out]`; `tied` reuses the token
    /// embedding's weight (no parameters of its own); `rank` factorises it into `down.weight`
    /// [rank, in] and `up.weight` [out, rank] (`student.transformer.head_rank`, never tied).
    LmHead {
        in_features: u64,
        out_features: u64,
        bias: bool,
        tied: bool,
        rank: Option<u64>,
    },
}

/// Self-attention block over `[s, dim]`: pre-norm `x + dropout(proj(attention(norm(x))))`, or
/// post-norm `norm(x + dropout(proj(attention(x))))`; fused `qkv` projection (`dim` to
/// `dim + 2 * kv_heads * dim / heads`), `heads` heads, padded keys masked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Attention {
    pub dim: u64,
    /// Post-norm (BERT) instead of pre-norm.
    pub post_norm: bool,
    pub heads: u64,
    pub kv_heads: u64,
    pub kernel: AttentionKernel,
    pub norm: NormKind,
    pub attention_dropout: f64,
    pub dropout: f64,
    pub bias: bool,
    /// Each query attends to itself and earlier tokens only (a language model's head).
    pub causal: bool,
    /// Rotary positions on queries and keys with this base (`student.transformer.rope_theta`).
    pub rope_theta: Option<f64>,
}

/// Feed-forward block over `[s, dim]`: pre-norm `x + dropout(fc2(act(fc1(norm(x)))))`, or
/// post-norm `norm(x + dropout(fc2(act(fc1(x)))))`; SwiGLU's `fc1` produces gate and up
/// (`2 * width`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FeedForward {
    pub dim: u64,
    /// Post-norm (BERT) instead of pre-norm.
    pub post_norm: bool,
    pub width: u64,
    pub mlp: MlpKind,
    pub activation: Activation,
    pub norm: NormKind,
    pub dropout: f64,
    pub bias: bool,
}

impl Op {
    /// Trainable parameters (weights and biases), in elements; saturates at `u64::MAX`
    /// (see [`Op::checked_params`]).
    pub fn params(&self) -> u64 {
        self.checked_params().unwrap_or(u64::MAX)
    }

    /// Trainable parameters in elements, `None` on 64-bit overflow.
    pub fn checked_params(&self) -> Option<u64> {
        self.param_shapes().iter().try_fold(0u64, |acc, (_, shape)| acc.checked_add(numel(shape)?))
    }

    /// Elements of the weights that pruning acts on: conv and linear weights (biases and norms
    /// excluded), and a transformer's projection matrices. The trainer masks exactly these.
    pub fn prunable(&self) -> u64 {
        self.param_shapes()
            .iter()
            .filter(|(leaf, shape)| {
                leaf.ends_with("weight")
                    && shape.len() >= 2
                    && !leaf.starts_with("tokens")
                    && !leaf.starts_with("positions")
                    && !leaf.starts_with("token_types")
            })
            .fold(0u64, |acc, (_, shape)| acc.saturating_add(numel(shape).unwrap_or(u64::MAX)))
    }

    /// Non-trainable buffers (BatchNorm running mean and variance), in elements.
    pub fn buffers(&self) -> u64 {
        match *self {
            Op::BatchNorm { features } => features.saturating_mul(2),
            _ => 0,
        }
    }

    /// Parameter names and shapes, in the order `distill` creates and exports them.
    pub fn param_shapes(&self) -> Vec<(&'static str, Vec<u64>)> {
        match *self {
            Op::Conv2d { in_channels, out_channels, kernel, bias } => {
                let mut v = vec![("weight", vec![out_channels, in_channels, kernel, kernel])];
                if bias {
                    v.push(("bias", vec![out_channels]));
                }
                v
            }
            Op::Linear { in_features, out_features } => {
                vec![("weight", vec![out_features, in_features]), ("bias", vec![out_features])]
            }
            Op::BatchNorm { features } | Op::LayerNorm { features } => {
                vec![("weight", vec![features]), ("bias", vec![features])]
            }
            Op::RmsNorm { features } => vec![("weight", vec![features])],
            Op::Embedding { vocab, dim, positions, token_types } => {
                let mut v = vec![("tokens.weight", vec![vocab, dim])];
                if positions > 0 {
                    v.push(("positions.weight", vec![positions, dim]));
                }
                if token_types > 0 {
                    v.push(("token_types.weight", vec![token_types, dim]));
                }
                v
            }
            Op::SelfAttention(Attention { dim, heads, kv_heads, norm, bias, .. }) => {
                let qkv = dim.saturating_add((dim / heads.max(1)).saturating_mul(kv_heads).saturating_mul(2));
                let mut v = norm_shapes(norm, dim);
                v.push(("qkv.weight", vec![qkv, dim]));
                if bias {
                    v.push(("qkv.bias", vec![qkv]));
                }
                v.push(("proj.weight", vec![dim, dim]));
                if bias {
                    v.push(("proj.bias", vec![dim]));
                }
                v
            }
            Op::FeedForward(FeedForward { dim, width, mlp, norm, bias, .. }) => {
                let up = if mlp == MlpKind::Swiglu { width.saturating_mul(2) } else { width };
                let mut v = norm_shapes(norm, dim);
                v.push(("fc1.weight", vec![up, dim]));
                if bias {
                    v.push(("fc1.bias", vec![up]));
                }
                v.push(("fc2.weight", vec![dim, width]));
                if bias {
                    v.push(("fc2.bias", vec![dim]));
                }
                v
            }
            Op::LmHead { in_features, out_features, bias, tied, rank } => {
                let mut v = Vec::new();
                match rank {
                    Some(r) => {
                        v.push(("down.weight", vec![r, in_features]));
                        v.push(("up.weight", vec![out_features, r]));
                    }
                    None if !tied => v.push(("weight", vec![out_features, in_features])),
                    None => {}
                }
                if bias {
                    v.push(("bias", vec![out_features]));
                }
                v
            }
            Op::Activation { .. }
            | Op::Dropout { .. }
            | Op::Pool2d { .. }
            | Op::Flatten
            | Op::MeanPool
            | Op::ClsPool
            | Op::L2Normalize => Vec::new(),
        }
    }
}

fn norm_shapes(norm: NormKind, dim: u64) -> Vec<(&'static str, Vec<u64>)> {
    match norm {
        NormKind::Layer => vec![("norm.weight", vec![dim]), ("norm.bias", vec![dim])],
        NormKind::Rms => vec![("norm.weight", vec![dim])],
    }
}

/// Elements of a shape, `None` on overflow.
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}
