//! Per-layer model: parameters, the tensors autograd saves for backward, and the temporaries of
//! the forward, backward and no-grad inference of one [`Layer`].
//!
//! The authority for what each op saves is PyTorch's `tools/autograd/derivatives.yaml`; the
//! rows of `docs/memory-model.md` section 2 were measured on CPU with `saved_tensors_hooks`, and the
//! fidelity check (`estimator-wasm/fidelity/`) re-measures them for every layer kind. Sizes are
//! per sample (`Size::per_sample`) plus a batch-independent part (`Size::fixed`), in bytes.
//!
//! Saved tensors are either a storage of the forward chain (a layer's input or output, which
//! several layers may save: counted once, see `crate::memory::memory_model`) or a fresh storage of the layer
//! (masks, statistics, cast copies, attention internals).
//!
//! Dtypes follow the target (`docs/memory-model.md` section 10):
//! * under autocast, matmuls and convolutions cast their input and weight to the compute dtype
//!   and save the copies (a weight copy only where the input requires grad, except convolution,
//!   which always saves its weight);
//! * on CUDA under autocast, LayerNorm/RMSNorm and softmax run in fp32 (their 16-bit input is
//!   saved as an fp32 copy); on CPU they run in the input dtype;
//! * dropout saves a bool mask on CUDA and a mask in the input dtype on CPU;
//! * norm statistics are fp32 on CUDA, and in the weight dtype on CPU.
use crate::memory::builder::{Builder, Parallel, ParamRole, Scratch, Weights};
use crate::memory::errors::EstimateError;
use crate::memory::sizes::{fixed, mul, per, Chain, Ctx, Priced, StorageId};
use crate::memory::transformer_blocks::{attention, feed_forward};
use crate::schema::arch::{numel, Layer, Op};
use crate::schema::dtype::DType;
use crate::schema::{Activation, NormKind, Pool};

