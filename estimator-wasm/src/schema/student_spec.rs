//! `[student]` (and `[teacher.arch]`): the architecture `distill` builds, and the
//! `[student.transformer]` table. Expanded into layers by `crate::schema::arch`.
use serde::{Deserialize, Serialize};

use crate::schema::defaults::*;
use crate::schema::names::names;

/// Student architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Flatten, then `hidden` fully connected blocks, then the classifier head.
    Mlp,
    /// `channels` conv blocks (conv, norm, activation, pool), flatten, `hidden` blocks, head.
    Cnn,
    /// Pre-norm transformer over token ids, described by `[student.transformer]`.
    /// The estimator prices it; `distill` trains only `mlp` and `cnn`.
    Transformer,
}
names!(Family { Mlp = "mlp", Cnn = "cnn", Transformer = "transformer" });

/// Element-wise non-linearity after each conv and hidden block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    #[default]
    Relu,
    Gelu,
    Silu,
    Tanh,
    Sigmoid,
    LeakyRelu,
}
names!(Activation { Relu = "relu", Gelu = "gelu", Silu = "silu", Tanh = "tanh", Sigmoid = "sigmoid", LeakyRelu = "leaky_relu" });

/// Normalisation after each conv or hidden linear layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Norm {
    #[default]
    None,
    /// BatchNorm1d after linear layers, BatchNorm2d after convolutions.
    Batch,
    /// LayerNorm over the features (hidden blocks only).
    Layer,
}
names!(Norm { None = "none", Batch = "batch", Layer = "layer" });

/// Down-sampling after each conv block (kernel 2, stride 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pool {
    #[default]
    Max,
    Avg,
    None,
}
names!(Pool { Max = "max", Avg = "avg", None = "none" });

/// `[student]`: the network `distill` builds and trains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudentSpec {
    pub family: Family,
    /// Output channels of each conv block (`cnn` only): at most 1024 blocks of 1 to 2^24.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<u64>,
    /// Square conv kernel size, odd, at most 2^24; padding keeps the spatial size ("same").
    #[serde(default = "three")]
    pub kernel: u64,
    #[serde(default)]
    pub pool: Pool,
    /// Widths of the fully connected hidden blocks before the classifier head: at most 1024
    /// blocks of 1 to 2^24.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<u64>,
    #[serde(default)]
    pub activation: Activation,
    #[serde(default)]
    pub norm: Norm,
    /// Dropout probability after each hidden block's activation (0 disables).
    #[serde(default)]
    pub dropout: f64,
    /// Gradient checkpointing of the student's forward (Chen et al. 2016, arXiv:1604.06174).
    #[serde(default)]
    pub checkpointing: Checkpointing,
    /// Optional safetensors file to warm-start from (names as `distill` exports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<String>,
    /// The transformer's shape (`family = "transformer"` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformer: Option<TransformerSpec>,
}

/// Feed-forward block of a transformer layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MlpKind {
    /// `Linear(d, width)`, `student.activation`, `Linear(width, d)` (GPT-2, BERT with `gelu`).
    #[default]
    Standard,
    /// `Linear(d, 2 * width)` split into gate and up, `silu(gate) * up`, `Linear(width, d)`
    /// (Shazeer 2020, arXiv:2002.05202; Llama).
    Swiglu,
}
names!(MlpKind { Standard = "standard", Swiglu = "swiglu" });

/// Normalisation inside a transformer layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormKind {
    /// `nn.LayerNorm(d)`: weight and bias.
    #[default]
    Layer,
    /// `nn.RMSNorm(d)` (Zhang & Sennrich 2019): weight only.
    Rms,
}
names!(NormKind { Layer = "layer", Rms = "rms" });

/// Attention kernel, which decides whether the `[s, s]` score matrices are saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionKernel {
    /// `softmax(q k^T / sqrt(d)) v` written out: saves scores-sized tensors (Korthikanti 2022).
    #[default]
    Math,
    /// `scaled_dot_product_attention` with the flash kernel: saves q, k, v, out and a
    /// logsumexp (Dao 2022, arXiv:2205.14135).
    Flash,
}
names!(AttentionKernel { Math = "math", Flash = "flash" });

/// What the transformer's last layer predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeadKind {
    /// A language-model head: `data.classes` logits per token (`data.classes` = `vocab`).
    #[default]
    Lm,
    /// Mean over tokens, then `data.classes` logits per sequence.
    Classifier,
}
names!(HeadKind { Lm = "lm", Classifier = "classifier" });

/// `[student.transformer]` (or `[teacher.arch.transformer]`): a pre-norm transformer over
/// token ids. The sequence length is `data.input_shape = [s]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerSpec {
    /// Rows of the token embedding (1 to 2^24).
    pub vocab: u64,
    /// Number of transformer layers (each an attention and a feed-forward block), 1 to 4096.
    pub layers: u64,
    /// Hidden size h (1 to 2^24).
    pub d_model: u64,
    /// Attention heads a; `d_model` must be a multiple.
    pub heads: u64,
    /// Key/value heads for grouped-query attention (Ainslie 2023); default `heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<u64>,
    /// Feed-forward width i (1 to 2^24); default `4 * d_model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_width: Option<u64>,
    #[serde(default)]
    pub mlp: MlpKind,
    #[serde(default)]
    pub norm: NormKind,
    #[serde(default)]
    pub attention: AttentionKernel,
    /// Dropout on the attention probabilities (`student.dropout` covers the residual branches
    /// and the embedding).
    #[serde(default)]
    pub attention_dropout: f64,
    /// Rows of a learned position embedding (GPT-2: 1024), at most 2^24; 0 for none (rotary or
    /// no positions).
    #[serde(default)]
    pub max_positions: u64,
    #[serde(default)]
    pub head: HeadKind,
    /// Share the LM head's weight with the token embedding (GPT-2).
    #[serde(default)]
    pub tie_embeddings: bool,
    /// Biases on the attention and feed-forward projections and on an untied head (GPT-2:
    /// yes, Llama: no).
    #[serde(default = "yes")]
    pub bias: bool,
}

impl TransformerSpec {
    /// Key/value heads (`heads` unless grouped-query attention is configured).
    pub fn kv_heads(&self) -> u64 {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// Feed-forward width (`4 * d_model` unless configured).
    pub fn mlp_width(&self) -> u64 {
        self.mlp_width.unwrap_or(self.d_model.saturating_mul(4))
    }
}

/// Gradient checkpointing: `"none"`, `"sqrt"` (about sqrt(n) segments over n layers) or a
/// number of segments. Only segment boundaries are kept in the forward; each segment is
/// recomputed in the backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checkpointing {
    #[default]
    None,
    Sqrt,
    Segments(u64),
}
