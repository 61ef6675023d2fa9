//! Per-layer model: parameters, the tensors autograd saves for backward, and the temporaries of
//! the forward, backward and no-grad inference of one [`Layer`].
//!
//! The authority for what each op saves is PyTorch's `tools/autograd/derivatives.yaml`; the
//! rows of `memory-model.md` section 2 were measured on CPU with `saved_tensors_hooks`, and the
//! fidelity check (`estimator-wasm/fidelity/`) re-measures them for every layer kind. Sizes are
//! per sample (`Size::per_sample`) plus a batch-independent part (`Size::fixed`), in bytes.
//!
//! Saved tensors are either a storage of the forward chain (a layer's input or output, which
//! several layers may save: counted once, see `crate::memory::memory_model`) or a fresh storage of the layer
//! (masks, statistics, cast copies, attention internals).
//!
//! Dtypes follow the target (`memory-model.md` section 10):
//! * under autocast, matmuls and convolutions cast their input and weight to the compute dtype
//!   and save the copies (a weight copy only where the input requires grad, except convolution,
//!   which always saves its weight);
//! * on CUDA under autocast, LayerNorm/RMSNorm and softmax run in fp32 (their 16-bit input is
//!   saved as an fp32 copy); on CPU they run in the input dtype;
//! * dropout saves a bool mask on CUDA and a mask in the input dtype on CPU;
//! * norm statistics are fp32 on CUDA, and in the weight dtype on CPU.
use serde::Serialize;

use crate::schema::arch::{numel, Layer, Op};
use crate::schema::dtype::{DType, Recipe};
use crate::schema::errors::EstimateError;
use crate::schema::{Activation, AttentionKernel, MlpKind, NormKind, Pool};

/// Identity of one storage of the forward chain.
pub type StorageId = u32;

/// A tensor of the forward chain, per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub id: StorageId,
    /// Elements per sample.
    pub elems: u64,
    pub dtype: DType,
    pub requires_grad: bool,
}

impl Chain {
    /// Bytes per sample.
    pub fn size(&self) -> Result<Size, EstimateError> {
        Ok(Size::per(mul(self.elems, self.dtype.bytes())?))
    }
}

/// Bytes of one tensor for a micro-batch of `b`: `per_sample * b + fixed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Size {
    pub per_sample: u64,
    pub fixed: u64,
}

impl Size {
    /// A tensor that grows with the batch.
    pub const fn per(per_sample: u64) -> Size {
        Size { per_sample, fixed: 0 }
    }

    /// A tensor of constant size (weight copies, BatchNorm statistics, position ids).
    pub const fn fixed(fixed: u64) -> Size {
        Size { per_sample: 0, fixed }
    }

    /// Bytes at micro-batch `b`, saturating at `u64::MAX` (see `runtime::Pool::check`).
    #[inline]
    pub fn at_saturating(&self, b: u64) -> u64 {
        self.per_sample.saturating_mul(b).saturating_add(self.fixed)
    }

    /// Bytes at micro-batch `b`.
    #[inline]
    pub fn at(&self, b: u64) -> Result<u64, EstimateError> {
        self.per_sample.checked_mul(b).and_then(|v| v.checked_add(self.fixed)).ok_or_else(|| {
            EstimateError::overflow(format!("a tensor of {} bytes per sample at batch {b}", self.per_sample))
        })
    }
}

/// One tensor autograd keeps for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Save {
    /// A storage of the forward chain (shared by every layer that saves it).
    Chain(StorageId, Size),
    /// A storage only this layer saves.
    Own(Size),
}

/// One parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamTensor {
    /// `<leaf>` as in [`Op::param_shapes`].
    pub name: &'static str,
    /// Elements on one GPU (after tensor-parallel splitting).
    pub elems: u64,
    /// Cast to the compute dtype by autocast (matmul and convolution weights and biases).
    pub autocast: bool,
    /// A conv or linear weight that magnitude pruning masks.
    pub prunable: bool,
}

