//! The transformer student's normalisation over the last dimension: `nn.LayerNorm(d, eps)`
//! (weight 1, bias 0) or `nn.RMSNorm(d, eps)` (weight 1; Zhang & Sennrich 2019), with the
//! configured epsilon (`student.transformer.norm_eps`; BERT uses 1e-12).
use estimator_wasm::schema::NormKind;
use tch::nn::{self, Init};
use tch::Tensor;

/// A LayerNorm or RMSNorm of width `dim`.
#[derive(Debug)]
pub struct Norm {
    pub weight: Tensor,
    /// LayerNorm's shift; `None` for RMSNorm.
    pub bias: Option<Tensor>,
    dim: i64,
    eps: f64,
}

impl Norm {
    /// Creates `weight` (and, for LayerNorm, `bias`) of shape [dim] under `p`.
    pub fn new(p: &nn::Path, kind: NormKind, dim: i64, eps: f64) -> Norm {
        let weight = p.var("weight", &[dim], Init::Const(1.0));
        let bias = (kind == NormKind::Layer).then(|| p.var("bias", &[dim], Init::Const(0.0)));
        Norm { weight, bias, dim, eps }
    }

    /// `x` [.., dim] normalised over its last dimension: LayerNorm
    /// `(x - mean) / sqrt(var + eps) * weight + bias` (biased variance), or RMSNorm
    /// `x / sqrt(mean(x^2) + eps) * weight`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        match &self.bias {
            Some(bias) => x.layer_norm([self.dim], Some(&self.weight), Some(bias), self.eps, true),
            None => x.rms_norm([self.dim], Some(&self.weight), self.eps),
        }
    }
}
