//! The transformer student's feed-forward block (`blk{i}_mlp`).
//!
//! Post-norm (BERT): `h = norm(h + drop(mlp(h)))`; pre-norm: `h = h + drop(mlp(norm(h)))`.
//! `mlp(y) = fc2(act(fc1(y)))` with `student.activation` (GELU is the exact, erf one), or
//! SwiGLU `fc2(silu(gate) * up)` where `fc1` yields gate | up (Shazeer 2020, arXiv:2002.05202).
use estimator_wasm::schema::arch::FeedForward as Spec;
use estimator_wasm::schema::MlpKind;
use tch::{nn, Tensor};

use super::layered::activate;
use super::linear::Linear;
use super::norm::Norm;

/// One feed-forward block with its norm and residual connection.
#[derive(Debug)]
pub struct FeedForward {
    norm: Norm,
    fc1: Linear,
    fc2: Linear,
    spec: Spec,
}

impl FeedForward {
    /// Creates `norm.*`, `fc1.*` and `fc2.*` under `p` (the block's path) for the block `spec`
    /// with the norms' epsilon `eps`.
    pub fn new(p: &nn::Path, spec: &Spec, eps: f64) -> FeedForward {
        let (d, width) = (spec.dim as i64, spec.width as i64);
        let up = if spec.mlp == MlpKind::Swiglu { 2 * width } else { width };
        let norm = Norm::new(&(p / "norm"), spec.norm, d, eps);
        let fc1 = Linear::new(&(p / "fc1"), d, up, spec.bias);
        let fc2 = Linear::new(&(p / "fc2"), width, d, spec.bias);
        FeedForward { norm, fc1, fc2, spec: *spec }
    }

    /// The block on `h` [B, S, d]; dropout only when `train`.
    pub fn forward(&self, h: &Tensor, train: bool) -> Tensor {
        let drop = |x: Tensor| x.dropout(self.spec.dropout, train);
        if self.spec.post_norm {
            self.norm.forward(&(h + drop(self.mlp(h))))
        } else {
            h + drop(self.mlp(&self.norm.forward(h)))
        }
    }

    fn mlp(&self, y: &Tensor) -> Tensor {
        let up = self.fc1.forward(y);
        let hidden = match self.spec.mlp {
            MlpKind::Standard => activate(self.spec.activation, &up),
            MlpKind::Swiglu => {
                let halves = up.chunk(2, -1);
                halves[0].silu() * &halves[1]
            }
        };
        self.fc2.forward(&hidden)
    }
}