/// Everything the estimator needs from one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    pub output: Chain,
    pub saves: Vec<Save>,
    pub params: Vec<ParamTensor>,
    /// Non-trainable buffers, in elements (BatchNorm running statistics).
    pub buffers: u64,
    /// Temporaries alive during this layer's forward besides its input and output.
    pub forward_scratch: Vec<Size>,
    /// Temporaries of its backward: gradients of output and input and internal gradients, at
    /// the backward's largest moment.
    pub backward_scratch: Vec<Size>,
    /// This layer's own saved tensors already freed at that moment (a composite block's backward
    /// releases the saves of the ops it has passed).
    pub backward_release: Vec<Size>,
    /// Temporaries of a no-grad forward besides input and output (the teacher's working set).
    pub inference_scratch: Vec<Size>,
    /// Autocast cast-cache copies of weights that are not also saved for backward, in bytes.
    pub cast_cache: u64,
}

/// How a network runs: its precision recipe, the target and the tensor-parallel degree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ctx {
    pub recipe: Recipe,
    pub cuda: bool,
    /// Tensor-parallel degree t (1: no splitting).
    pub tp: u64,
}

fn mul(a: u64, b: u64) -> Result<u64, EstimateError> {
    a.checked_mul(b).ok_or_else(|| EstimateError::overflow("a layer's tensor sizes"))
}

/// Elements per sample times the bytes of `dtype`, as a per-sample [`Size`].
fn per(elems: u64, dtype: DType) -> Result<Size, EstimateError> {
    Ok(Size::per(mul(elems, dtype.bytes())?))
}

/// Elements times the bytes of `dtype`, as a fixed [`Size`].
fn fixed(elems: u64, dtype: DType) -> Result<Size, EstimateError> {
    Ok(Size::fixed(mul(elems, dtype.bytes())?))
}

struct Builder<'a> {
    ctx: &'a Ctx,
    next_id: &'a mut StorageId,
    p: Priced,
}

