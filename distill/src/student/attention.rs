//! The transformer student's self-attention block (`blk{i}_attn`): bidirectional over the
//! tokens of a sentence with padded keys masked, or causal under a language-model head.
//!
//! Post-norm (BERT): `h = norm(h + drop(attn(h)))`; pre-norm: `h = h + drop(attn(norm(h)))`.
//! `attn(y)`: the fused projection `qkv = y W^T + b` (rows q | k | v; k and v of `kv_heads`
//! heads for grouped-query attention, Ainslie et al. 2023), split into heads
//! [B, heads, S, d_head], q and k turned by rotary positions when `rope_theta` is set
//! ([`crate::torch::rotary`]); then either the math kernel
//! `p = softmax(q k^T / sqrt(d_head) + bias)`, `o = dropout(p) v` (Vaswani et al. 2017), k and v
//! repeated to `heads`, with the additive bias `(1 - mask) * finfo(dtype).min` (Hugging Face
//! BERT's extended attention mask) or, causal, `finfo.min` above the diagonal; or
//! `scaled_dot_product_attention` with the boolean key mask or `is_causal` and its own
//! grouped-query broadcast (Dao 2022); heads merged back to [B, S, d] and projected by `proj`.
//!
//! Causal attention ignores the padding mask: batches are right-padded, so a real token's
//! earlier keys are all real, and what padded positions compute is never scored.
//!
//! Trace-safe: heads are split with `unflatten` and merged with `flatten`, so no batch or
//! sequence size is read in Rust.
use estimator_wasm::schema::arch::Attention;
use estimator_wasm::schema::AttentionKernel;
use tch::{nn, Kind, Tensor};

use super::linear::Linear;
use super::norm::Norm;
use crate::torch::rotary::Rotary;

/// One self-attention block with its norm and residual connection.
#[derive(Debug)]
pub struct SelfAttention {
    norm: Norm,
    qkv: Linear,
    proj: Linear,
    spec: Attention,
}

impl SelfAttention {
    /// Creates `norm.*`, `qkv.*` and `proj.*` under `p` (the block's path) for the block `spec`
    /// with the norms' epsilon `eps`.
    pub fn new(p: &nn::Path, spec: &Attention, eps: f64) -> SelfAttention {
        let d = spec.dim as i64;
        let kv_dim = (spec.dim / spec.heads.max(1) * spec.kv_heads) as i64;
        let norm = Norm::new(&(p / "norm"), spec.norm, d, eps);
        let qkv = Linear::new(&(p / "qkv"), d, d + 2 * kv_dim, spec.bias);
        let proj = Linear::new(&(p / "proj"), d, d, spec.bias);
        SelfAttention { norm, qkv, proj, spec: *spec }
    }

    /// The block on `h` [B, S, d] with the attention mask `mask` int [B, S] (1 = token,
    /// 0 = padding; `None`: every token is real); dropout only when `train`.
    pub fn forward(&self, h: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let drop = |x: Tensor| x.dropout(self.spec.dropout, train);
        if self.spec.post_norm {
            self.norm.forward(&(h + drop(self.attend(h, mask, train))))
        } else {
            h + drop(self.attend(&self.norm.forward(h), mask, train))
        }
    }

    /// Multi-head attention of `y` [B, S, d] over its unmasked tokens, projected: [B, S, d].
    fn attend(&self, y: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let (heads, kv_heads) = (self.spec.heads as i64, self.spec.kv_heads as i64);
        let d = self.spec.dim as i64;
        let d_head = d / heads;
        // [B, S, n * d_head] -> [B, n, S, d_head]
        let parts = self.qkv.forward(y).split_with_sizes([d, kv_heads * d_head, kv_heads * d_head], -1);
        let heads_of = |t: &Tensor, n: i64| t.unflatten(-1, [n, d_head]).transpose(1, 2);
        let (mut q, mut k) = (heads_of(&parts[0], heads), heads_of(&parts[1], kv_heads));
        let v = heads_of(&parts[2], kv_heads);
        if let Some(theta) = self.spec.rope_theta {
            let (cos, sin) = Rotary { theta, d_head }.angles(&q);
            (q, k) = (Rotary::apply(&q, &cos, &sin), Rotary::apply(&k, &cos, &sin));
        }
        let p = if train { self.spec.attention_dropout } else { 0.0 };
        let causal = self.spec.causal;
        let o = match self.spec.kernel {
            AttentionKernel::Math => {
                let repeat = |t: Tensor| {
                    if kv_heads == heads {
                        t
                    } else {
                        t.repeat_interleave_self_int(heads / kv_heads, 1, None)
                    }
                };
                let (k, v) = (repeat(k), repeat(v));
                let mut scores = q.matmul(&k.transpose(-2, -1)) / (d_head as f64).sqrt();
                // an fp32 bias: under 16-bit autocast the scores are promoted, so the softmax
                // runs (and is saved) in fp32, as the estimator prices it and as bert.py does
                if causal {
                    scores = &scores + causal_bias(&scores);
                } else if let Some(mask) = mask {
                    scores = &scores + additive_bias(mask, Kind::Float);
                }
                scores.softmax(-1, None).dropout(p, train).matmul(&v)
            }
            AttentionKernel::Flash => {
                let keep = mask.filter(|_| !causal).map(|m| m.ne(0).unsqueeze(1).unsqueeze(1));
                Tensor::scaled_dot_product_attention(&q, &k, &v, keep, p, causal, None, kv_heads != heads)
            }
        };
        self.proj.forward(&o.transpose(1, 2).flatten(2, -1))
    }
}

