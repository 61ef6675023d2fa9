//! A Hugging Face model folder as the memory estimator prices it (`distill plan`, and the run's
//! plan): its exact parameter count, and its layer list from `config.json` in the
//! `[student.transformer]` terms the estimator knows: for the Llama family pre-norm RMSNorm,
//! SwiGLU, rotary, grouped-query attention, an LM head tied or not; for GPT-2 pre-norm
//! LayerNorm, a GELU feed-forward, learned positions, biases, an LM head; for a BERT post-norm
//! LayerNorm, learned positions and token types, biases, and an embedding head pooled and
//! normalised as the folder's `modules.json` says.
//!
//! The layer list prices the teacher's working set; details it cannot express change that set
//! by a few of the largest activations' bytes at most: a `head_dim` other than
//! `hidden_size / num_attention_heads` (priced at the quotient), qwen2's biases on q/k/v only
//! (priced as biases on every projection), and a BERT pooling that concatenates several modes
//! or runs several `Dense` modules (priced as mean pooling and one projection to the final
//! width, the estimator's embedding head). The parameter count is exact
//! either way: the Llama family's read from the safetensors headers without loading a tensor,
//! GPT-2's and BERT's from `config.json` (the tensors their models read; a BERT's pooler is
//! not among them).
use std::path::Path;

use estimator_wasm::schema::arch::{self, Layer};
use estimator_wasm::schema::{
    Activation, AttentionKernel, Checkpointing, Config, Family, HeadKind, MlpKind, Norm, NormKind, NormPosition, Pool,
    Pooling, StudentSpec, TransformerSpec,
};
use estimator_wasm::TeacherModel;

use super::bert::BertConfig;
use super::config::HfConfig;
use super::gpt2::Gpt2Config;
use super::layers::Act;
use super::model_config::ModelConfig;
use super::pooling::Mode;
use super::weights::Checkpoint;
use crate::host::error::{DistillError, Result};

/// The model of `c` in the schema's terms (`[teacher.arch]`).
pub fn arch(c: &ModelConfig) -> StudentSpec {
    match c {
        ModelConfig::Llama(c) => llama_arch(c),
        ModelConfig::Gpt2(c) => gpt2_arch(c),
        ModelConfig::Bert(c) => bert_arch(c),
    }
}

/// A transformer of `t` with `activation`.
fn transformer(activation: Activation, t: TransformerSpec) -> StudentSpec {
    StudentSpec {
        family: Family::Transformer,
        channels: Vec::new(),
        kernel: 3,
        pool: Pool::None,
        hidden: Vec::new(),
        activation,
        norm: Norm::None,
        dropout: 0.0,
        checkpointing: Checkpointing::None,
        init: None,
        init_from_teacher: Vec::new(),
        transformer: Some(t),
    }
}

/// The `[student.transformer]` terms the families share, for `vocab` tokens, `layers` layers of
/// `d_model` in `heads` heads, a feed-forward of `mlp_width` and norms of `norm_eps`: eager
/// attention, one key/value head per head, a standard biased feed-forward, pre-norm LayerNorm,
/// no positions, an LM head; each family sets what it has otherwise.
fn base(vocab: i64, layers: i64, d_model: i64, heads: i64, mlp_width: i64, norm_eps: f64) -> TransformerSpec {
    TransformerSpec {
        vocab: vocab as u64,
        layers: layers as u64,
        d_model: d_model as u64,
        heads: heads as u64,
        kv_heads: None,
        mlp_width: Some(mlp_width as u64),
        mlp: MlpKind::Standard,
        norm: NormKind::Layer,
        norm_position: NormPosition::Pre,
        norm_eps,
        attention: AttentionKernel::Math,
        attention_dropout: 0.0,
        max_positions: 0,
        rope_theta: None,
        token_types: 0,
        head: HeadKind::Lm,
        pooling: Pooling::Mean,
        normalize: false,
        tie_embeddings: false,
        head_rank: None,
        bias: true,
    }
}

