//! Rotary position embeddings (Su et al. 2021, arXiv:2104.09864, "RoFormer"), in the layout of
//! Hugging Face's Llama (`modeling_llama.py`, `rotate_half`): in each head of width `d`, the pair
//! `(x_i, x_{i + d/2})` is rotated by the angle `pos * theta^(-2i/d)`, `i < d/2`:
//!
//! `rope(x) = x * cos + rotate_half(x) * sin`, `rotate_half(x) = [-x_{d/2..d}, x_{0..d/2}]`,
//! with `cos` and `sin` of `[angles, angles]` over the last dimension.
//!
//! Positions are `0..S` for every row (batches are right-padded). Trace-safe: the positions are
//! the running count of a tensor of ones over the sequence, so no length read in Rust becomes a
//! constant of a trace; the inverse frequencies depend on `d` and `theta` only.
use tch::{Kind, Tensor};

/// Rotary positions of base `theta` for heads of width `d_head` (even).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rotary {
    pub theta: f64,
    pub d_head: i64,
}

impl Rotary {
    /// `1 / theta^(2i/d)` for `i < d/2`, fp32 [d/2] on the device of `row` (any [>= d/2] tensor),
    /// computed as Hugging Face's Llama computes it (`1.0 / base ** (arange(0, d, 2).float() / d)`).
    /// Made of tensor ops on `row`, not of host values or a device: a trace records a tensor built
    /// from host data as zeros, and an `arange` with its tracing device, so the exported student
    /// would not rotate, or not run on another device.
    fn inverse_frequencies(&self, row: &Tensor) -> Tensor {
        let i = row.narrow(0, 0, self.d_head / 2).ones_like().to_kind(Kind::Float).cumsum(0, Kind::Float) - 1.0;
        let exponents = i * (2.0 / self.d_head as f64);
        Tensor::pow_scalar(self.theta, &exponents).reciprocal()
    }

    /// `cos` and `sin` [S, d_head] in the dtype of `like` (q or k [B, heads, S, d_head]) for the
    /// positions `0..S` of its sequence dimension; the angles in fp32.
    pub fn angles(&self, like: &Tensor) -> (Tensor, Tensor) {
        // [S] positions 0..S from a row of ones over the sequence (dim 2)
        let ones = like.select(0, 0).select(0, 0).select(-1, 0).ones_like().to_kind(Kind::Float);
        let positions = ones.cumsum(0, Kind::Float) - 1.0;
        let row = like.select(0, 0).select(0, 0).select(0, 0);
        let freqs = positions.unsqueeze(1) * self.inverse_frequencies(&row).unsqueeze(0);
        let angles = Tensor::cat(&[&freqs, &freqs], -1);
        (angles.cos().to_kind(like.kind()), angles.sin().to_kind(like.kind()))
    }

    /// `x` [B, heads, S, d_head] rotated: `x * cos + rotate_half(x) * sin` (`cos`, `sin` from
    /// [`Rotary::angles`]).
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let halves = x.chunk(2, -1);
        let rotated = Tensor::cat(&[halves[1].neg(), halves[0].shallow_clone()], -1);
        x * cos + rotated * sin
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn each_pair_turns_by_its_angle() {
        // d = 4, theta = 100: frequencies 1 and 100^(-1/2) = 0.1; position p turns the pair
        // (x0, x2) by p and (x1, x3) by 0.1 p
        let rope = Rotary { theta: 100.0, d_head: 4 };
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).reshape([1, 1, 1, 4]).repeat([1, 1, 3, 1]);
        let (cos, sin) = rope.angles(&x);
        assert_eq!(cos.size(), [3, 4]);
        let got = Vec::<f32>::try_from(Rotary::apply(&x, &cos, &sin).flatten(0, -1)).unwrap();
        for p in 0..3 {
            for (i, (a, b), f) in [(0usize, (1.0f64, 3.0f64), 1.0f64), (1, (2.0, 4.0), 0.1)] {
                let angle = p as f64 * f;
                let first = a * angle.cos() - b * angle.sin();
                let second = b * angle.cos() + a * angle.sin();
                assert!((f64::from(got[4 * p + i]) - first).abs() < 1e-5, "p {p} pair {i}: {got:?}");
                assert!((f64::from(got[4 * p + i + 2]) - second).abs() < 1e-5, "p {p} pair {i}: {got:?}");
            }
        }
    }

    #[test]
    fn the_angles_follow_the_input_dtype() {
        let rope = Rotary { theta: 10_000.0, d_head: 8 };
        let x = Tensor::zeros([2, 3, 5, 8], (Kind::BFloat16, Device::Cpu));
        let (cos, sin) = rope.angles(&x);
        assert_eq!((cos.kind(), sin.size()), (Kind::BFloat16, vec![5, 8]));
    }
}
