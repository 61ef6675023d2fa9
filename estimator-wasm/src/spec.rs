//! The cfg.toml schema, shared by `distill` (trainer, planner) and the browser estimator.
//!
//! One file describes one distillation run:
//!
//! ```toml
//! [data]                      # what the student sees
//! train = "train.npz"         # paths are relative to the cfg.toml (used by distill only)
//! test = "test.npz"
//! input_shape = [1, 28, 28]   # one sample: [C, H, W] or [D]
//! classes = 10
//! scale = 0.00392156862745098 # x * scale, then (x - mean) / std per channel
//! mean = [0.2860]
//! std = [0.3530]
//!
//! [teacher]
//! output = "logits"           # dict key or tuple index of the logits; omit for a plain tensor
//!
//! [student]                   # expanded into layers by `crate::arch`
//! family = "cnn"
//! channels = [8, 16]
//! hidden = [32]
//!
//! [kd]                        # L = alpha * T^2 * KL(p_t || p_s) + (1 - alpha) * CE(s, y)
//! temperature = 4.0
//! alpha = 0.9
//!
//! [train]
//! epochs = 10
//! batch_size = 128            # or "auto": the largest that fits the device
//! ```
//!
//! Every table rejects unknown keys, so a typo is an error with its line and column, never a
//! silently ignored setting. Every count and size is bounded (`crate::limits`, with the bound
//! of each key) before any work grows with it; names (enum values, presets, GPUs) follow one
//! matching rule (`crate::names`). [`Config::from_toml_str`] parses and then [`Config::validate`]s.
use serde::{Deserialize, Serialize};

use crate::batch::MAX_BATCH;
use crate::error::SpecError;
use crate::limits::{self, MAX_BLOCKS, MAX_EPOCHS, MAX_LAYERS, MAX_SIZE};
use crate::names::names;

/// A whole cfg.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub data: DataSpec,
    #[serde(default)]
    pub teacher: TeacherSpec,
    pub student: StudentSpec,
    #[serde(default)]
    pub kd: KdSpec,
    #[serde(default)]
    pub train: TrainSpec,
    /// Pruning of the student; absent means a dense student.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<PruneSpec>,
    /// Memory-estimate settings (GPU, parallelism, runtime reserves); ignored by training.
    #[serde(default, skip_serializing_if = "EstimateSpec::is_default")]
    pub estimate: EstimateSpec,
}

/// `[data]`: the dataset files and the per-sample input the student receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// `.npz` with `x` (`[N, C, H, W]` or `[N, D]`, uint8 or float) and `y` (integer labels `[N]`).
    /// Relative to the cfg.toml's folder. Needed by `distill`, not by the estimator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<String>,
    /// Held-out `.npz` in the same layout; when absent, `holdout` of `train` is held out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    /// Fraction of `train` held out as the test set when `test` is absent (0 < holdout < 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout: Option<f64>,
    /// Shape of one sample as the student sees it: `[C, H, W]` or `[D]`, each 1 to 2^24.
    pub input_shape: Vec<u64>,
    /// Number of classes: the student's output width and the exclusive bound on labels (2 to 2^24).
    pub classes: u64,
    /// Multiplier applied to `x` before normalisation (1/255 for uint8 pixels).
    #[serde(default = "one")]
    pub scale: f64,
    /// Per-channel mean subtracted after scaling: one value, or one per channel (C).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mean: Vec<f64>,
    /// Per-channel standard deviation divided after subtracting `mean`; same length rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub std: Vec<f64>,
}

/// Which entry of the teacher's output holds the logits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OutputSelector {
    /// Position in a tuple or list output.
    Index(u64),
    /// Key in a dict output.
    Key(String),
}

/// `[teacher]`: how to read the frozen teacher's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeacherSpec {
    /// Dict key or tuple index of the logits [N, classes]; `None` for a plain tensor output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSelector>,
    /// Precision the frozen teacher runs in (its weights are cast once at load).
    #[serde(default)]
    pub precision: Precision,
    /// Compute the teacher's logits for the whole train set once, before training, instead of
    /// on every batch (the same soft targets: the teacher is frozen and the data not augmented).
    /// Costs N x classes x 4 bytes; frees the teacher's per-step forward.
    #[serde(default = "yes")]
    pub cache_logits: bool,
    /// Exact parameter count of the teacher, in elements (1 to 2^50). `distill` reads it from the
    /// TorchScript file; the estimator otherwise derives it from `preset` or `arch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    /// Non-trainable buffers of the teacher (BatchNorm statistics), in elements (at most 2^50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<u64>,
    /// A named teacher architecture known to the estimator (`crate::teacher::PRESETS`), e.g.
    /// `"fashion-mnist-cnn"` or `"gpt2"`: its size and inference working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The teacher's architecture in the `[student]` schema (`[teacher.arch]`), for the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<Box<StudentSpec>>,
}

