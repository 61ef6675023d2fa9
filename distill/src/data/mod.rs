//! Datasets: the examples a run trains and evaluates on ([`Dataset`], `dataset.rs`), one file per
//! kind of example and per kind of data file, which [`Dataset::load`] picks. A dataset hands out
//! [`Batch`]es whose [`ModelInput`] is ready for the networks: nothing outside `data/` prepares
//! (normalises, pads) inputs.
//!
//! * [`input`]: [`ModelInput`] (inputs and attention mask) and [`Batch`] (input, labels, file rows).
//! * [`dataset`]: the in-memory dataset, its kinds of example ([`Examples`]), the seeded batch order.
//! * [`images`]: image or vector examples, kept raw and normalised per batch.
//! * [`images_npz`]: `.npz` with images [N, C, H, W] or vectors [N, D] and class labels.
//! * [`normalize`]: the per-channel normalisation of raw inputs (`data.scale/mean/std`).
use std::path::Path;

use estimator_wasm::schema::DataSpec;

use crate::error::Result;

pub mod dataset;
pub mod images;
pub mod images_npz;
pub mod input;
pub mod normalize;

pub use dataset::{permutation, Dataset, Examples};
pub use images::Images;
pub use images_npz::npz_summary;
pub use input::{Batch, ModelInput};
pub use normalize::{ChannelStats, Normalizer};

impl Dataset {
    /// Reads `path` as the kind of data `spec` describes (today an `.npz`) and checks it.
    ///
    /// # Errors
    /// [`crate::DistillError::Data`] naming the file, the array and the fix.
    pub fn load(path: &Path, spec: &DataSpec) -> Result<Dataset> {
        images_npz::load(path, spec)
    }
}
