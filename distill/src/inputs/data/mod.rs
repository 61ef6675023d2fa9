//! Datasets: the examples a run trains and evaluates on ([`Dataset`], `dataset.rs`), one file per
//! kind of example and per kind of data file, which [`Dataset::load`] picks. A dataset hands out
//! [`Batch`]es whose [`ModelInput`] is ready for the networks: nothing outside `data/` prepares
//! (normalises, pads) inputs.
//!
//! * [`input`]: [`ModelInput`] (inputs and attention mask) and [`Batch`] (input, labels, file rows).
//! * [`buckets`]: the length-bucketed batch order of text (sentences of similar length batched).
//! * [`dataset`]: the in-memory dataset, its kinds of example ([`Examples`]), the seeded batch order.
//! * [`images`]: image or vector examples, kept raw and normalised per batch.
//! * [`images_npz`]: `.npz` with images [N, C, H, W] or vectors [N, D] and class labels.
//! * [`normalize`]: the per-channel normalisation of raw inputs (`data.scale/mean/std`).
//! * [`text`]: sentences as token ids, padded per batch to the longest.
//! * [`text_file`]: `.txt` with one sentence per line, tokenised by the teacher's tokenizer.
//! * [`token_stream`]: a language model's lines packed into full windows, with next-token labels.
//! * [`tokenizer`]: the teacher's `tokenizer.json` (`data.tokenizer`), checked and set up.
//! * [`widths`]: the padded widths of a text run's batches, for the memory plan.
use std::path::Path;

use estimator_wasm::schema::DataSpec;

use crate::host::error::{DistillError, Result};

/// Where a relative file path is taken from, for the message of a file that cannot be read.
pub const PATHS_RULE: &str = "in a cfg.toml relative to its folder, with --set to the current one";

/// The fix for a data file that cannot be read: the keys, and where their paths are taken from.
pub fn check_paths() -> String {
    format!("check data.train and data.test ({PATHS_RULE})")
}

pub mod buckets;
pub mod dataset;
pub mod images;
pub mod images_npz;
pub mod input;
pub mod normalize;
pub mod text;
pub mod text_file;
pub mod token_stream;
pub mod tokenizer;
pub mod widths;

pub use dataset::{permutation, Dataset, Examples};
pub use images::Images;
pub use images_npz::npz_summary;
pub use input::{Batch, ModelInput};
pub use normalize::{ChannelStats, Normalizer};
pub use text::{Text, TextStats};
pub use text_file::summary as text_summary;
pub use tokenizer::{TextLayout, TextTokenizer};

/// Samples and bytes per sample as `distill` keeps them, read cheaply for `distill plan`: the
/// `.npz` header's `x`, or a `.txt` file's non-blank lines (ids and mask at `input_shape[0]`
/// tokens, 8 bytes each); `None` when the file cannot be read.
pub fn file_summary(path: &Path, spec: &DataSpec) -> Option<(u64, u64)> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("txt") => {
            let bytes = std::fs::read(path).ok()?;
            let lines = bytes.split(|&b| b == b'\n').filter(|l| l.iter().any(|b| !b.is_ascii_whitespace())).count();
            Some((lines as u64, 2 * 8 * spec.input_shape.first().copied().unwrap_or(1)))
        }
        _ => npz_summary(path),
    }
}

impl Dataset {
    /// Reads `path` as the kind of data its extension names and checks it: `.npz`, images or
    /// vectors as `spec` describes; `.txt`, sentences tokenised by `tokenizer`
    /// ([`TextTokenizer::load`], from `data.tokenizer`).
    ///
    /// # Errors
    /// [`crate::DistillError::Data`] naming the file (the array, the line) and the fix; also for
    /// another extension, a folder, a `.txt` without a tokenizer and an `.npz` with one.
    pub fn load(path: &Path, spec: &DataSpec, tokenizer: Option<&TextTokenizer>) -> Result<Dataset> {
        if path.is_dir() {
            return Err(DistillError::data(
                path,
                "is a folder: set data.train and data.test to files (.npz, or .txt for text)",
            ));
        }
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match (ext.as_deref(), tokenizer) {
            (Some("npz"), None) => images_npz::load(path, spec),
            (Some("npz"), Some(_)) => Err(DistillError::data(
                path,
                "data.tokenizer is set, so the data is text: give .txt files (one sentence per line)",
            )),
            (Some("txt"), Some(tokenizer)) => text_file::load(path, tokenizer),
            (Some("txt"), None) => Err(DistillError::data(
                path,
                format!("text needs data.tokenizer: set it to the teacher's tokenizer.json ({PATHS_RULE})"),
            )),
            _ => Err(DistillError::data(
                path,
                "unknown kind of data file: use .npz (arrays x and y) for images or vectors, or .txt (one sentence per line, with data.tokenizer) for text",
            )),
        }
    }
}