/// Student architecture family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `nn.LayerNorm(d)`: weight and bias.
    #[default]
    Layer,
    /// `nn.RMSNorm(d)` (Zhang & Sennrich 2019): weight only.
    Rms,
}
names!(NormKind { Layer = "layer", Rms = "rms" });

/// Attention kernel, which decides whether the `[s, s]` score matrices are saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
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

/// `[kd]`: Hinton et al. 2015 (arXiv:1503.02531) soft-target distillation.
///
/// `L = alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) * CE(s, y)`, with the KL
/// summed over classes and averaged over samples (PyTorch's `batchmean`). `alpha = 0` trains on
/// labels alone (no teacher), `alpha = 1` on soft targets alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KdSpec {
    /// Softmax temperature T > 0 applied to both teacher and student logits in the KL term.
    #[serde(default = "four")]
    pub temperature: f64,
    /// Weight of the soft-target term, in [0, 1].
    #[serde(default = "point_nine")]
    pub alpha: f64,
}

impl Default for KdSpec {
    fn default() -> Self {
        KdSpec { temperature: 4.0, alpha: 0.9 }
    }
}

impl Default for TeacherSpec {
    fn default() -> Self {
        TeacherSpec {
            output: None,
            precision: Precision::Fp32,
            cache_logits: true,
            params: None,
            buffers: None,
            preset: None,
            arch: None,
        }
    }
}

/// Micro-batch size: a number, or `"auto"` for the largest that fits the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSize {
    Fixed(u64),
    Auto,
}

/// Optimiser of the student's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Loshchilov & Hutter decoupled weight decay (as `torch.optim.AdamW`).
    #[default]
    Adamw,
    /// SGD with (optionally Nesterov) momentum and L2 weight decay (as `torch.optim.SGD`).
    Sgd,
}
names!(Optimizer { Adamw = "adamw", Sgd = "sgd" });

/// Numeric precision of a network's forward and backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Fp32,
    /// Autocast to float16 over fp32 weights; the student also gets dynamic loss scaling.
    Fp16,
    /// Autocast to bfloat16 over fp32 weights; no loss scaling.
    Bf16,
    /// bf16 weights, gradients and optimiser states, no fp32 copy (8 bytes per parameter
    /// with AdamW). Estimator only; `distill` trains fp32, fp16 and bf16.
    PureBf16,
    /// bf16 weights and gradients with an fp32 master copy in the optimiser, as Megatron and
    /// DeepSpeed train (2 + 2 + 12 bytes per parameter with AdamW). Estimator only.
    Bf16Master,
}
names!(Precision { Fp32 = "fp32", Fp16 = "fp16", Bf16 = "bf16", PureBf16 = "pure_bf16", Bf16Master = "bf16_master" });

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

/// How pruned weights are chosen and removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PruneMethod {
    /// Unstructured magnitude pruning with masks (Zhu & Gupta 2017, arXiv:1710.01878).
    #[default]
    Magnitude,
    /// Whole neurons (MLP) or channels (CNN) ranked by L1 norm, physically removed.
    Structured,
}
names!(PruneMethod { Magnitude = "magnitude", Structured = "structured" });

/// Whether magnitude ranking pools all prunable weights or runs per layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PruneScope {
    #[default]
    Global,
    Layer,
}
names!(PruneScope { Global = "global", Layer = "layer" });

/// `[prune]`: gradual pruning of the student's conv and linear weights on the cubic schedule
/// `s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (n * dt))^3` (Zhu & Gupta 2017), in optimiser steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneSpec {
    #[serde(default)]
    pub method: PruneMethod,
    /// Ranking of magnitude pruning: `global` (the default) or `layer`. Structured pruning
    /// ranks units within each layer; `scope = "global"` with it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<PruneScope>,
    /// Final sparsity s_f: fraction of weights (magnitude) or of neurons/channels (structured).
    pub sparsity: f64,
    /// Initial sparsity s_i at the first pruning event.
    #[serde(default)]
    pub initial_sparsity: f64,
    /// First pruning event t0, in epochs (fractional; converted with the real loader length).
    #[serde(default)]
    pub start_epoch: f64,
    /// Last pruning event t0 + n * dt, in epochs; the final sparsity is reached exactly there.
    /// Default: 3/4 of the run, or `start_epoch` when later (one-shot pruning there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_epoch: Option<f64>,
    /// Steps between pruning events (dt).
    #[serde(default = "hundred")]
    pub every_steps: u64,
    /// L1 regularisation coefficient added to the loss over the prunable weights.
    #[serde(default)]
    pub l1: f64,
}

