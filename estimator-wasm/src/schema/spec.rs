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
//! [student]                   # expanded into layers by `crate::schema::arch`
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
//! silently ignored setting. Every count and size is bounded (`crate::schema::limits`, with the bound
//! of each key) before any work grows with it; names (enum values, presets, GPUs) follow one
//! matching rule (`crate::schema::names`). [`Config::from_toml_str`] parses and then [`Config::validate`]s.
use serde::{Deserialize, Serialize};

use crate::schema::defaults::*;
pub use crate::schema::kd_spec::{KdDivergence, KdObjective, KdSpec};
use crate::schema::names::names;
use crate::schema::student_spec::StudentSpec;
use crate::schema::tables::tables;

tables!(Config, DataSpec, TeacherSpec, PruneSpec, EstimateSpec, TrainSpec);

fn default_batch() -> BatchSize {
    BatchSize::Fixed(128)
}

/// A whole cfg.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
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
#[serde(deny_unknown_fields, remote = "Self")]
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
    /// Text data (`train`/`test` are `.txt` files, one sentence per line): the Hugging Face
    /// `tokenizer.json` that turns lines into token ids (the teacher's own), relative to the
    /// cfg.toml's folder. Its padding setting is ignored: batches are padded to their longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Text only: batch sentences of similar length together (pools of 50 batches sorted by
    /// length, the batches shuffled; Hugging Face's `group_by_length`), so less padding is
    /// computed. Off: plain shuffled batches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bucket_by_length: bool,
    /// Shape of one sample as the student sees it: `[C, H, W]` or `[D]`, each 1 to 2^24; for
    /// token ids `[S]`, the most tokens per sequence (longer ones are truncated and counted).
    pub input_shape: Vec<u64>,
    /// The student's output width (2 to 2^24): the number of classes, the exclusive bound on
    /// labels; for an `embedding` head, the embedding's width (the teacher's, e.g. 384).
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

/// Which entry of the teacher's output holds the logits: a TOML integer or string
/// (serde by hand in `toml_text`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputSelector {
    /// Position in a tuple or list output.
    Index(u64),
    /// Key in a dict output.
    Key(String),
}

/// `[teacher]`: how to read the frozen teacher's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
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
    /// A named teacher architecture known to the estimator (`crate::schema::teacher_presets::PRESETS`), e.g.
    /// `"fashion-mnist-cnn"` or `"gpt2"`: its size and inference working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The teacher's architecture in the `[student]` schema (`[teacher.arch]`), for the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<Box<StudentSpec>>,
    /// A Hugging Face model folder of the Llama family (`config.json`, safetensors,
    /// `tokenizer.json`), relative to the cfg.toml: the teacher when `--teacher` is not given,
    /// priced from its `config.json` (`distill plan`), its `tokenizer.json` the data's by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf: Option<String>,
    /// A language model's teacher whose vocabulary is padded past its tokenizer's: the width of
    /// its logits [B, S, vocab] (e.g. 640 for a tokenizer of 512 tokens, rows added to round
    /// the embedding up). KD then compares the teacher's first `data.classes` columns (the
    /// vocabulary shared with the tokenizer and the student, renormalised over it) and
    /// `student.init_from_teacher` copies the first `data.classes` rows of its token tables.
    /// `None`: the teacher's logits are `data.classes` wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<u64>,
}

impl TeacherSpec {
    /// `data` as the teacher reads it: `classes` is the width of its logits (`vocab` when set).
    pub fn logit_data(&self, data: &DataSpec) -> DataSpec {
        DataSpec { classes: self.vocab.unwrap_or(data.classes), ..data.clone() }
    }

    /// `(the teacher's logit width, the shared vocabulary)` when the teacher's vocabulary is
    /// padded past the student's `classes`; `None` when their widths are one.
    pub fn padded_vocab(&self, classes: u64) -> Option<(u64, u64)> {
        self.vocab.filter(|&v| v > classes).map(|v| (v, classes))
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
            hf: None,
            vocab: None,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OptimizerKind {
    /// Loshchilov & Hutter decoupled weight decay (as `torch.optim.AdamW`).
    #[default]
    Adamw,
    /// SGD with (optionally Nesterov) momentum and L2 weight decay (as `torch.optim.SGD`).
    Sgd,
}
names!(OptimizerKind { Adamw = "adamw", Sgd = "sgd" });

/// Numeric precision of a network's forward and backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

/// How pruned weights are chosen and removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PruneMethod {
    /// Unstructured magnitude pruning with masks (Zhu & Gupta 2017, arXiv:1710.01878).
    #[default]
    Magnitude,
    /// Whole neurons (MLP) or channels (CNN) ranked by L1 norm, physically removed.
    Structured,
}
names!(PruneMethod { Magnitude = "magnitude", Structured = "structured" });

/// Whether magnitude ranking pools all prunable weights or runs per layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PruneScope {
    #[default]
    Global,
    Layer,
}
names!(PruneScope { Global = "global", Layer = "layer" });

/// `[prune]`: gradual pruning of the student's conv and linear weights on the cubic schedule
/// `s_t = s_f + (s_i - s_f) * (1 - (t - t0) / (n * dt))^3` (Zhu & Gupta 2017), in optimiser steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
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
/// (`docs/memory-model.md` section 10) and whether allocator and CUDA runtime costs apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
#[serde(deny_unknown_fields, remote = "Self")]
pub struct EstimateSpec {
    /// A GPU of the catalogue (`crate::schema::catalogue`), e.g. `"A100-80GB"` or
    /// `"A100-40GB-MIG-1g.5gb"`, matched by `crate::schema::names`' rule (`"a100 80gb"` too) and stored
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
}

/// `[train]`: optimisation schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
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
    pub optimizer: OptimizerKind,
    /// Peak learning rate, reached after warm-up; cosine-decayed to `min_lr` at the last step.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Learning rate the cosine decay ends at, on the last optimiser step.
    #[serde(default)]
    pub min_lr: f64,
    /// Linear warm-up from 0 to `lr` over this many optimiser steps.
    #[serde(default)]
    pub warmup_steps: u64,
    /// Weight decay: decoupled (AdamW, `p -= lr * weight_decay * p`) or L2 added to the
    /// gradient (SGD), on conv and linear weights only (biases and norm parameters are not
    /// decayed).
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    /// SGD momentum (ignored by AdamW).
    #[serde(default = "point_nine")]
    pub momentum: f64,
    /// SGD with Nesterov momentum (as `torch.optim.SGD(nesterov=True)`; ignored by AdamW).
    #[serde(default)]
    pub nesterov: bool,
    /// AdamW (beta1, beta2).
    #[serde(default = "default_betas")]
    pub betas: [f64; 2],
    /// AdamW's epsilon, added to the square root of the second moment in the denominator.
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

impl DataSpec {
    /// Number of input channels (the first dimension of `input_shape`).
    pub fn channels(&self) -> u64 {
        self.input_shape.first().copied().unwrap_or(0)
    }
}

impl PruneSpec {
    /// The ranking that runs: `scope`, else `global` for magnitude and `layer` for structured.
    pub fn effective_scope(&self) -> PruneScope {
        let default = if self.method == PruneMethod::Structured { PruneScope::Layer } else { PruneScope::Global };
        self.scope.unwrap_or(default)
    }
}
