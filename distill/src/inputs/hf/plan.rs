//! A Hugging Face model folder as the memory estimator prices it (`distill plan`, and the run's
//! plan): its exact parameter count, read from the safetensors headers without loading a
//! tensor, and its layer list from `config.json` in the `[student.transformer]` terms the
//! estimator knows (pre-norm RMSNorm, SwiGLU, rotary, grouped-query attention, an LM head tied
//! or not).
//!
//! The layer list prices the teacher's working set; two details it cannot express change that
//! set by a few of the largest activations' bytes at most: a `head_dim` other than
//! `hidden_size / num_attention_heads` (priced at the quotient) and qwen2's biases on q/k/v only
//! (priced as biases on every projection). The parameter count is exact either way.
use std::path::Path;

use estimator_wasm::schema::arch::{self, Layer};
use estimator_wasm::schema::{
    Activation, AttentionKernel, Checkpointing, Config, Family, HeadKind, MlpKind, Norm, NormKind, NormPosition, Pool,
    Pooling, StudentSpec, TransformerSpec,
};
use estimator_wasm::TeacherModel;

use super::config::HfConfig;
use super::weights::Checkpoint;
use crate::host::error::{DistillError, Result};

/// The decoder of `c` in the schema's terms (`[teacher.arch]`).
pub fn arch(c: &HfConfig) -> StudentSpec {
    StudentSpec {
        family: Family::Transformer,
        channels: Vec::new(),
        kernel: 3,
        pool: Pool::None,
        hidden: Vec::new(),
        activation: Activation::Silu,
        norm: Norm::None,
        dropout: 0.0,
        checkpointing: Checkpointing::None,
        init: None,
        init_from_teacher: Vec::new(),
        transformer: Some(TransformerSpec {
            vocab: c.vocab as u64,
            layers: c.layers as u64,
            d_model: c.hidden as u64,
            heads: c.heads as u64,
            kv_heads: Some(c.kv_heads as u64),
            mlp_width: Some(c.intermediate as u64),
            mlp: MlpKind::Swiglu,
            norm: NormKind::Rms,
            norm_position: NormPosition::Pre,
            norm_eps: c.rms_eps,
            attention: AttentionKernel::Math,
            attention_dropout: 0.0,
            max_positions: 0,
            rope_theta: Some(c.rope_theta),
            token_types: 0,
            head: HeadKind::Lm,
            pooling: Pooling::Mean,
            normalize: false,
            tie_embeddings: c.tied,
            head_rank: None,
            bias: c.qkv_bias || c.o_bias || c.mlp_bias,
        }),
    }
}

/// The layers of the folder's decoder reading `spec`'s data at the teacher's logit width.
///
/// # Errors
/// [`DistillError::Teacher`] naming the folder's `config.json` when the data does not fit it.
pub fn layers(dir: &Path, c: &HfConfig, spec: &Config) -> Result<Vec<Layer>> {
    let data = spec.teacher.logit_data(&spec.data);
    arch::layers(&arch(c), &data).map_err(|e| DistillError::teacher(&dir.join(super::CONFIG), e.to_string()))
}

/// Parameter elements the decoder of `c` takes from `checkpoint`: every tensor in the files,
/// less an `lm_head.weight` a tied model never reads.
pub fn params(c: &HfConfig, checkpoint: &Checkpoint) -> u64 {
    let unread = if c.tied && checkpoint.has("lm_head.weight") { (c.vocab * c.hidden) as u64 } else { 0 };
    checkpoint.elements() - unread
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