/// Where the training step runs: decides which tensors autograd saves and in which dtype
/// (`memory-model.md` section 10) and whether allocator and CUDA runtime costs apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A CUDA GPU: bool dropout masks, fp32 norms and softmax under autocast, caching allocator.
    #[default]
    Cuda,
    /// PyTorch on CPU: dropout masks in the input dtype, norms in the input dtype under
    /// autocast, exact tensor bytes (what the fidelity check measures).
    Cpu,
}
names!(Target { Cuda = "cuda", Cpu = "cpu" });

/// Element type of the unstructured-pruning masks the trainer keeps per pruned weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MaskDtype {
    /// 1 byte per weight.
    #[default]
    Bool,
    /// 4 bytes per weight (an fp32 0/1 tensor, as `torch.nn.utils.prune` keeps).
    Float,
}
names!(MaskDtype { Bool = "bool", Float = "float" });

/// `[estimate]`: how the memory estimate is made. Ignored by training; every key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateSpec {
    /// A GPU of the catalogue (`crate::catalogue`), e.g. `"A100-80GB"` or
    /// `"A100-40GB-MIG-1g.5gb"`, matched by `crate::names`' rule (`"a100 80gb"` too) and stored
    /// as its catalogue name; absent: no fit check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default)]
    pub target: Target,
    /// Data-parallel degree N (GPUs holding a replica or a ZeRO shard).
    #[serde(default = "one_u64")]
    pub data_parallel: u64,
    /// ZeRO stage (Rajbhandari et al. 2020, arXiv:1910.02054): 0 = plain DDP replicas,
    /// 1 = optimiser states sharded, 2 = + gradients, 3 = + weights (FSDP full shard).
    #[serde(default)]
    pub zero_stage: u64,
    /// DDP `gradient_as_bucket_view=True`: gradients live in the all-reduce buckets instead
    /// of a second copy (stage 0 with data_parallel > 1 only).
    #[serde(default)]
    pub bucket_view: bool,
    /// Tensor-parallel degree t (Megatron column/row splits; norms replicated).
    #[serde(default = "one_u64")]
    pub tensor_parallel: u64,
    /// Pipeline stages p (1F1B schedule: stage j keeps p - j micro-batches in flight).
    #[serde(default = "one_u64")]
    pub pipeline_stages: u64,
    /// Reserve for allocator fragmentation, as a fraction of the allocator's peak (0.10 = 10%).
    #[serde(default = "default_fragmentation")]
    pub fragmentation: f64,
    /// CUDA context size in MiB, overriding the GPU catalogue's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_context_mib: Option<u64>,
    /// NCCL buffers outside the allocator in MiB; default 0 on one GPU, 512 on several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_mib: Option<u64>,
    /// Share of the GPU kept free when `train.batch_size = "auto"` picks the batch.
    #[serde(default = "default_safety_margin")]
    pub safety_margin: f64,
    #[serde(default)]
    pub prune_mask: MaskDtype,
}

impl Default for EstimateSpec {
    fn default() -> Self {
        EstimateSpec {
            gpu: None,
            target: Target::Cuda,
            data_parallel: 1,
            zero_stage: 0,
            bucket_view: false,
            tensor_parallel: 1,
            pipeline_stages: 1,
            fragmentation: default_fragmentation(),
            cuda_context_mib: None,
            nccl_mib: None,
            safety_margin: default_safety_margin(),
            prune_mask: MaskDtype::Bool,
        }
    }
}

impl EstimateSpec {
    /// True when every key has its default (the table is then left out of serialised TOML).
    pub fn is_default(&self) -> bool {
        *self == EstimateSpec::default()
    }

    fn validate(&self) -> Result<(), SpecError> {
        for (key, v) in [
            ("estimate.data_parallel", self.data_parallel),
            ("estimate.tensor_parallel", self.tensor_parallel),
            ("estimate.pipeline_stages", self.pipeline_stages),
        ] {
            limits::within(key, v, 1, 1 << 20)?;
        }
        if self.zero_stage > 3 {
            return invalid("estimate.zero_stage", "must be 0 (DDP), 1, 2 or 3");
        }
        if !(self.fragmentation.is_finite() && (0.0..=4.0).contains(&self.fragmentation)) {
            return invalid("estimate.fragmentation", "must be a fraction between 0 and 4 (typical: 0.05 to 0.15)");
        }
        check_safety_margin(self.safety_margin)?;
        for (key, v) in [("estimate.cuda_context_mib", self.cuda_context_mib), ("estimate.nccl_mib", self.nccl_mib)] {
            if v.is_some_and(|v| v > 1 << 30) {
                return invalid(key, "is larger than any GPU (at most 2^30 MiB)");
            }
        }
        if let Some(name) = &self.gpu {
            crate::catalogue::gpu(name)
                .map_err(|e| SpecError::Invalid { key: "estimate.gpu".into(), message: e.to_string() })?;
        }
        Ok(())
    }
}