fn llama_arch(c: &HfConfig) -> StudentSpec {
    transformer(
        Activation::Silu,
        TransformerSpec {
            kv_heads: Some(c.kv_heads as u64),
            mlp: MlpKind::Swiglu,
            norm: NormKind::Rms,
            rope_theta: Some(c.rope_theta),
            tie_embeddings: c.tied,
            bias: c.qkv_bias || c.o_bias || c.mlp_bias,
            ..base(c.vocab, c.layers, c.hidden, c.heads, c.intermediate, c.rms_eps)
        },
    )
}

/// The schema's activation for one of transformers' (the tanh GELU prices as GELU).
fn activation(act: Act) -> Activation {
    match act {
        Act::Gelu | Act::GeluTanh => Activation::Gelu,
        Act::Relu => Activation::Relu,
    }
}

fn gpt2_arch(c: &Gpt2Config) -> StudentSpec {
    transformer(
        activation(c.act),
        TransformerSpec {
            max_positions: c.positions as u64,
            tie_embeddings: c.tied,
            ..base(c.vocab, c.layers, c.hidden, c.heads, c.inner, c.eps)
        },
    )
}

fn bert_arch(c: &BertConfig) -> StudentSpec {
    let pooling = match c.pooling.modes.as_slice() {
        [Mode::Cls] => Pooling::Cls,
        _ => Pooling::Mean,
    };
    transformer(
        activation(c.act),
        TransformerSpec {
            norm_position: NormPosition::Post,
            max_positions: c.positions as u64,
            token_types: c.token_types as u64,
            head: HeadKind::Embedding,
            pooling,
            normalize: c.pooling.normalize,
            ..base(c.vocab, c.layers, c.hidden, c.heads, c.intermediate, c.eps)
        },
    )
}

/// The layers of the folder's model reading `spec`'s data at the teacher's logit width.
///
/// # Errors
/// [`DistillError::Teacher`] naming the folder's `config.json` when the data does not fit it
/// (for a BERT, a `data.classes` other than its embedding's width).
pub fn layers(dir: &Path, c: &ModelConfig, spec: &Config) -> Result<Vec<Layer>> {
    let data = spec.teacher.logit_data(&spec.data);
    let err = |m: String| DistillError::teacher(&dir.join(super::CONFIG), m);
    if let ModelConfig::Bert(b) = c {
        if data.classes != b.width() as u64 {
            return Err(err(format!(
                "the folder's sentence embedding is {} wide (hidden_size {}, pooled {}): set data.classes = {}",
                b.width(),
                b.hidden,
                b.pooling.describe(),
                b.width()
            )));
        }
    }
    arch::layers(&arch(c), &data).map_err(|e| err(e.to_string()))
}

/// Parameter elements the model of `c` takes from `checkpoint`: for the Llama family every
/// tensor in the files, less an `lm_head.weight` a tied model never reads; for GPT-2 and BERT
/// the count of the tensors their configs make ([`Gpt2Config::params`], [`BertConfig::params`]).
pub fn params(c: &ModelConfig, checkpoint: &Checkpoint) -> u64 {
    match c {
        ModelConfig::Llama(c) => {
            let unread = if c.tied && checkpoint.has("lm_head.weight") { (c.vocab * c.hidden) as u64 } else { 0 };
            checkpoint.elements() - unread
        }
        ModelConfig::Gpt2(c) => c.params(),
        ModelConfig::Bert(c) => c.params(),
    }
}

/// The model folder `dir` as the estimator takes a teacher: exact counts and its layer list.
///
/// # Errors
/// As [`super::read_config`], [`Checkpoint::open`] and [`layers`].
pub fn teacher_model(dir: &Path, spec: &Config) -> Result<TeacherModel> {
    let c = super::read_config(dir)?;
    let checkpoint = Checkpoint::open(dir)?;
    Ok(TeacherModel { params: params(&c, &checkpoint), buffers: 0, layers: Some(layers(dir, &c, spec)?) })
}