/// The additive attention bias of the key mask `mask` int [B, S] in dtype `kind`:
/// `(1 - mask) * finfo(kind).min`, shaped [B, 1, 1, S] to broadcast over heads and queries
/// (Hugging Face's `get_extended_attention_mask`).
pub fn additive_bias(mask: &Tensor, kind: Kind) -> Tensor {
    let padding: Tensor = 1.0 - mask.to_kind(kind);
    (padding * lowest(kind)).unsqueeze(1).unsqueeze(1)
}

/// The causal bias of `scores` [B, heads, S, S], fp32 [S, S]: `finfo.min` where a key comes
/// after its query (above the diagonal), 0 elsewhere.
pub fn causal_bias(scores: &Tensor) -> Tensor {
    let square = scores.select(0, 0).select(0, 0).ones_like().to_kind(Kind::Float);
    square.triu(1) * lowest(Kind::Float)
}

/// `torch.finfo(kind).min`.
fn lowest(kind: Kind) -> f64 {
    match kind {
        Kind::Half => -65504.0,
        Kind::BFloat16 => -3.389_531_389_251_535_5e38,
        Kind::Double => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

#[cfg(test)]
mod tests {
    use estimator_wasm::schema::NormKind;
    use tch::nn::VarStore;
    use tch::Device;

    use super::*;

    /// One head of width 2 whose q, k, v and output projections are the identity.
    fn identity_attention(vs: &VarStore, kernel: AttentionKernel) -> SelfAttention {
        let spec = Attention {
            dim: 2,
            post_norm: false,
            heads: 1,
            kv_heads: 1,
            kernel,
            norm: NormKind::Layer,
            attention_dropout: 0.0,
            dropout: 0.0,
            bias: true,
            causal: false,
            rope_theta: None,
        };
        let a = SelfAttention::new(&vs.root(), &spec, 1e-5);
        let eye = Tensor::eye(2, (Kind::Float, Device::Cpu));
        tch::no_grad(|| {
            a.qkv.weight.shallow_clone().copy_(&Tensor::cat(&[&eye, &eye, &eye], 0));
            a.proj.weight.shallow_clone().copy_(&eye);
            let _ = a.qkv.bias.as_ref().unwrap().shallow_clone().zero_();
            let _ = a.proj.bias.as_ref().unwrap().shallow_clone().zero_();
        });
        a
    }

    #[test]
    fn attention_by_hand() {
        let _rng = crate::torch::test_rng::lock();
        let rows = [[1.0f64, 2.0], [3.0, -1.0], [0.5, 0.5]];
        let y = Tensor::from_slice(&rows.concat()).reshape([1, 3, 2]).to_kind(Kind::Float);
        for kernel in [AttentionKernel::Math, AttentionKernel::Flash] {
            let vs = VarStore::new(Device::Cpu);
            let a = identity_attention(&vs, kernel);
            // every key masked but the first: each query returns that token's value
            let one = Tensor::from_slice(&[1i64, 0, 0]).reshape([1, 3]);
            let got = tch::no_grad(|| a.attend(&y, Some(&one), false));
            let want = Tensor::from_slice(&[1.0f32, 2.0]).reshape([1, 1, 2]).expand([1, 3, 2], false);
            assert!(got.allclose(&want, 1e-6, 1e-6, false), "{kernel:?}: {got}");
            // all keys: o_i = sum_j softmax_j(y_i . y_j / sqrt(2)) y_j, in f64 by hand
            let full = Tensor::from_slice(&[1i64, 1, 1]).reshape([1, 3]);
            let got = Vec::<f32>::try_from(tch::no_grad(|| a.attend(&y, Some(&full), false)).flatten(0, -1)).unwrap();
            for (i, q) in rows.iter().enumerate() {
                let scores: Vec<f64> = rows.iter().map(|k| (q[0] * k[0] + q[1] * k[1]) / 2f64.sqrt()).collect();
                let total: f64 = scores.iter().map(|s| s.exp()).sum();
                for c in 0..2 {
                    let want: f64 = rows.iter().zip(&scores).map(|(v, s)| s.exp() / total * v[c]).sum();
                    assert!((f64::from(got[2 * i + c]) - want).abs() < 1e-6, "{kernel:?} row {i}: {got:?}");
                }
            }
        }
    }

    /// A causal block of width 8 (4 heads of 2; `kv_heads` of them for keys and values) with
    /// rotary positions, random weights from seed 0.
    fn causal_attention(vs: &VarStore, kernel: AttentionKernel, kv_heads: u64) -> SelfAttention {
        tch::manual_seed(0);
        let spec = Attention {
            dim: 8,
            post_norm: false,
            heads: 4,
            kv_heads,
            kernel,
            norm: NormKind::Rms,
            attention_dropout: 0.0,
            dropout: 0.0,
            bias: false,
            causal: true,
            rope_theta: Some(100.0),
        };
        SelfAttention::new(&vs.root(), &spec, 1e-5)
    }

    #[test]
    fn causal_attention_ignores_later_tokens_and_both_kernels_agree() {
        let _rng = crate::torch::test_rng::lock();
        for kv_heads in [4, 2] {
            let (vs_math, vs_flash) = (VarStore::new(Device::Cpu), VarStore::new(Device::Cpu));
            let math = causal_attention(&vs_math, AttentionKernel::Math, kv_heads);
            let flash = causal_attention(&vs_flash, AttentionKernel::Flash, kv_heads);
            tch::manual_seed(1);
            let y = Tensor::randn([2, 5, 8], (Kind::Float, Device::Cpu));
            let (a, b) = tch::no_grad(|| (math.attend(&y, None, false), flash.attend(&y, None, false)));
            assert!(a.allclose(&b, 1e-5, 1e-5, false), "kv_heads {kv_heads}: math {a} flash {b}");
            // changing the last two tokens changes nothing before them
            let later = Tensor::cat(&[y.narrow(1, 0, 3), y.narrow(1, 3, 2) * 3.0], 1);
            let c = tch::no_grad(|| math.attend(&later, None, false));
            assert!(c.narrow(1, 0, 3).allclose(&a.narrow(1, 0, 3), 1e-6, 1e-6, false), "kv_heads {kv_heads}");
            assert!(!c.narrow(1, 3, 2).allclose(&a.narrow(1, 3, 2), 1e-3, 1e-3, false));
            // the first token sees only itself: its output is its own value, projected
            let v_first = tch::no_grad(|| {
                let qkv = math.qkv.forward(&y.narrow(1, 0, 1));
                let v =
                    qkv.narrow(-1, 8 + 2 * kv_heads as i64, 2 * kv_heads as i64).unflatten(-1, [kv_heads as i64, 2]);
                let v = v.repeat_interleave_self_int(4 / kv_heads as i64, 2, None).flatten(2, -1);
                math.proj.forward(&v)
            });
            assert!(a.narrow(1, 0, 1).allclose(&v_first, 1e-5, 1e-5, false), "kv_heads {kv_heads}");
        }
    }

    #[test]
    fn the_bias_is_the_dtype_minimum_on_padding() {
        let mask = Tensor::from_slice(&[1i64, 0]).reshape([1, 2]);
        let bias = additive_bias(&mask, Kind::Float);
        assert_eq!(bias.size(), [1, 1, 1, 2]);
        assert_eq!(Vec::<f32>::try_from(bias.flatten(0, -1)).unwrap(), [0.0, f32::MIN]);
        let half = additive_bias(&mask, Kind::Half).to_kind(Kind::Float);
        assert_eq!(Vec::<f32>::try_from(half.flatten(0, -1)).unwrap(), [0.0, -65504.0]);
    }
}