/// `[train]`: optimisation schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    /// Passes over the train set, 1 to 1,000,000.
    #[serde(default = "ten")]
    pub epochs: u64,
    /// Micro-batch in samples, 1 to 2^40, or `"auto"`.
    #[serde(default = "default_batch")]
    pub batch_size: BatchSize,
    /// Batch size for evaluation passes (no gradients, so it can be larger), 1 to 2^40.
    #[serde(default = "default_eval_batch")]
    pub eval_batch_size: u64,
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Peak learning rate, reached after warm-up; cosine-decayed to `min_lr` at the last step.
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default)]
    pub min_lr: f64,
    /// Linear warm-up from 0 to `lr` over this many optimiser steps.
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    /// SGD momentum (ignored by AdamW).
    #[serde(default = "point_nine")]
    pub momentum: f64,
    #[serde(default)]
    pub nesterov: bool,
    /// AdamW (beta1, beta2).
    #[serde(default = "default_betas")]
    pub betas: [f64; 2],
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// Student precision: fp32, or autocast fp16 (with dynamic loss scaling) / bf16 over fp32
    /// master weights. The KD and CE losses are always computed in fp32.
    #[serde(default)]
    pub precision: Precision,
    /// Save a resumable checkpoint every this many optimiser steps (0: only at epoch ends).
    #[serde(default)]
    pub save_every: u64,
    /// Keep the newest this many checkpoints.
    #[serde(default = "three")]
    pub keep_checkpoints: u64,
    /// Seed of weight init, data order and dropout.
    #[serde(default)]
    pub seed: u64,
    /// Write a `metrics.jsonl` line every this many optimiser steps.
    #[serde(default = "fifty")]
    pub log_every: u64,
}

impl Default for TrainSpec {
    fn default() -> Self {
        // (panics by Display: `expect` would pull the errors' Debug code into the wasm)
        crate::toml_text::parse("").unwrap_or_else(|e| panic!("every TrainSpec field has a default: {e}"))
    }
}

