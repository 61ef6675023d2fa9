//! The rotary positions of a Hugging Face decoder (Su et al. 2021, arXiv:2104.09864), computed as
//! transformers computes them (`modeling_rope_utils.py`), in fp32: the inverse frequencies
//! `1 / theta^(2i/d)`, `i < d/2`, rescaled by the config's `rope_scaling`, then for position `p`
//! the angles `p * inv_freq`, doubled to `[angles, angles]` over the head (the `rotate_half`
//! layout that [`crate::torch::rotary::Rotary::apply`] turns q and k by).
use tch::{Device, Kind, Tensor};

use super::config::RopeScaling;

/// `inv_freq` fp32 [d_head / 2] on `device` for base `theta` and `scaling`.
///
/// `linear`: every frequency divided by `factor`. `llama3` (Llama 3.1's
/// `_compute_llama3_parameters`): with wavelengths `2 pi / f`, those longer than
/// `original / low_freq_factor` are divided by `factor`, those shorter than
/// `original / high_freq_factor` kept, and between them
/// `(1 - s) f / factor + s f` with `s = (original / wavelength - low) / (high - low)`.
pub fn inverse_frequencies(theta: f64, d_head: i64, scaling: RopeScaling, device: Device) -> Tensor {
    let exponents = Tensor::arange_start_step(0, d_head, 2, (Kind::Int64, device)).to_kind(Kind::Float) / d_head as f64;
    let inv_freq = Tensor::pow_scalar(theta, &exponents).reciprocal();
    match scaling {
        RopeScaling::None => inv_freq,
        RopeScaling::Linear { factor } => inv_freq / factor,
        RopeScaling::Llama3 { factor, low_freq_factor: low, high_freq_factor: high, original_max_positions: old } => {
            let (low_wavelength, high_wavelength) = (old / low, old / high);
            let wavelength = inv_freq.reciprocal() * (2.0 * std::f64::consts::PI);
            let scaled = inv_freq.where_self(&wavelength.le(low_wavelength), &(&inv_freq / factor));
            let smooth = (wavelength.reciprocal() * old - low) / (high - low);
            let smoothed = (smooth.ones_like() - &smooth) * &scaled / factor + &smooth * &scaled;
            let medium = wavelength.ge(high_wavelength).logical_and(&wavelength.le(low_wavelength));
            smoothed.where_self(&medium, &scaled)
        }
    }
}

/// `cos` and `sin` [S, d_head] in `kind` for positions `0..seq`, from `inv_freq` fp32 [d_head / 2].
pub fn angles(inv_freq: &Tensor, seq: i64, kind: Kind) -> (Tensor, Tensor) {
    let positions = Tensor::arange(seq, (Kind::Float, inv_freq.device()));
    let freqs = positions.unsqueeze(1) * inv_freq.unsqueeze(0);
    let angles = Tensor::cat(&[&freqs, &freqs], -1);
    (angles.cos().to_kind(kind), angles.sin().to_kind(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double)).unwrap()
    }

    #[test]
    fn llama3_scaling_keeps_high_divides_low_and_blends_between() {
        // d 8, theta 10000: frequencies 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283);
        // original 64, low 1, high 4: above 64 divided by 8, below 16 kept, 63 blended
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 64.0,
        };
        let got = values(&inverse_frequencies(10_000.0, 8, scaling, Device::Cpu));
        let s = (64.0 / (2.0 * std::f64::consts::PI / 0.1) - 1.0) / 3.0;
        let want = [1.0, (1.0 - s) * 0.1 / 8.0 + s * 0.1, 0.01 / 8.0, 0.001 / 8.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6 * w.max(1e-3), "{got:?} against {want:?}");
        }
        let linear = values(&inverse_frequencies(10_000.0, 8, RopeScaling::Linear { factor: 2.0 }, Device::Cpu));
        assert!((linear[1] - 0.05).abs() < 1e-8, "{linear:?}");
    }
}
