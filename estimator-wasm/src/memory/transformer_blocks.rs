//! The transformer's composite blocks: self-attention and feed-forward, pre-norm
//! (`x + f(norm(x))`) or post-norm (`norm(x + f(x))`), priced op by op inside one layer.
//!
//! Post-norm saves as many tensors as pre-norm, different ones: the first projection saves the
//! block input `x` itself (pre-norm: the norm's output), and the norm saves the residual sum
//! `x + f(x)` (pre-norm: `x`) with its statistics; the block's output is the norm's output.
use crate::memory::builder::{Builder, Parallel, Scratch, Weights};
use crate::memory::errors::EstimateError;
use crate::memory::sizes::{fixed, mul, per, Chain};
use crate::schema::arch::{Attention, FeedForward};
use crate::schema::dtype::DType;
use crate::schema::{Activation, AttentionKernel, MlpKind, NormKind};

/// Pre-norm self-attention `x + dropout(proj(attention(norm(x))))` over `[s, dim]` per sample.
///
/// Math kernel (Korthikanti et al. 2022, arXiv:2205.05198, section 4.1): the qkv input, copies
/// of q, k, v (the batched matmuls copy their non-contiguous head views; k and v are expanded to
/// every head), the softmax output, the dropout mask and the dropped probabilities, the
/// out-projection input and the residual dropout mask; with 16-bit activations and 1-byte masks
/// this is `11sbh + 5as^2b` (+ 2sbh for the norm input and 8sb of norm statistics).
/// Flash kernel (`_scaled_dot_product_flash_attention`): q, k, v as views of the qkv output, the
/// output and an fp32 logsumexp `[a, s]`: no `s^2` term; with rotary positions the rotated q
/// and k besides. Rotary positions also save their cos and sin `[s, d_head]` once per layer
/// (either kernel). Causal attention saves the same tensors (the mask is the kernel's, or for the
/// math kernel an `[s, s]` bias shared by the batch). On CPU, SDPA with attention dropout
/// falls back to the math kernel in fp32 (measured), which is modelled as such.
/// Tensor parallelism splits heads: everything between the qkv and out projections is `/t`.
pub(crate) fn attention(b: &mut Builder, x: &Chain, a: &Attention) -> Result<(), EstimateError> {
    let Attention {
        dim, post_norm, heads, kv_heads, kernel, norm, attention_dropout, dropout, bias, rope_theta, ..
    } = *a;
    let (tp, cuda, ac) = (b.ctx.tp, b.ctx.cuda, b.ctx.recipe.autocast);
    let compute = b.ctx.recipe.compute;
    let seq = x.elems / dim.max(1);
    let head_dim = dim / heads.max(1);
    let qkv_width = dim + mul(mul(kv_heads, head_dim)?, 2)?;
    let local_heads = heads.div_ceil(tp);
    let scores = mul(local_heads, mul(seq, seq)?)?; // a/t * s^2 per sample
    let local_sh = mul(seq, dim)?.div_ceil(tp);
    let full_sh = mul(seq, dim)?;

    // fused qkv projection (column-parallel)
    let qkv_proj = Projection { names: ("qkv.weight", "qkv.bias"), inputs: dim, outputs: qkv_width, bias };
    let (y, tq) = open_block(b, x, norm, post_norm, &qkv_proj)?;
    let qkv = mul(seq, qkv_width)?.div_ceil(tp);
    if rope_theta.is_some() {
        // rotary: `x * cos + rotate_half(x) * sin` saves cos and sin [s, d_head] in the
        // matmul dtype (the operands that need no gradient), made once per layer for the
        // batch; the rotated q and k are priced with the kernel below (measured, torch 2.11 CPU)
        b.save(fixed(mul(mul(seq, head_dim)?, 2)?, tq)?);
    }
    let fallback = kernel == AttentionKernel::Flash && !cuda && attention_dropout > 0.0;
    if kernel == AttentionKernel::Math || fallback {
        let ti = if fallback { DType::F32 } else { tq };
        // text: 16-bit scores plus the fp32 padding bias are promoted to fp32, so the softmax
        // runs in fp32 and `probs @ v` saves a copy cast back to the matmul dtype (as CUDA autocast does)
        let promoted = b.ctx.text && ti != DType::F32;
        let cast_back = (cuda && ac) || promoted;
        let softmax = if cast_back { DType::F32 } else { ti };
        let probs_copy = if promoted { ti } else { compute };
        b.save(per(local_sh, ti)?); // q copy in [b*a, s, d] layout
        b.save(per(local_sh, ti)?); // k^T copy
        b.save_released(per(local_sh, ti)?); // v copy (freed with probs @ v's backward)
        b.save(per(scores, softmax)?);
        if attention_dropout > 0.0 {
            b.save_released(per(scores, b.mask_dtype(softmax))?);
            // probs @ v saves the dropped probabilities (as the compute dtype under CUDA autocast)
            b.save_released(per(scores, if cast_back { probs_copy } else { softmax })?);
        } else if cast_back {
            b.save_released(per(scores, probs_copy)?); // fp32 probabilities cast back for probs @ v
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
        if rope_theta.is_some() {
            // rotary: the kernel saves the rotated q and k, new tensors beside the qkv storage
            // (v stays a view of it); cos and sin are priced above
            b.save(per(mul(seq, dim + mul(kv_heads, head_dim)?)?.div_ceil(tp), tq)?);
        }
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
    let out_proj = Projection { names: ("proj.weight", "proj.bias"), inputs: dim, outputs: dim, bias };
    row_then_residual(b, x, &out_proj, dropout, tq)?;
    b.scratch(Scratch::Backward, per(full_sh, x.dtype)?); // the residual stream's gradient
    b.scratch(Scratch::Inference, per(full_sh, y.dtype)?);
    b.scratch(Scratch::Inference, per(full_sh, tq)?);
    b.p.output = close_block(b, x, norm, post_norm, dim, tq)?;
    Ok(())
}

/// Pre-norm feed-forward `x + dropout(fc2(act(fc1(norm(x)))))` over `[s, dim]` per sample.
/// Standard (Korthikanti, i = 4h, GELU): fc1 input, GELU input, fc2 input and the dropout mask,
/// `19sbh` with 16-bit activations; an activation that saves its output (ReLU) shares it with
/// fc2's input. SwiGLU: fc1 output (gate and up, one storage), `silu(gate)` and the product,
/// `2sbh + 8sbi`. fc1 is column-parallel, fc2 row-parallel.
pub(crate) fn feed_forward(b: &mut Builder, x: &Chain, f: &FeedForward) -> Result<(), EstimateError> {
    let FeedForward { dim, post_norm, width, mlp: kind, activation, norm, dropout, bias } = *f;
    let tp = b.ctx.tp;
    let seq = x.elems / dim.max(1);
    let up = if kind == MlpKind::Swiglu { mul(width, 2)? } else { width };
    let full_sh = mul(seq, dim)?;
    let hidden = mul(seq, width)?.div_ceil(tp);
    let hidden_up = mul(seq, up)?.div_ceil(tp);

    let fc1 = Projection { names: ("fc1.weight", "fc1.bias"), inputs: dim, outputs: up, bias };
    let (y, tq) = open_block(b, x, norm, post_norm, &fc1)?;
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
    let fc2 = Projection { names: ("fc2.weight", "fc2.bias"), inputs: width, outputs: dim, bias };
    row_then_residual(b, x, &fc2, dropout, tq)?;
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
    b.p.output = close_block(b, x, norm, post_norm, dim, tq)?;
    Ok(())
}

/// A projection of a block: its parameter names (weight, bias), `inputs` -> `outputs` features.
struct Projection {
    names: (&'static str, &'static str),
    inputs: u64,
    outputs: u64,
    bias: bool,
}

impl Projection {
    fn weights(&self, parallel: Parallel) -> Result<Weights, EstimateError> {
        Ok(Weights {
            weight: Some(self.names.0),
            weight_elems: mul(self.outputs, self.inputs)?,
            bias: self.bias.then_some((self.names.1, self.outputs)),
            parallel,
            weight_saved: true,
        })
    }
}

/// The opening both blocks share: the norm's parameters; pre-norm: the norm of `x` (its saved
/// input and statistics), its output saved as the matmul input; post-norm: `x` saved as the
/// matmul input; then the column-parallel projection `proj`. Returns the matmul's input and dtype.
fn open_block(
    b: &mut Builder,
    x: &Chain,
    norm: NormKind,
    post_norm: bool,
    proj: &Projection,
) -> Result<(Chain, DType), EstimateError> {
    b.norm_params(norm, proj.inputs);
    let y = if post_norm { *x } else { b.norm(norm, x, proj.inputs)? };
    let tq = b.mm_dtype(y.dtype);
    b.save_as(&y, tq)?;
    b.weights(&proj.weights(Parallel::Column)?)?;
    Ok((y, tq))
}

/// The block's output after the residual add `x + f(x)` (in the promotion of `x`'s and the
/// matmul's dtypes): that sum (pre-norm), or its norm (post-norm: the norm saves the sum and its
/// statistics; Xiong et al. 2020, arXiv:2002.04745, figure 1, for the two placements).
fn close_block(
    b: &mut Builder,
    x: &Chain,
    norm: NormKind,
    post_norm: bool,
    dim: u64,
    tq: DType,
) -> Result<Chain, EstimateError> {
    let sum = b.fresh(x.elems, DType::promote(x.dtype, tq), true);
    if post_norm {
        b.norm(norm, &sum, dim)
    } else {
        Ok(sum)
    }
}

/// The closing both blocks share: the row-parallel projection `proj` back to the width of `x`
/// (its bias replicated), the residual dropout's mask, and the two forward temporaries of `x`'s
/// size (projection output and residual sum) in the matmul dtype `tq`.
fn row_then_residual(
    b: &mut Builder,
    x: &Chain,
    proj: &Projection,
    dropout: f64,
    tq: DType,
) -> Result<(), EstimateError> {
    b.weights(&proj.weights(Parallel::Row)?)?;
    let full_sh = mul(x.elems / proj.outputs.max(1), proj.outputs)?;
    if dropout > 0.0 {
        b.block_dropout(full_sh, tq)?;
    }
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    b.scratch(Scratch::Forward, per(full_sh, tq)?);
    Ok(())
}