impl Config {
    /// Parses and validates a cfg.toml.
    ///
    /// # Errors
    /// [`SpecError::Parse`] (with line and column, and the key path where it is known) for
    /// TOML syntax, unknown keys and wrong types; [`SpecError::Invalid`] (with the key path)
    /// for values out of range.
    /// A GPU or preset name written loosely (`crate::names`) is stored as its exact name.
    pub fn from_toml_str(text: &str) -> Result<Config, SpecError> {
        let mut config: Config = crate::toml_text::parse(text)?;
        if let Some(g) = config.estimate.gpu.as_mut() {
            if let Ok(found) = crate::catalogue::gpu(g) {
                *g = found.name.to_string();
            }
        }
        if let Some(p) = config.teacher.preset.as_mut() {
            if let Some(found) = crate::teacher::preset(p) {
                *p = found.name.to_string();
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Serialises back to TOML that [`Config::from_toml_str`] accepts.
    pub fn to_toml_string(&self) -> String {
        basic_toml::to_string(self).unwrap_or_else(|e| panic!("a Config always serialises: {e}"))
    }

    /// Checks every value range and cross-field rule.
    ///
    /// # Errors
    /// [`SpecError::Invalid`] naming the offending key and the accepted values.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.data.validate()?;
        self.student.validate(&self.data)?;
        self.kd.validate()?;
        self.train.validate()?;
        self.teacher.validate(&self.data)?;
        self.estimate.validate()?;
        if let Some(t) = &self.student.transformer {
            t.validate_parallel("student.transformer", self.estimate.tensor_parallel)?;
        }
        match &self.prune {
            Some(prune) => prune.validate(&self.train, &self.student),
            None => Ok(()),
        }
    }
}

impl DataSpec {
    /// Number of input channels (the first dimension of `input_shape`).
    pub fn channels(&self) -> u64 {
        self.input_shape.first().copied().unwrap_or(0)
    }

    fn validate(&self) -> Result<(), SpecError> {
        let shape = &self.input_shape;
        if !(shape.len() == 1 || shape.len() == 3) {
            return invalid("data.input_shape", "must be [C, H, W] or [D]");
        }
        limits::list("data.input_shape", shape, 3, 1, MAX_SIZE)?;
        limits::within("data.classes", self.classes, 2, MAX_SIZE)?;
        if !(self.scale.is_finite() && self.scale != 0.0) {
            return invalid("data.scale", "must be a finite non-zero number");
        }
        for (key, values) in [("data.mean", &self.mean), ("data.std", &self.std)] {
            if !(values.is_empty() || values.len() == 1 || values.len() as u64 == self.channels()) {
                return invalid(key, "must hold one value or one per input channel");
            }
            if values.iter().any(|v| !v.is_finite()) {
                return invalid(key, "must hold finite numbers");
            }
        }
        if self.std.iter().any(|&s| s <= 0.0) {
            return invalid("data.std", "must be positive");
        }
        if let Some(h) = self.holdout {
            if !(h > 0.0 && h < 1.0) {
                return invalid("data.holdout", "must be a fraction between 0 and 1");
            }
        }
        Ok(())
    }
}

impl StudentSpec {
    fn validate(&self, data: &DataSpec) -> Result<(), SpecError> {
        self.validate_at("student", data)
    }

    /// Validates this architecture with error keys under `prefix` (`student` or `teacher.arch`).
    fn validate_at(&self, prefix: &str, data: &DataSpec) -> Result<(), SpecError> {
        let key = |k: &str| format!("{prefix}.{k}");
        match self.family {
            Family::Mlp if !self.channels.is_empty() => {
                return invalid(&key("channels"), "is only for family = \"cnn\"; remove it");
            }
            Family::Cnn if self.channels.is_empty() => {
                return invalid(&key("channels"), "family = \"cnn\" needs at least one conv block");
            }
            Family::Cnn if data.input_shape.len() != 3 => {
                return invalid("data.input_shape", "family = \"cnn\" needs [C, H, W]");
            }
            Family::Cnn if self.norm == Norm::Layer => {
                return invalid(&key("norm"), "\"layer\" is for mlp students; use \"batch\" or \"none\"");
            }
            _ => {}
        }
        match (self.family, &self.transformer) {
            (Family::Transformer, None) => {
                return invalid(&key("transformer"), "family = \"transformer\" needs a [transformer] table");
            }
            (Family::Mlp | Family::Cnn, Some(_)) => {
                return invalid(&key("transformer"), "is only for family = \"transformer\"; remove it");
            }
            (Family::Transformer, Some(t)) => {
                if !self.channels.is_empty() || !self.hidden.is_empty() {
                    return invalid(
                        &key("hidden"),
                        "a transformer takes its sizes from [transformer]; remove hidden/channels",
                    );
                }
                if self.norm != Norm::None {
                    return invalid(
                        &key("norm"),
                        "a transformer sets its norm in [transformer] norm = \"layer\" or \"rms\"",
                    );
                }
                t.validate(&key("transformer"), data)?;
            }
            _ => {}
        }
        limits::list(&key("channels"), &self.channels, MAX_BLOCKS, 1, MAX_SIZE)?;
        limits::list(&key("hidden"), &self.hidden, MAX_BLOCKS, 1, MAX_SIZE)?;
        limits::within(&key("kernel"), self.kernel, 1, MAX_SIZE)?;
        if self.kernel % 2 == 0 {
            return invalid(&key("kernel"), "must be odd");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return invalid(&key("dropout"), "must be in [0, 1)");
        }
        // Shapes must stay positive through every pooling stage.
        crate::arch::layers(self, data)
            .map_err(|e| match e {
                SpecError::Invalid { key: k, message } if prefix != "student" => {
                    SpecError::Invalid { key: k.replacen("student", prefix, 1), message }
                }
                other => other,
            })
            .map(|_| ())
    }
}

impl TransformerSpec {
    fn validate(&self, prefix: &str, data: &DataSpec) -> Result<(), SpecError> {
        let key = |k: &str| format!("{prefix}.{k}");
        if data.input_shape.len() != 1 {
            return invalid("data.input_shape", "a transformer needs [sequence_length]");
        }
        for (name, v, max) in [
            ("layers", self.layers, MAX_LAYERS),
            ("vocab", self.vocab, MAX_SIZE),
            ("d_model", self.d_model, MAX_SIZE),
            ("heads", self.heads, MAX_SIZE),
            ("mlp_width", self.mlp_width(), MAX_SIZE),
            ("max_positions", self.max_positions.max(1), MAX_SIZE),
        ] {
            limits::within(&key(name), v, 1, max)?;
        }
        if self.d_model % self.heads != 0 {
            return invalid(&key("heads"), "must divide d_model");
        }
        let kv = self.kv_heads();
        if kv == 0 || self.heads % kv != 0 {
            return invalid(&key("kv_heads"), "must be >= 1 and divide heads");
        }
        if !(0.0..1.0).contains(&self.attention_dropout) {
            return invalid(&key("attention_dropout"), "must be in [0, 1)");
        }
        let seq = data.input_shape[0];
        if self.max_positions != 0 && self.max_positions < seq {
            return invalid(
                &key("max_positions"),
                &format!(
                    "{} positions cannot embed sequences of {seq} (data.input_shape); use 0 or >= {seq}",
                    self.max_positions
                ),
            );
        }
        match self.head {
            HeadKind::Lm if data.classes != self.vocab => invalid(
                "data.classes",
                &format!("a language-model head predicts the vocabulary: set data.classes = {}", self.vocab),
            ),
            HeadKind::Classifier if self.tie_embeddings => {
                invalid(&key("tie_embeddings"), "only a language-model head can share the embedding")
            }
            _ => Ok(()),
        }
    }

    /// Tensor parallelism splits heads (and key/value heads) across `t` GPUs.
    fn validate_parallel(&self, prefix: &str, t: u64) -> Result<(), SpecError> {
        if self.heads % t != 0 || self.kv_heads() % t != 0 {
            return invalid(
                "estimate.tensor_parallel",
                &format!("must divide {prefix}.heads ({}) and kv_heads ({})", self.heads, self.kv_heads()),
            );
        }
        Ok(())
    }
}

impl TeacherSpec {
    fn validate(&self, data: &DataSpec) -> Result<(), SpecError> {
        if self.preset.is_some() && self.arch.is_some() {
            return invalid("teacher.preset", "give either preset or arch, not both");
        }
        check_teacher_counts(self.params.unwrap_or(1), self.buffers.unwrap_or(0))?;
        if let Some(name) = &self.preset {
            crate::teacher::preset_layers(name, data)?;
        }
        if let Some(arch) = &self.arch {
            arch.validate_at("teacher.arch", data)?;
        }
        Ok(())
    }
}

impl KdSpec {
    fn validate(&self) -> Result<(), SpecError> {
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return invalid("kd.temperature", "must be a finite number > 0 (typical: 1 to 20)");
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return invalid("kd.alpha", "must be in [0, 1] (0 = labels only, 1 = soft targets only)");
        }
        Ok(())
    }
}

impl TrainSpec {
    fn validate(&self) -> Result<(), SpecError> {
        limits::within("train.epochs", self.epochs, 1, MAX_EPOCHS)?;
        if let BatchSize::Fixed(b) = self.batch_size {
            limits::within("train.batch_size", b, 1, MAX_BATCH)?;
        }
        limits::within("train.eval_batch_size", self.eval_batch_size, 1, MAX_BATCH)?;
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.lr) {
            return invalid("train.lr", "must be a finite number > 0");
        }
        if !(self.min_lr.is_finite() && (0.0..=self.lr).contains(&self.min_lr)) {
            return invalid("train.min_lr", "must be in [0, lr]");
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return invalid("train.weight_decay", "must be >= 0");
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return invalid("train.momentum", "must be in [0, 1)");
        }
        if self.betas.iter().any(|b| !(0.0..1.0).contains(b)) {
            return invalid("train.betas", "both must be in [0, 1)");
        }
        if !positive(self.eps) {
            return invalid("train.eps", "must be > 0");
        }
        if self.log_every == 0 {
            return invalid("train.log_every", "must be >= 1");
        }
        Ok(())
    }
}

