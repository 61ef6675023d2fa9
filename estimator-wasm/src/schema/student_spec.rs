//! `[student]` (and `[teacher.arch]`): the architecture `distill` builds, and the
//! `[student.transformer]` table. Expanded into layers by `crate::schema::arch`.
use serde::{Deserialize, Serialize};

use crate::schema::defaults::*;
use crate::schema::names::names;
use crate::schema::tables::tables;

tables!(StudentSpec, TransformerSpec);

/// Student architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Flatten, then `hidden` fully connected blocks, then the classifier head.
    Mlp,
    /// `channels` conv blocks (conv, norm, activation, pool), flatten, `hidden` blocks, head.
    Cnn,
    /// Transformer over token ids (pre-norm like GPT-2 or post-norm like BERT), described by
    /// `[student.transformer]`. `distill` trains the `embedding` head (sentence encoders); the
    /// estimator prices every head.
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

impl Pool {
    /// Whether this is the default, `max` (serde's `skip_serializing_if` takes a reference).
    fn is_max(&self) -> bool {
        *self == Pool::Max
    }
}

/// `[student]`: the network `distill` builds and trains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct StudentSpec {
    pub family: Family,
    /// Output channels of each conv block (`cnn` only): at most 1024 blocks of 1 to 2^24.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<u64>,
    /// Square conv kernel size, odd, at most 2^24; padding keeps the spatial size ("same").
    /// Written only when not the default 3, so an MLP or transformer file carries no conv key.
    #[serde(default = "three", skip_serializing_if = "is_three")]
    pub kernel: u64,
    /// Written only when not the default `max` (as `kernel`).
    #[serde(default, skip_serializing_if = "Pool::is_max")]
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
    /// Transformer students only: initialise from the teacher (DistilBERT style, Sanh et al.
    /// 2019, arXiv:1910.01108): the embeddings and, for student layer `i`, teacher layer
    /// `init_from_teacher[i]` (0-based), copied by name from the TorchScript teacher's
    /// parameters. One entry per student layer; widths must match the teacher's. Empty: random.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_from_teacher: Vec<u64>,
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
    /// `pooling` over tokens, then `data.classes` logits per sequence.
    Classifier,
    /// A sentence embedding of width `data.classes`: `pooling` over the tokens, a linear
    /// projection `head` when `data.classes != d_model`, and an L2 normalisation when
    /// `normalize` (sentence-transformers' `Pooling` + `Dense` + `Normalize`).
    Embedding,
}
names!(HeadKind { Lm = "lm", Classifier = "classifier", Embedding = "embedding" });

/// Where a transformer layer normalises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormPosition {
    /// `x + f(norm(x))`, and a `final_norm` after the last layer (GPT-2, Llama).
    #[default]
    Pre,
    /// `norm(x + f(x))`, and an `embed_norm` after the embeddings (BERT, Vaswani et al. 2017).
    Post,
}
names!(NormPosition { Pre = "pre", Post = "post" });

/// How a sequence of token vectors `[s, d]` becomes one vector `[d]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// Mean over the tokens whose attention mask is 1 (padding excluded).
    #[default]
    Mean,
    /// The first token's vector (BERT's `[CLS]`).
    Cls,
}
names!(Pooling { Mean = "mean", Cls = "cls" });

/// `[student.transformer]` (or `[teacher.arch.transformer]`): a transformer over token ids.
/// The sequence length is `data.input_shape = [s]` (for text, the longest tokenised sentence
/// kept; longer ones are truncated). Attention is bidirectional and masks padding, except under
/// a language-model head (`head = "lm"`), where it is causal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
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
    /// Pre-norm (GPT-2, Llama) or post-norm (BERT) layers.
    #[serde(default)]
    pub norm_position: NormPosition,
    /// The norms' epsilon (PyTorch's default 1e-5; BERT 1e-12). No effect on memory.
    #[serde(default = "norm_eps")]
    pub norm_eps: f64,
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
    /// Rotary positions (Su et al. 2021, arXiv:2104.09864) with this base `theta`: each head's
    /// query and key pairs `(i, i + d_head/2)` rotated by `pos * theta^(-2i/d_head)` (the Hugging
    /// Face Llama layout; Llama 10000, SmolLM2 100000). Unset: no rotary positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// Rows of a token-type (segment) embedding, BERT: 2; 0 for none. Every token is type 0.
    #[serde(default)]
    pub token_types: u64,
    #[serde(default)]
    pub head: HeadKind,
    /// Pooling of the `classifier` and `embedding` heads.
    #[serde(default)]
    pub pooling: Pooling,
    /// L2-normalise the `embedding` head's output (unit vectors, as all-MiniLM-L6-v2 returns).
    #[serde(default)]
    pub normalize: bool,
    /// Share the LM head's weight with the token embedding (GPT-2).
    #[serde(default)]
    pub tie_embeddings: bool,
    /// Rank r of a factorised language-model head: `head.down` [r, d_model] then `head.up`
    /// [vocab, r], d x r + r x vocab multiply-adds a token instead of d x vocab (a low-rank
    /// head; the untied token embedding stays whole, its lookup costs nothing). Unset: one
    /// [vocab, d_model] matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_rank: Option<u64>,
    /// Biases on the attention and feed-forward projections and on an untied head (GPT-2:
    /// yes, Llama: no).
    #[serde(default = "yes")]
    pub bias: bool,
}

impl StudentSpec {
    /// A transformer with a language-model head (`head = "lm"`): causal, next-token logits
    /// [B, S, vocab], trained on packed text.
    pub fn is_language_model(&self) -> bool {
        self.family == Family::Transformer && self.transformer.as_ref().is_some_and(|t| t.head == HeadKind::Lm)
    }
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