impl Builder<'_> {
    fn fresh(&mut self, elems: u64, dtype: DType, requires_grad: bool) -> Chain {
        *self.next_id += 1;
        Chain { id: *self.next_id, elems, dtype, requires_grad }
    }

    fn save_chain(&mut self, t: &Chain) -> Result<(), EstimateError> {
        self.p.saves.push(Save::Chain(t.id, t.size()?));
        Ok(())
    }

    fn save(&mut self, s: Size) {
        if s != Size::default() {
            self.p.saves.push(Save::Own(s));
        }
    }

    /// Saves a fresh tensor that the block's backward frees before its largest moment.
    fn save_released(&mut self, s: Size) {
        if s != Size::default() {
            self.p.saves.push(Save::Own(s));
            self.p.backward_release.push(s);
        }
    }

    /// Saves `x` as `to`: the storage itself, or a fresh cast copy.
    fn save_as(&mut self, x: &Chain, to: DType) -> Result<(), EstimateError> {
        if x.dtype == to {
            self.save_chain(x)
        } else {
            self.save(per(x.elems, to)?);
            Ok(())
        }
    }

    fn param(&mut self, name: &'static str, elems: u64, split: bool, autocast: bool, prunable: bool) {
        let elems = if split { elems.div_ceil(self.ctx.tp) } else { elems };
        self.p.params.push(ParamTensor { name, elems, autocast, prunable });
    }

    /// The dtype a matmul or convolution computes in for an input of `dtype`.
    fn mm_dtype(&self, dtype: DType) -> DType {
        if self.ctx.recipe.autocast {
            self.ctx.recipe.compute
        } else {
            dtype
        }
    }

    /// Autocast copy of a weight of `elems`: saved when `saved`, else only in the cast cache.
    fn weight_copy(&mut self, elems: u64, saved: bool) -> Result<(), EstimateError> {
        if !self.ctx.recipe.autocast {
            return Ok(());
        }
        let copy = fixed(elems, self.ctx.recipe.compute)?;
        if saved {
            self.save(copy);
        } else {
            self.p.cast_cache = self.p.cast_cache.saturating_add(copy.fixed);
        }
        Ok(())
    }

    fn bias_copy(&mut self, elems: u64) -> Result<(), EstimateError> {
        self.weight_copy(elems, false)
    }

    fn scratch(&mut self, which: Scratch, s: Size) {
        if s == Size::default() {
            return;
        }
        match which {
            Scratch::Forward => self.p.forward_scratch.push(s),
            Scratch::Backward => self.p.backward_scratch.push(s),
            Scratch::Inference => self.p.inference_scratch.push(s),
        }
    }

    /// Dtype of norm statistics (mean, rstd): fp32 on CUDA, the weight dtype on CPU.
    fn stat_dtype(&self) -> DType {
        if self.ctx.cuda {
            DType::F32
        } else {
            self.ctx.recipe.weight
        }
    }

    /// Element bytes of a dropout mask over a tensor of `dtype`.
    fn mask_dtype(&self, dtype: DType) -> DType {
        if self.ctx.cuda {
            DType::Bool
        } else {
            dtype
        }
    }

    /// A LayerNorm or RMSNorm over the last `features` of `x`; returns its output.
    fn norm(&mut self, kind: NormKind, x: &Chain, features: u64) -> Result<Chain, EstimateError> {
        let rows = x.elems / features.max(1);
        let cuda_fp32 = self.ctx.cuda && self.ctx.recipe.autocast;
        let out_dtype = if cuda_fp32 { DType::F32 } else { x.dtype };
        match (kind, self.ctx.cuda) {
            (NormKind::Layer, _) => {
                if cuda_fp32 {
                    self.save_as(x, DType::F32)?;
                } else {
                    self.save_chain(x)?;
                }
                let stats = if cuda_fp32 { DType::F32 } else { self.stat_dtype() };
                self.save(per(mul(rows, 2)?, stats)?);
            }
            // CPU `nn.RMSNorm` (2.11) is composite and upcasts: input as fp32, rstd, normalized x.
            (NormKind::Rms, false) => {
                self.save_as(x, DType::F32)?;
                self.save(per(x.elems, DType::F32)?);
                self.save(per(rows, DType::F32)?);
            }
            // CUDA `_fused_rms_norm`: input (fp32 under autocast) and rstd [derived].
            (NormKind::Rms, true) => {
                if cuda_fp32 {
                    self.save_as(x, DType::F32)?;
                } else {
                    self.save_chain(x)?;
                }
                self.save(per(rows, DType::F32)?);
            }
        }
        Ok(self.fresh(x.elems, out_dtype, x.requires_grad))
    }

    /// A dropout on a tensor of `elems` of `dtype` (saves its mask).
    fn dropout(&mut self, elems: u64, dtype: DType) -> Result<(), EstimateError> {
        let mask = self.mask_dtype(dtype);
        self.save(per(elems, mask)?);
        Ok(())
    }

    /// The residual-branch dropout of a block, whose mask is freed first in its backward.
    fn block_dropout(&mut self, elems: u64, dtype: DType) -> Result<(), EstimateError> {
        let mask = self.mask_dtype(dtype);
        self.save_released(per(elems, mask)?);
        Ok(())
    }

    fn norm_params(&mut self, kind: NormKind, features: u64) {
        self.param("norm.weight", features, false, false, false);
        if kind == NormKind::Layer {
            self.param("norm.bias", features, false, false, false);
        }
    }
}

#[derive(Clone, Copy)]
enum Scratch {
    Forward,
    Backward,
    Inference,
}