impl PruneSpec {
    /// The ranking that runs: `scope`, else `global` for magnitude and `layer` for structured.
    pub fn effective_scope(&self) -> PruneScope {
        let default = if self.method == PruneMethod::Structured { PruneScope::Layer } else { PruneScope::Global };
        self.scope.unwrap_or(default)
    }

    fn validate(&self, train: &TrainSpec, student: &StudentSpec) -> Result<(), SpecError> {
        if self.method == PruneMethod::Structured {
            if self.scope == Some(PruneScope::Global) {
                return invalid(
                    "prune.scope",
                    "structured pruning ranks units within each layer: remove scope or set scope = \"layer\"",
                );
            }
            if student.norm == Norm::Layer && !student.hidden.is_empty() {
                let why = "its statistics span all units, so removing one changes the others";
                let fix = "use norm \"batch\" or \"none\", or method \"magnitude\"";
                return invalid(
                    "prune.method",
                    &format!("\"structured\" meets student.norm = \"layer\" ({why}): {fix}"),
                );
            }
        }
        if !(0.0..1.0).contains(&self.sparsity) {
            return invalid("prune.sparsity", "must be in [0, 1)");
        }
        if !(0.0..=self.sparsity).contains(&self.initial_sparsity) {
            return invalid("prune.initial_sparsity", "must be in [0, sparsity]");
        }
        let end = self.end_epoch.unwrap_or(train.epochs as f64);
        if !(self.start_epoch >= 0.0 && self.start_epoch <= end && end <= train.epochs as f64) {
            return invalid("prune.end_epoch", "needs 0 <= start_epoch <= end_epoch <= train.epochs");
        }
        if self.every_steps == 0 {
            return invalid("prune.every_steps", "must be >= 1");
        }
        if !(self.l1.is_finite() && self.l1 >= 0.0) {
            return invalid("prune.l1", "must be >= 0");
        }
        Ok(())
    }
}

impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Checkpointing::None => s.serialize_str("none"),
            Checkpointing::Sqrt => s.serialize_str("sqrt"),
            Checkpointing::Segments(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Checkpointing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const EXPECTED: &str = "checkpointing must be \"none\", \"sqrt\" or a number of segments >= 1";
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Checkpointing;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Checkpointing, E> {
                match u64::try_from(v) {
                    Ok(n) if n >= 1 => Ok(Checkpointing::Segments(n)),
                    _ => Err(E::custom(EXPECTED)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Checkpointing, E> {
                self.visit_i64(i64::try_from(v).map_err(|_| E::custom(EXPECTED))?)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Checkpointing, E> {
                match crate::names::index(v, &["none", "sqrt"]) {
                    Some(0) => Ok(Checkpointing::None),
                    Some(_) => Ok(Checkpointing::Sqrt),
                    None => Err(E::custom(EXPECTED)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Serialize for BatchSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BatchSize::Fixed(n) => s.serialize_u64(*n),
            BatchSize::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for BatchSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = BatchSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a positive integer or \"auto\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<BatchSize, E> {
                u64::try_from(v)
                    .map(BatchSize::Fixed)
                    .map_err(|_| E::custom("batch_size must be a positive integer or \"auto\""))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<BatchSize, E> {
                Ok(BatchSize::Fixed(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BatchSize, E> {
                match crate::names::same(v, "auto") {
                    true => Ok(BatchSize::Auto),
                    false => Err(E::custom("batch_size must be a positive integer or \"auto\"")),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `estimate.safety_margin` (or a margin a caller passes): a fraction in [0, 1).
///
/// # Errors
/// [`SpecError::Invalid`] on `estimate.safety_margin` otherwise.
pub fn check_safety_margin(margin: f64) -> Result<(), SpecError> {
    if margin.is_finite() && (0.0..1.0).contains(&margin) {
        return Ok(());
    }
    invalid("estimate.safety_margin", "must be a fraction in [0, 1) (typical: 0.05)")
}

/// `teacher.params` and `teacher.buffers` (or the counts a caller passes): 1 to 2^50
/// parameters (a thousand times the largest published model; their bytes then fit 64 bits)
/// and at most 2^50 buffers.
///
/// # Errors
/// [`SpecError::Invalid`] on `teacher.params` or `teacher.buffers` otherwise.
pub fn check_teacher_counts(params: u64, buffers: u64) -> Result<(), SpecError> {
    limits::within("teacher.params", params, 1, 1 << 50)?;
    limits::within("teacher.buffers", buffers, 0, 1 << 50)
}

fn invalid<T>(key: &str, message: &str) -> Result<T, SpecError> {
    Err(SpecError::Invalid { key: key.to_string(), message: message.to_string() })
}

fn yes() -> bool {
    true
}
fn one() -> f64 {
    1.0
}
fn one_u64() -> u64 {
    1
}
fn default_fragmentation() -> f64 {
    0.10
}
fn default_safety_margin() -> f64 {
    0.05
}
fn three() -> u64 {
    3
}
fn four() -> f64 {
    4.0
}
fn ten() -> u64 {
    10
}
fn hundred() -> u64 {
    100
}
fn fifty() -> u64 {
    50
}
fn point_nine() -> f64 {
    0.9
}
fn default_batch() -> BatchSize {
    BatchSize::Fixed(128)
}
fn default_eval_batch() -> u64 {
    1024
}
fn default_lr() -> f64 {
    1e-3
}
fn default_weight_decay() -> f64 {
    0.01
}
fn default_betas() -> [f64; 2] {
    [0.9, 0.999]
}
fn default_eps() -> f64 {
    1e-8
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\n";

    #[test]
    fn defaults_fill_every_optional_key() {
        let c = Config::from_toml_str(MINIMAL).unwrap();
        assert_eq!(c.kd, KdSpec { temperature: 4.0, alpha: 0.9 });
        assert_eq!(c.train.batch_size, BatchSize::Fixed(128));
        assert_eq!(c.train.optimizer, Optimizer::Adamw);
        assert_eq!(c.train.lr, 1e-3);
        assert_eq!(c.student.checkpointing, Checkpointing::None);
        assert_eq!(c.prune, None);
    }

    #[test]
    fn unknown_key_names_line_and_column() {
        let e = Config::from_toml_str(&format!("{MINIMAL}hiden = [10]\n")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("TOML parse error at line 6, column 1: unknown field `hiden`"), "{msg}");
        assert!(msg.ends_with("for key `student`"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }

    #[test]
    fn wrong_types_and_bad_syntax_name_the_place() {
        let e = Config::from_toml_str(&format!("{MINIMAL}[train]\nepochs = \"x\"\n")).unwrap_err();
        assert_eq!(
            e,
            SpecError::Parse {
                place: Some((7, 10)),
                reason: "invalid type: string \"x\", expected u64 for key `train.epochs`".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "TOML parse error at line 7, column 10: invalid type: string \"x\", expected u64 for key `train.epochs`"
        );
        let e = Config::from_toml_str(&format!("{MINIMAL}[kd]\nalpha = \n")).unwrap_err();
        assert!(e.to_string().starts_with("TOML parse error at line 7, column 9: expected a value"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        let cases = [
            ("[kd]\nalpha = 1.5\n", "kd.alpha"),
            ("[kd]\ntemperature = 0.0\n", "kd.temperature"),
            ("[train]\nlr = -1.0\n", "train.lr"),
            ("[train]\nbatch_size = 0\n", "train.batch_size"),
            ("[prune]\nsparsity = 1.0\n", "prune.sparsity"),
            ("[prune]\nmethod = \"structured\"\nscope = \"global\"\nsparsity = 0.5\n", "prune.scope"),
            ("hidden = [8]\nnorm = \"layer\"\n[prune]\nmethod = \"structured\"\nsparsity = 0.5\n", "prune.method"),
        ];
        for (extra, key) in cases {
            match Config::from_toml_str(&format!("{MINIMAL}{extra}")) {
                Err(SpecError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{extra}: expected an Invalid error on {key}, got {other:?}"),
            }
        }
    }

    #[test]
    fn batch_size_and_checkpointing_accept_words_and_numbers() {
        let c = Config::from_toml_str(&format!("{MINIMAL}checkpointing = \"sqrt\"\n[train]\nbatch_size = \"auto\"\n"))
            .unwrap();
        assert_eq!(c.train.batch_size, BatchSize::Auto);
        assert_eq!(c.student.checkpointing, Checkpointing::Sqrt);
        let c = Config::from_toml_str(&format!("{MINIMAL}checkpointing = 3\n")).unwrap();
        assert_eq!(c.student.checkpointing, Checkpointing::Segments(3));
        assert!(Config::from_toml_str(&format!("{MINIMAL}checkpointing = 0\n")).is_err());
        assert!(Config::from_toml_str(&format!("{MINIMAL}[train]\nbatch_size = \"big\"\n")).is_err());
    }

    #[test]
    fn enum_names_are_the_names_serde_writes() {
        fn check<T: Serialize>(values: &[T], names: &[&str]) {
            assert_eq!(values.len(), names.len());
            for (v, n) in values.iter().zip(names) {
                assert_eq!(serde_json::to_value(v).unwrap(), *n);
            }
        }
        check(Family::VALUES, Family::NAMES);
        check(Activation::VALUES, Activation::NAMES);
        check(Norm::VALUES, Norm::NAMES);
        check(Pool::VALUES, Pool::NAMES);
        check(MlpKind::VALUES, MlpKind::NAMES);
        check(NormKind::VALUES, NormKind::NAMES);
        check(AttentionKernel::VALUES, AttentionKernel::NAMES);
        check(HeadKind::VALUES, HeadKind::NAMES);
        check(Optimizer::VALUES, Optimizer::NAMES);
        check(Precision::VALUES, Precision::NAMES);
        check(PruneMethod::VALUES, PruneMethod::NAMES);
        check(PruneScope::VALUES, PruneScope::NAMES);
        check(Target::VALUES, Target::NAMES);
        check(MaskDtype::VALUES, MaskDtype::NAMES);
    }

    #[test]
    fn serialised_config_parses_back_equal() {
        let text = include_str!("../../examples/fashion-mnist/student.toml");
        let c = Config::from_toml_str(text).unwrap();
        assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
    }
}
