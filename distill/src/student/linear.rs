//! A linear projection `y = x W^T + b` over the last dimension, initialised as PyTorch's
//! `nn.Linear` is (weight and bias uniform in `[-1/sqrt(in), 1/sqrt(in)]`, the bound that
//! `kaiming_uniform_(a = sqrt(5))` gives), for the transformer student's projections.
use tch::nn::{self, Init};
use tch::Tensor;

/// A linear map from `[.., in]` to `[.., out]`: `weight` [out, in], `bias` [out] when present.
#[derive(Debug)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    /// Creates `weight` [out, in] (and `bias` [out] when `bias`) under `p`, as `nn.Linear(in, out)`
    /// initialises them.
    pub fn new(p: &nn::Path, in_features: i64, out_features: i64, bias: bool) -> Linear {
        let bound = 1.0 / (in_features.max(1) as f64).sqrt();
        let init = Init::Uniform { lo: -bound, up: bound };
        let weight = p.var("weight", &[out_features, in_features], init);
        let bias = bias.then(|| p.var("bias", &[out_features], init));
        Linear { weight, bias }
    }

    /// `x` [.., in] to [.., out].
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}