/// Prices `layer` for the input chain tensor `x`; fresh storages get ids after `next_id`.
///
/// # Errors
/// [`EstimateError::Overflow`] when a size does not fit in 64 bits.
pub fn price(layer: &Layer, x: Chain, next_id: &mut StorageId, ctx: &Ctx) -> Result<Priced, EstimateError> {
    let n_in = x.elems;
    let n_out = numel(&layer.output).ok_or_else(|| EstimateError::overflow(format!("layer {} output", layer.id)))?;
    let empty = Priced {
        output: x,
        saves: Vec::new(),
        params: Vec::new(),
        buffers: 0,
        forward_scratch: Vec::new(),
        backward_scratch: Vec::new(),
        backward_release: Vec::new(),
        inference_scratch: Vec::new(),
        cast_cache: 0,
    };
    let mut b = Builder { ctx, next_id, p: empty };
    let grad_io = |b: &mut Builder, out: &Chain| -> Result<(), EstimateError> {
        b.scratch(Scratch::Backward, out.size()?);
        if x.requires_grad {
            b.scratch(Scratch::Backward, x.size()?);
        }
        Ok(())
    };
    match layer.op {
        Op::Linear { in_features, out_features } => {
            // mlp/cnn under tensor parallelism: weights split, activations replicated
            linear(&mut b, &x, n_out, in_features, out_features, true, false)?;
        }
        Op::LmHead { in_features, out_features, bias, tied } => {
            // vocab-parallel head: each GPU holds out_features / t logits
            linear(&mut b, &x, n_out.div_ceil(ctx.tp), in_features, out_features, bias, tied)?;
        }
        Op::Conv2d { in_channels, out_channels, kernel, bias } => {
            let to = b.mm_dtype(x.dtype);
            b.save_as(&x, to)?;
            let w = mul(mul(out_channels, in_channels)?, mul(kernel, kernel)?)?;
            b.weight_copy(w.div_ceil(ctx.tp), true)?; // convolution saves its weight unguarded
            b.param("weight", w, true, true, true);
            if bias {
                b.param("bias", out_channels, true, true, false);
                b.bias_copy(out_channels.div_ceil(ctx.tp))?;
            }
            let out = b.fresh(n_out, to, true);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::BatchNorm { features } => {
            b.save_chain(&x)?;
            b.save(fixed(mul(features, 2)?, b.stat_dtype())?);
            b.param("weight", features, false, false, false);
            b.param("bias", features, false, false, false);
            b.p.buffers = mul(features, 2)?;
            let out = b.fresh(n_in, x.dtype, true);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::LayerNorm { features } => {
            b.param("weight", features, false, false, false);
            b.param("bias", features, false, false, false);
            let out = b.norm(NormKind::Layer, &x, features)?;
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::RmsNorm { features } => {
            b.param("weight", features, false, false, false);
            let out = b.norm(NormKind::Rms, &x, features)?;
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Activation { function } => {
            let out = b.fresh(n_in, x.dtype, x.requires_grad);
            if x.requires_grad {
                match function {
                    Activation::Relu | Activation::Sigmoid | Activation::Tanh => b.save_chain(&out)?,
                    Activation::Gelu | Activation::Silu | Activation::LeakyRelu => b.save_chain(&x)?,
                }
            }
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Dropout { .. } => {
            if x.requires_grad {
                b.dropout(n_in, x.dtype)?;
            }
            let out = b.fresh(n_in, x.dtype, x.requires_grad);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Pool2d { pool } => {
            let out = b.fresh(n_out, x.dtype, x.requires_grad);
            match pool {
                Pool::Max => {
                    b.save_chain(&x)?;
                    b.save(per(n_out, DType::I64)?);
                    // the indices also exist in a no-grad forward only transiently: none there
                }
                Pool::Avg => b.save_chain(&x)?,
                Pool::None => {}
            }
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Flatten => {
            // a view: same storage, same bytes
            b.p.output = Chain { elems: n_out, ..x };
        }
        Op::MeanPool => {
            let out = b.fresh(n_out, x.dtype, x.requires_grad);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Embedding { vocab, dim, positions } => {
            // input: int64 token ids [s], saved for the weight's gradient
            b.save_chain(&x)?;
            if positions > 0 {
                b.save(fixed(n_in, DType::I64)?); // arange(s), shared by the batch
            }
            b.param("tokens.weight", mul(vocab, dim)?, true, false, false);
            if positions > 0 {
                b.param("positions.weight", mul(positions, dim)?, false, false, false);
            }
            let out = b.fresh(n_out, ctx.recipe.weight, true);
            b.scratch(Scratch::Backward, out.size()?);
            b.p.output = out;
        }
        Op::SelfAttention { dim, heads, kv_heads, kernel, norm, attention_dropout, dropout, bias } => {
            attention(&mut b, &x, dim, heads, kv_heads, kernel, norm, attention_dropout, dropout, bias)?;
        }
        Op::FeedForward { dim, width, mlp, activation, norm, dropout, bias } => {
            feed_forward(&mut b, &x, dim, width, mlp, activation, norm, dropout, bias)?;
        }
    }
    Ok(b.p)
}

/// `nn.Linear` (and a transformer head): saves its input (cast copy under autocast) and, where
/// the input requires grad, the autocast weight copy (`addmm` saves `mat2` only then).
fn linear(
    b: &mut Builder,
    x: &Chain,
    n_out: u64,
    in_features: u64,
    out_features: u64,
    bias: bool,
    tied: bool,
) -> Result<(), EstimateError> {
    let tp = b.ctx.tp;
    let to = b.mm_dtype(x.dtype);
    b.save_as(x, to)?;
    let w = mul(in_features, out_features)?;
    b.weight_copy(w.div_ceil(tp), x.requires_grad)?;
    if !tied {
        b.param("weight", w, true, true, true);
    }
    if bias {
        b.param("bias", out_features, true, true, false);
        b.bias_copy(out_features.div_ceil(tp))?;
    }
    let out = b.fresh(n_out, to, true);
    b.scratch(Scratch::Backward, out.size()?);
    if x.requires_grad {
        b.scratch(Scratch::Backward, x.size()?);
    }
    b.p.output = out;
    Ok(())
}

/// Pre-norm self-attention `x + dropout(proj(attention(norm(x))))` over `[s, dim]` per sample.
///
/// Math kernel (Korthikanti et al. 2022, arXiv:2205.05198, section 4.1): the qkv input, copies
/// of q, k, v (the batched matmuls copy their non-contiguous head views; k and v are expanded to
/// every head), the softmax output, the dropout mask and the dropped probabilities, the
/// out-projection input and the residual dropout mask; with 16-bit activations and 1-byte masks
/// this is `11sbh + 5as^2b` (+ 2sbh for the norm input and 8sb of norm statistics).
/// Flash kernel (`_scaled_dot_product_flash_attention`): q, k, v as views of the qkv output, the
/// output and an fp32 logsumexp `[a, s]`: no `s^2` term. On CPU, SDPA with attention dropout
/// falls back to the math kernel in fp32 (measured), which is modelled as such.
/// Tensor parallelism splits heads: everything between the qkv and out projections is `/t`.
#[allow(clippy::too_many_arguments)]
fn attention(
    b: &mut Builder,
    x: &Chain,
    dim: u64,
    heads: u64,
    kv_heads: u64,
    kernel: AttentionKernel,
    norm: NormKind,
    attention_dropout: f64,
    dropout: f64,
    bias: bool,
) -> Result<(), EstimateError> {
    let (tp, cuda, ac) = (b.ctx.tp, b.ctx.cuda, b.ctx.recipe.autocast);
    let compute = b.ctx.recipe.compute;
    let seq = x.elems / dim.max(1);
    let head_dim = dim / heads.max(1);
    let qkv_width = dim + mul(mul(kv_heads, head_dim)?, 2)?;
    let local_heads = heads.div_ceil(tp);
    let scores = mul(local_heads, mul(seq, seq)?)?; // a/t * s^2 per sample
    let local_sh = mul(seq, dim)?.div_ceil(tp);
    let full_sh = mul(seq, dim)?;

    b.norm_params(norm, dim);
    let y = b.norm(norm, x, dim)?;
    // fused qkv projection (column-parallel)
    let tq = b.mm_dtype(y.dtype);
    b.save_as(&y, tq)?;
    b.weight_copy(mul(qkv_width, dim)?.div_ceil(tp), true)?;
    b.param("qkv.weight", mul(qkv_width, dim)?, true, true, true);
    if bias {
        b.param("qkv.bias", qkv_width, true, true, false);
        b.bias_copy(qkv_width.div_ceil(tp))?;
    }
    let qkv = mul(seq, qkv_width)?.div_ceil(tp);
    let fallback = kernel == AttentionKernel::Flash && !cuda && attention_dropout > 0.0;
    if kernel == AttentionKernel::Math || fallback {
        let ti = if fallback { DType::F32 } else { tq };
        let softmax = if cuda && ac { DType::F32 } else { ti };
        b.save(per(local_sh, ti)?); // q copy in [b*a, s, d] layout
        b.save(per(local_sh, ti)?); // k^T copy
        b.save_released(per(local_sh, ti)?); // v copy (freed with probs @ v's backward)
        b.save(per(scores, softmax)?);
        if attention_dropout > 0.0 {
            b.save_released(per(scores, b.mask_dtype(softmax))?);
            // probs @ v saves the dropped probabilities (as the compute dtype under CUDA autocast)
            b.save_released(per(scores, if cuda && ac { compute } else { softmax })?);
        } else if cuda && ac {
            b.save_released(per(scores, compute)?); // fp32 probabilities cast back for probs @ v
        }
        b.save_released(per(local_sh, tq)?); // transpose(1, 2).reshape copy: the out-projection's input
        b.scratch(Scratch::Forward, per(scores, ti)?);
        b.scratch(Scratch::Forward, per(scores, ti)?);
        // largest backward moment: the softmax backward (gradients of probabilities and scores,
        // of v, and of the residual stream)
        b.scratch(Scratch::Backward, per(scores, softmax)?);
        b.scratch(Scratch::Backward, per(scores, softmax)?);
        b.scratch(Scratch::Backward, per(local_sh, ti)?);
        b.scratch(Scratch::Inference, per(qkv, tq)?);
        b.scratch(Scratch::Inference, per(scores, ti)?);
        b.scratch(Scratch::Inference, per(scores, softmax)?);
    } else {
        b.save(per(qkv, tq)?); // q, k, v: views of one storage
        b.save(per(local_sh, tq)?); // output, laid out [b, s, a, d]: the out-projection reads a view
        b.save(per(mul(local_heads, seq)?, DType::F32)?); // logsumexp
                                                          // largest backward moment: the flash backward (gradients of q, k, v and of the output)
        b.scratch(Scratch::Backward, per(qkv, tq)?);
        b.scratch(Scratch::Backward, per(local_sh, tq)?);
        b.scratch(Scratch::Backward, per(mul(local_heads, seq)?, DType::F32)?);
        b.scratch(Scratch::Inference, per(qkv, tq)?);
        b.scratch(Scratch::Inference, per(local_sh, tq)?);
    }
    // output projection (row-parallel: bias replicated)
    b.weight_copy(mul(dim, dim)?.div_ceil(tp), true)?;
    b.param("proj.weight", mul(dim, dim)?, true, true, true);
    if bias {
        b.param("proj.bias", dim, false, true, false);
        b.bias_copy(dim)?;
    }
    if dropout > 0.0 {
        b.block_dropout(full_sh, tq)?;
    }
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    b.scratch(Scratch::Backward, per(full_sh, x.dtype)?); // the residual stream's gradient
    b.scratch(Scratch::Inference, per(full_sh, y.dtype)?);
    b.scratch(Scratch::Inference, per(full_sh, tq)?);
    b.p.output = b.fresh(x.elems, DType::promote(x.dtype, tq), true);
    Ok(())
}

/// Pre-norm feed-forward `x + dropout(fc2(act(fc1(norm(x)))))` over `[s, dim]` per sample.
/// Standard (Korthikanti, i = 4h, GELU): fc1 input, GELU input, fc2 input and the dropout mask,
/// `19sbh` with 16-bit activations; an activation that saves its output (ReLU) shares it with
/// fc2's input. SwiGLU: fc1 output (gate and up, one storage), `silu(gate)` and the product,
/// `2sbh + 8sbi`. fc1 is column-parallel, fc2 row-parallel.
#[allow(clippy::too_many_arguments)]
fn feed_forward(
    b: &mut Builder,
    x: &Chain,
    dim: u64,
    width: u64,
    kind: MlpKind,
    activation: Activation,
    norm: NormKind,
    dropout: f64,
    bias: bool,
) -> Result<(), EstimateError> {
    let tp = b.ctx.tp;
    let seq = x.elems / dim.max(1);
    let up = if kind == MlpKind::Swiglu { mul(width, 2)? } else { width };
    let full_sh = mul(seq, dim)?;
    let hidden = mul(seq, width)?.div_ceil(tp);
    let hidden_up = mul(seq, up)?.div_ceil(tp);

    b.norm_params(norm, dim);
    let y = b.norm(norm, x, dim)?;
    let tq = b.mm_dtype(y.dtype);
    b.save_as(&y, tq)?;
    b.weight_copy(mul(up, dim)?.div_ceil(tp), true)?;
    b.param("fc1.weight", mul(up, dim)?, true, true, true);
    if bias {
        b.param("fc1.bias", up, true, true, false);
        b.bias_copy(up.div_ceil(tp))?;
    }
    match kind {
        MlpKind::Standard => match activation {
            // saves its output, which fc2 saves too: one storage, needed by its own backward
            Activation::Relu | Activation::Sigmoid | Activation::Tanh => b.save(per(hidden, tq)?),
            Activation::Gelu | Activation::Silu | Activation::LeakyRelu => {
                b.save(per(hidden_up, tq)?); // activation input
                b.save_released(per(hidden, tq)?); // activation output = fc2 input
            }
        },
        MlpKind::Swiglu => {
            b.save(per(hidden_up, tq)?); // fc1 output: gate (silu) and up (mul) are views
            b.save(per(hidden, tq)?); // silu(gate), saved by the product
            b.save_released(per(hidden, tq)?); // product = fc2 input
        }
    }
    b.weight_copy(mul(dim, width)?.div_ceil(tp), true)?;
    b.param("fc2.weight", mul(dim, width)?, true, true, true);
    if bias {
        b.param("fc2.bias", dim, false, true, false);
        b.bias_copy(dim)?;
    }
    if dropout > 0.0 {
        b.block_dropout(full_sh, tq)?;
    }
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    // largest backward moment: the activation's backward (gradients of fc2's input and of fc1's
    // output, and the residual stream's gradient)
    b.scratch(Scratch::Backward, per(hidden, tq)?);
    b.scratch(Scratch::Backward, per(hidden_up, tq)?);
    b.scratch(Scratch::Backward, per(full_sh, x.dtype)?);
    b.scratch(Scratch::Inference, per(full_sh, y.dtype)?);
    b.scratch(Scratch::Inference, per(hidden_up, tq)?);
    b.scratch(Scratch::Inference, per(hidden, tq)?);
    if kind == MlpKind::Swiglu {
        b.scratch(Scratch::Inference, per(hidden, tq)?);
    }
    b.p.output = b.fresh(x.elems, DType::promote(x.dtype, tq), true);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Precision;

    fn ctx(p: Precision, cuda: bool) -> Ctx {
        Ctx { recipe: Recipe::student(p), cuda, tp: 1 }
    }

    fn layer(op: Op, input: Vec<u64>, output: Vec<u64>) -> Layer {
        Layer { id: "l".into(), op, input, output }
    }

    fn x(elems: u64, dtype: DType, requires_grad: bool) -> Chain {
        Chain { id: 0, elems, dtype, requires_grad }
    }

    fn own_bytes(p: &Priced) -> (u64, u64) {
        p.saves.iter().fold((0, 0), |(a, f), s| match s {
            Save::Own(s) | Save::Chain(_, s) => (a + s.per_sample, f + s.fixed),
        })
    }

    #[test]
    fn linear_saves_input_and_weight_copy_only_under_autocast() {
        let l = layer(Op::Linear { in_features: 16, out_features: 8 }, vec![16], vec![8]);
        let mut id = 0;
        let fp32 = price(&l, x(16, DType::F32, true), &mut id, &ctx(Precision::Fp32, true)).unwrap();
        assert_eq!(fp32.saves, vec![Save::Chain(0, Size::per(64))]);
        let bf16 = price(&l, x(16, DType::F32, true), &mut id, &ctx(Precision::Bf16, true)).unwrap();
        // a bf16 copy of the input (32 B) and of the weight (8 x 16 x 2 = 256 B)
        assert_eq!(bf16.saves, vec![Save::Own(Size::per(32)), Save::Own(Size::fixed(256))]);
        assert_eq!(bf16.cast_cache, 16); // the bias copy lives only in the cast cache
                                         // the first layer's input does not require grad: no weight copy is saved
        let first = price(&l, x(16, DType::F32, false), &mut id, &ctx(Precision::Bf16, true)).unwrap();
        assert_eq!(first.saves, vec![Save::Own(Size::per(32))]);
        assert_eq!(first.cast_cache, 256 + 16);
    }

    #[test]
    fn dropout_mask_is_bool_on_cuda_and_input_dtype_on_cpu() {
        let l = layer(Op::Dropout { p: 0.5 }, vec![10], vec![10]);
        let mut id = 0;
        let cuda = price(&l, x(10, DType::F32, true), &mut id, &ctx(Precision::Fp32, true)).unwrap();
        let cpu = price(&l, x(10, DType::F32, true), &mut id, &ctx(Precision::Fp32, false)).unwrap();
        assert_eq!(own_bytes(&cuda), (10, 0));
        assert_eq!(own_bytes(&cpu), (40, 0));
    }

    #[test]
    fn maxpool_saves_input_and_int64_indices() {
        let l = layer(Op::Pool2d { pool: Pool::Max }, vec![4, 8, 8], vec![4, 4, 4]);
        let mut id = 0;
        let p = price(&l, x(256, DType::F32, true), &mut id, &ctx(Precision::Fp32, true)).unwrap();
        assert_eq!(p.saves, vec![Save::Chain(0, Size::per(1024)), Save::Own(Size::per(64 * 8))]);
    }

    #[test]
    fn layernorm_under_cuda_autocast_saves_an_fp32_copy() {
        let l = layer(Op::LayerNorm { features: 8 }, vec![8], vec![8]);
        let mut id = 0;
        let cuda = price(&l, x(8, DType::Bf16, true), &mut id, &ctx(Precision::Bf16, true)).unwrap();
        assert_eq!(cuda.saves, vec![Save::Own(Size::per(32)), Save::Own(Size::per(8))]);
        assert_eq!(cuda.output.dtype, DType::F32);
        let cpu = price(&l, x(8, DType::Bf16, true), &mut id, &ctx(Precision::Bf16, false)).unwrap();
        assert_eq!(cpu.saves, vec![Save::Chain(0, Size::per(16)), Save::Own(Size::per(8))]);
        assert_eq!(cpu.output.dtype, DType::Bf16);
    }
}
