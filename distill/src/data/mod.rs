//! Datasets: the examples a run trains and evaluates on ([`Dataset`], `dataset.rs`), one loader
//! file per kind of data file, which [`Dataset::load`] picks, and input normalisation.
//!
//! * [`dataset`]: the in-memory dataset and its operations, the seeded batch order.
//! * [`images_npz`]: `.npz` with images [N, C, H, W] or vectors [N, D] and class labels.
//! * [`normalize`]: the per-channel normalisation of raw inputs (`data.scale/mean/std`).
use std::path::Path;

use estimator_wasm::schema::DataSpec;

use crate::error::Result;

pub mod dataset;
pub mod images_npz;
pub mod normalize;

pub use dataset::{permutation, Dataset};
pub use images_npz::npz_summary;
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