/// Prices `layer` for the input chain tensor `x`; fresh storages get ids after `next_id`.
///
/// # Errors
/// [`EstimateError::Overflow`] when a size does not fit in 64 bits.
pub fn price(layer: &Layer, x: Chain, next_id: &mut StorageId, ctx: &Ctx) -> Result<Priced, EstimateError> {
    let n_in = x.elems;
    let n_out = numel(&layer.output).ok_or_else(|| EstimateError::overflow(format!("layer {} output", layer.id)))?;
    // elements of the input as this layer reads it: `n_in` but for a view of a larger storage
    // (CLS pooling), whose chain keeps the storage's elements
    let n_view = numel(&layer.input).ok_or_else(|| EstimateError::overflow(format!("layer {} input", layer.id)))?;
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
            let w = Weights {
                weight: Some("weight"),
                weight_elems: mul(in_features, out_features)?,
                bias: Some(("bias", out_features)),
                parallel: Parallel::Column,
                weight_saved: x.requires_grad,
            };
            linear(&mut b, &x, n_view, n_out, &w)?;
        }
        Op::LmHead { in_features, out_features, bias, rank: Some(rank), .. } => {
            // a factorised head, two matmuls: z = x down^T [.., rank], then logits = z up^T;
            // each saves its input (z a fresh tensor of this layer). Never tensor-parallel
            // (validation refuses head_rank with estimate.tensor_parallel > 1).
            let z_elems = mul(n_view / in_features.max(1), rank)?;
            let down = Weights {
                weight: Some("down.weight"),
                weight_elems: mul(in_features, rank)?,
                bias: None,
                parallel: Parallel::Column,
                weight_saved: x.requires_grad,
            };
            linear(&mut b, &x, n_view, z_elems, &down)?;
            let z = b.p.output;
            let up = Weights {
                weight: Some("up.weight"),
                weight_elems: mul(rank, out_features)?,
                bias: bias.then_some(("bias", out_features)),
                parallel: Parallel::Column,
                weight_saved: true,
            };
            linear(&mut b, &z, z_elems, n_out, &up)?;
        }
        Op::LmHead { in_features, out_features, bias, tied, rank: None } => {
            // vocab-parallel head: each GPU holds out_features / t logits
            let w = Weights {
                weight: (!tied).then_some("weight"),
                weight_elems: mul(in_features, out_features)?,
                bias: bias.then_some(("bias", out_features)),
                parallel: Parallel::Column,
                weight_saved: x.requires_grad,
            };
            linear(&mut b, &x, n_view, n_out.div_ceil(ctx.tp), &w)?;
        }
        Op::Conv2d { in_channels, out_channels, kernel, bias } => {
            let to = b.mm_dtype(x.dtype);
            b.save_as(&x, to)?;
            b.weights(&Weights {
                weight: Some("weight"),
                weight_elems: mul(mul(out_channels, in_channels)?, mul(kernel, kernel)?)?,
                bias: bias.then_some(("bias", out_channels)),
                parallel: Parallel::Column,
                weight_saved: true, // convolution saves its weight unguarded
            })?;
            let out = b.fresh(n_out, to, true);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::BatchNorm { features } => {
            b.save_chain(&x)?;
            b.save(fixed(mul(features, 2)?, b.stat_dtype())?);
            b.param("weight", features, ParamRole::PLAIN);
            b.param("bias", features, ParamRole::PLAIN);
            b.p.buffers = mul(features, 2)?;
            let out = b.fresh(n_in, x.dtype, true);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::LayerNorm { features } => {
            b.param("weight", features, ParamRole::PLAIN);
            b.param("bias", features, ParamRole::PLAIN);
            let out = b.norm(NormKind::Layer, &x, features)?;
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::RmsNorm { features } => {
            b.param("weight", features, ParamRole::PLAIN);
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
                    // a no-grad forward on CUDA still computes the int64 indices (only the CPU
                    // takes the index-free kernel: `max_pool2d` in
                    // aten/src/ATen/native/MaxPooling.cpp); they live until the output's next op
                    if b.ctx.cuda {
                        b.scratch(Scratch::Inference, per(n_out, DType::I64)?);
                    }
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
            if ctx.text && x.requires_grad {
                // (x * m[..., None]).sum(1) / m.sum(1).clamp_min(1e-9), m = the mask in x's dtype:
                // the product saves m [s], the division its denominator [1]
                let seq = n_in / n_out.max(1);
                b.save(per(seq, x.dtype)?);
                b.save(per(1, x.dtype)?);
            }
            // without a mask, x.mean(1) saves nothing
            let out = b.fresh(n_out, x.dtype, x.requires_grad);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::ClsPool => {
            // x[:, 0] is a view: the chain keeps the whole storage's elements, which is what a
            // later op saving the view holds (the view's own size is the next layer's input shape)
            b.p.output = x;
        }
        Op::L2Normalize => {
            // x / x.norm(2, -1, keepdim).clamp_min(1e-12): the norm saves x and its result, the
            // division its denominator (both [1], in x's dtype, autocast or not)
            if x.requires_grad {
                b.save_chain(&x)?;
                b.save(per(1, x.dtype)?);
                b.save(per(1, x.dtype)?);
            }
            let out = b.fresh(n_out, x.dtype, x.requires_grad);
            grad_io(&mut b, &out)?;
            b.p.output = out;
        }
        Op::Embedding { vocab, dim, positions, token_types } => {
            // input: int64 token ids [s], saved for the weight's gradient
            b.save_chain(&x)?;
            if positions > 0 {
                b.save(fixed(n_in, DType::I64)?); // arange(s), shared by the batch
            }
            b.param("tokens.weight", mul(vocab, dim)?, ParamRole::EMBEDDING);
            if positions > 0 {
                b.param("positions.weight", mul(positions, dim)?, ParamRole::PLAIN);
            }
            if token_types > 0 {
                b.param("token_types.weight", mul(token_types, dim)?, ParamRole::PLAIN);
            }
            let out = b.fresh(n_out, ctx.recipe.weight, true);
            b.scratch(Scratch::Backward, out.size()?);
            b.p.output = out;
        }
        Op::SelfAttention(a) => attention(&mut b, &x, &a)?,
        Op::FeedForward(f) => feed_forward(&mut b, &x, &f)?,
    }
    Ok(b.p)
}

/// `nn.Linear` (and a transformer head) with output `n_out` per sample on one rank: saves its
/// input (cast copy of its `n_view` elements under autocast, else the input's whole storage, a
/// view included) and the parameters `w` (the weight copy saved where the input requires grad:
/// `addmm` saves `mat2` only then).
fn linear(b: &mut Builder, x: &Chain, n_view: u64, n_out: u64, w: &Weights) -> Result<(), EstimateError> {
    let to = b.mm_dtype(x.dtype);
    if x.dtype == to {
        b.save_chain(x)?;
    } else {
        b.save(per(n_view, to)?);
    }
    b.weights(w)?;
    let out = b.fresh(n_out, to, true);
    b.scratch(Scratch::Backward, out.size()?);
    if x.requires_grad {
        b.scratch(Scratch::Backward, x.size()?);
    }
    b.p.output = out;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::sizes::{Save, Size};
    use crate::schema::dtype::Recipe;
    use crate::schema::Precision;

    fn ctx(p: Precision, cuda: bool) -> Ctx {
        Ctx { recipe: Recipe::student(p), cuda, tp: 1, text: false }
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

    fn text_ctx(p: Precision) -> Ctx {
        Ctx { text: true, ..ctx(p, false) }
    }

    #[test]
    fn masked_mean_pool_saves_the_float_mask_and_denominator() {
        // [s = 4, d = 8] -> [8]: m [4] and m.sum(1) [1], fp32
        let l = layer(Op::MeanPool, vec![4, 8], vec![8]);
        let mut id = 0;
        let text = price(&l, x(32, DType::F32, true), &mut id, &text_ctx(Precision::Fp32)).unwrap();
        assert_eq!(text.saves, vec![Save::Own(Size::per(16)), Save::Own(Size::per(4))]);
        // no mask (token ids without a tokenizer): x.mean(1) saves nothing
        let plain = price(&l, x(32, DType::F32, true), &mut id, &ctx(Precision::Fp32, false)).unwrap();
        assert!(plain.saves.is_empty());
    }

    #[test]
    fn cls_pool_is_a_view_whose_whole_storage_the_head_saves() {
        let pool = layer(Op::ClsPool, vec![4, 8], vec![8]);
        let head = layer(Op::Linear { in_features: 8, out_features: 3 }, vec![8], vec![3]);
        let mut id = 0;
        let c = ctx(Precision::Fp32, false);
        let v = price(&pool, x(32, DType::F32, true), &mut id, &c).unwrap();
        assert_eq!((v.output.id, v.output.elems), (0, 32), "no storage of its own");
        let h = price(&head, v.output, &mut id, &c).unwrap();
        assert_eq!(h.saves, vec![Save::Chain(0, Size::per(128))], "x[:, 0] holds all 4 x 8 floats");
        // under autocast the head saves a bf16 copy of the view only: 8 x 2 B (and its weight copy)
        let bf16 = price(&head, v.output, &mut id, &ctx(Precision::Bf16, false)).unwrap();
        assert_eq!(bf16.saves, vec![Save::Own(Size::per(16)), Save::Own(Size::fixed(48))]);
    }

    #[test]
    fn l2_normalize_saves_its_input_the_norm_and_the_clamped_norm() {
        let l = layer(Op::L2Normalize, vec![6], vec![6]);
        let mut id = 0;
        let p = price(&l, x(6, DType::Bf16, true), &mut id, &ctx(Precision::Bf16, false)).unwrap();
        assert_eq!(p.saves, vec![Save::Chain(0, Size::per(12)), Save::Own(Size::per(2)), Save::Own(Size::per(2))]);
        assert_eq!(p.output.dtype, DType::Bf16);
    }

    fn attention(post_norm: bool) -> Layer {
        let a = crate::schema::arch::Attention {
            dim: 8,
            post_norm,
            heads: 2,
            kv_heads: 2,
            kernel: crate::schema::AttentionKernel::Math,
            norm: NormKind::Layer,
            attention_dropout: 0.0,
            dropout: 0.0,
            bias: true,
            causal: false,
            rope_theta: None,
        };
        layer(Op::SelfAttention(a), vec![4, 8], vec![4, 8])
    }

    #[test]
    fn post_norm_attention_saves_its_input_and_the_residual_sum() {
        // s = 4, d = 8, 2 heads, fp32 on CPU: [s, d] = 128 B, scores 2 x 4 x 4 x 4 B = 128 B,
        // norm statistics 2 x 4 rows x 4 B = 32 B
        let mut id = 0;
        let c = ctx(Precision::Fp32, false);
        let post = price(&attention(true), x(32, DType::F32, true), &mut id, &c).unwrap();
        let own = |n| Save::Own(Size::per(n));
        // qkv input x; q, k, v copies; softmax; out-projection input; the sum (storage 1) and statistics
        assert_eq!(
            post.saves,
            vec![
                Save::Chain(0, Size::per(128)),
                own(128),
                own(128),
                own(128),
                own(128),
                own(128),
                Save::Chain(1, Size::per(128)),
                own(32)
            ]
        );
        assert_eq!(post.output.id, 2, "the block returns the norm's output, not the sum");
        // pre-norm: the norm saves x and statistics, qkv the norm's output: the same bytes
        let pre = price(&attention(false), x(32, DType::F32, true), &mut id, &c).unwrap();
        assert_eq!(own_bytes(&pre), own_bytes(&post));
        assert_eq!(own_bytes(&post), (128 * 7 + 32, 0));
    }

    #[test]
    fn padding_bias_promotes_16_bit_scores_to_fp32_on_cpu() {
        // bf16 autocast with a mask: fp32 probabilities (128 B) and their bf16 copy for probs @ v (64 B)
        let mut id = 0;
        let text = price(&attention(true), x(32, DType::F32, true), &mut id, &text_ctx(Precision::Bf16)).unwrap();
        let plain = price(&attention(true), x(32, DType::F32, true), &mut id, &ctx(Precision::Bf16, false)).unwrap();
        assert_eq!(own_bytes(&text).0 - own_bytes(&plain).0, (128 - 64) + 64);
    }
}
