//! Image (or vector) examples: the raw inputs as the file stores them, normalised per batch on
//! the device by the [`Normalizer`] of `data.scale/mean/std`, so batches leave the dataset ready
//! for the networks.
use tch::{Device, Tensor};

use super::input::ModelInput;
use super::normalize::{channel_stats, ChannelStats, Normalizer};

/// Raw inputs [N, ...input_shape] (Uint8 or Float: uint8 pixels take a quarter of the memory
/// of floats) and their normalisation.
#[derive(Debug)]
pub struct Images {
    raw: Tensor,
    norm: Normalizer,
}

impl Images {
    pub fn new(raw: Tensor, norm: Normalizer) -> Images {
        Images { raw, norm }
    }

    /// The raw inputs [N, ...], in the file's units.
    pub fn raw(&self) -> &Tensor {
        &self.raw
    }

    pub fn len(&self) -> usize {
        self.raw.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `index` ([K] Int64 on the inputs' device), raw.
    pub fn select(&self, index: &Tensor) -> Images {
        Images { raw: self.raw.index_select(0, index), norm: self.norm.shallow_clone() }
    }

    /// The same inputs on `device`.
    pub fn to_device(&self, device: Device) -> Images {
        Images { raw: self.raw.to_device(device), norm: self.norm.to_device(device) }
    }

    /// The normalised model input of rows `index` ([B] Int64 on the inputs' device).
    pub fn input(&self, index: &Tensor) -> ModelInput {
        ModelInput::new(self.norm.apply(&self.raw.index_select(0, index)))
    }

    /// The normalised model input of rows `start..start + len`.
    pub fn input_range(&self, start: i64, len: i64) -> ModelInput {
        ModelInput::new(self.norm.apply(&self.raw.narrow(0, start, len)))
    }

    /// Bytes of one sample as kept (its values times the raw dtype's size).
    pub fn sample_bytes(&self) -> u64 {
        (self.raw.numel() / self.len().max(1)) as u64 * self.raw.kind().elt_size_in_bytes() as u64
    }

    /// Per-channel statistics of the raw inputs (see [`channel_stats`]).
    pub fn channel_stats(&self) -> Vec<ChannelStats> {
        channel_stats(&self.raw)
    }
}
