//! Input normalisation: `((x * scale) - mean) / std` per channel, and the per-channel
//! statistics of raw inputs that the preflight compares across train and test sets.
use estimator_wasm::schema::DataSpec;
use tch::{Device, Kind, Tensor};

/// Per-channel statistics of raw inputs `x` (channel = dim 1 of [N, C, H, W]; the whole
/// sample for [N, D] vectors), accumulated in f64 over chunks of 4096 rows.
pub fn channel_stats(x: &Tensor) -> Vec<ChannelStats> {
    let channels = if x.dim() > 2 { x.size()[1] } else { 1 };
    let mut acc = vec![(f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0.0); channels as usize];
    let n = x.size()[0];
    for start in (0..n).step_by(4096) {
        // [C, values of that channel in this chunk]
        let x = x.narrow(0, start, 4096.min(n - start)).to_kind(Kind::Double);
        let x = if channels > 1 { x.transpose(0, 1).reshape([channels, -1]) } else { x.reshape([1, -1]) };
        let get = |t: Tensor| Vec::<f64>::try_from(&t).expect("a [C] f64 tensor");
        let min = get(x.amin([1].as_slice(), false));
        let max = get(x.amax([1].as_slice(), false));
        let sum = get(x.sum_dim_intlist([1].as_slice(), false, Kind::Double));
        let sq = get(x.square().sum_dim_intlist([1].as_slice(), false, Kind::Double));
        let count = x.size()[1] as f64;
        for (c, a) in acc.iter_mut().enumerate() {
            *a = (a.0.min(min[c]), a.1.max(max[c]), a.2 + sum[c], a.3 + sq[c], a.4 + count);
        }
    }
    acc.into_iter()
        .map(|(min, max, sum, sq, n)| {
            let mean = sum / n;
            ChannelStats { min, max, mean, std: (sq / n - mean * mean).max(0.0).sqrt() }
        })
        .collect()
}

/// Range of one input channel of a dataset, in the file's units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelStats {
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub std: f64,
}

impl std::fmt::Display for ChannelStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:.4}, {:.4}] (mean {:.4}, std {:.4})", self.min, self.max, self.mean, self.std)
    }
}

/// `((x * scale) - mean) / std`, per channel, in fp32.
#[derive(Debug)]
pub struct Normalizer {
    scale: f64,
    mean: Option<Tensor>,
    std: Option<Tensor>,
}

impl Normalizer {
    pub fn new(spec: &DataSpec, device: Device) -> Normalizer {
        // [1, C, 1, 1] for images, [1, D] (or a scalar) for vectors.
        let rank = spec.input_shape.len() + 1;
        let per_channel = |v: &[f64]| {
            let t = Tensor::from_slice(v).to_kind(Kind::Float).to_device(device);
            let mut shape = vec![1i64; rank];
            shape[1] = v.len() as i64;
            if v.len() > 1 {
                t.reshape(shape.as_slice())
            } else {
                t
            }
        };
        let mean = (!spec.mean.is_empty()).then(|| per_channel(&spec.mean));
        let std = (!spec.std.is_empty()).then(|| per_channel(&spec.std));
        Normalizer { scale: spec.scale, mean, std }
    }

    /// The same normalisation with its statistics on `device`.
    pub fn to_device(&self, device: Device) -> Normalizer {
        let on = |t: &Option<Tensor>| t.as_ref().map(|t| t.to_device(device));
        Normalizer { scale: self.scale, mean: on(&self.mean), std: on(&self.std) }
    }

    /// The same normalisation, sharing its statistics' storage.
    pub fn shallow_clone(&self) -> Normalizer {
        let share = |t: &Option<Tensor>| t.as_ref().map(Tensor::shallow_clone);
        Normalizer { scale: self.scale, mean: share(&self.mean), std: share(&self.std) }
    }

    /// Float [B, ...] normalised inputs for a raw batch of any dtype.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let mut x = x.to_kind(Kind::Float) * self.scale;
        if let Some(mean) = &self.mean {
            x -= mean;
        }
        if let Some(std) = &self.std {
            x /= std;
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_stats_per_channel() {
        // channel 0 holds 1, 2, 5, 6; channel 1 holds 3, 4, 7, 8: std sqrt(4.25) each
        let x = Tensor::from_slice(&[1u8, 2, 3, 4, 5, 6, 7, 8]).reshape([2, 2, 1, 2]);
        let s = channel_stats(&x);
        let std = 4.25f64.sqrt();
        assert_eq!(s[0], ChannelStats { min: 1.0, max: 6.0, mean: 3.5, std });
        assert_eq!(s[1], ChannelStats { min: 3.0, max: 8.0, mean: 5.5, std });
    }
}
