//! The transformer student's self-attention block (`blk{i}_attn`), bidirectional over the
//! tokens of a sentence with padded keys masked.
//!
//! Post-norm (BERT): `h = norm(h + drop(attn(h)))`; pre-norm: `h = h + drop(attn(norm(h)))`.
//! `attn(y)`: the fused projection `qkv = y W^T + b` (rows q | k | v; k and v of `kv_heads`
//! heads, repeated to `heads` for grouped-query attention, Ainslie et al. 2023), split into
//! heads [B, heads, S, d_head]; then either the math kernel
//! `p = softmax(q k^T / sqrt(d_head) + bias)`, `o = dropout(p) v` (Vaswani et al. 2017), with the
//! additive bias `(1 - mask) * finfo(dtype).min` (Hugging Face BERT's extended attention mask),
//! or `scaled_dot_product_attention` with the boolean key mask (Dao 2022); heads merged back to
//! [B, S, d] and projected by `proj`.
//!
//! Trace-safe: heads are split with `unflatten` and merged with `flatten`, so no batch or
//! sequence size is read in Rust.
use estimator_wasm::schema::arch::Attention;
use estimator_wasm::schema::AttentionKernel;
use tch::{nn, Kind, Tensor};

use super::linear::Linear;
use super::norm::Norm;

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
        let parts = self.qkv.forward(y).split_with_sizes([d, kv_heads * d_head, kv_heads * d_head], -1);
        // [B, S, n * d_head] -> [B, n, S, d_head], key/value heads repeated to `heads`
        let split = |t: &Tensor, n: i64| {
            let t = t.unflatten(-1, [n, d_head]).transpose(1, 2);
            if n == heads {
                t
            } else {
                t.repeat_interleave_self_int(heads / n, 1, None)
            }
        };
        let (q, k, v) = (split(&parts[0], heads), split(&parts[1], kv_heads), split(&parts[2], kv_heads));
        let p = if train { self.spec.attention_dropout } else { 0.0 };
        let o = match self.spec.kernel {
            AttentionKernel::Math => {
                let mut scores = q.matmul(&k.transpose(-2, -1)) / (d_head as f64).sqrt();
                if let Some(mask) = mask {
                    // an fp32 bias: under 16-bit autocast the scores are promoted, so the softmax
                    // runs (and is saved) in fp32, as the estimator prices it and as bert.py does
                    scores = &scores + additive_bias(mask, Kind::Float);
                }
                scores.softmax(-1, None).dropout(p, train).matmul(&v)
            }
            AttentionKernel::Flash => {
                let keep = mask.map(|m| m.ne(0).unsqueeze(1).unsqueeze(1));
                Tensor::scaled_dot_product_attention(&q, &k, &v, keep, p, false, None, false)
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
        let _rng = crate::test_rng::lock();
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
