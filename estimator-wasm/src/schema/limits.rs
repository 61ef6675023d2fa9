//! The bounds on every count and size of the cfg.toml, checked by [`crate::schema::spec::Config::validate`]
//! before any work proportional to one starts (the layer list, the estimate, the explorer's sweep).
//!
//! Work in the estimator grows with the length of the expanded layer list (about 2 entries per
//! transformer layer, up to 4 per conv or hidden block): [`MAX_LAYERS`] and [`MAX_BLOCKS`] keep it
//! under 8,200 entries, which `MemoryModel::new` compiles in milliseconds. Sizes (widths, dimensions,
//! vocabularies) cost no work, only bytes; [`MAX_SIZE`] keeps a single dimension far above any
//! published model, and a layer whose bytes still overflow 64 bits is an error naming it.
//!
//! | key | bound |
//! |---|---|
//! | `student.transformer.layers` | 1 to [`MAX_LAYERS`] (DeepNet trained 1,000 layers) |
//! | entries of `student.hidden`, `student.channels` | at most [`MAX_BLOCKS`] each |
//! | `data.input_shape` entries, `data.classes`, widths in `hidden` and `channels`, `kernel`, `vocab`, `d_model`, `mlp_width`, `max_positions`, `token_types` | at most [`MAX_SIZE`] (2^24; Llama 3's vocabulary is 128,256, PaLM's feed-forward 73,728) |
//! | `train.batch_size`, `train.eval_batch_size` | 1 to [`crate::schema::limits::MAX_BATCH`] (2^40) |
//! | `train.epochs` | 1 to [`MAX_EPOCHS`] |
//! | `estimate.data_parallel`, `tensor_parallel`, `pipeline_stages` | 1 to 2^20 (stages also at most one per layer) |
//! | `student.checkpointing` segments | any; more segments than layers give one layer each |
//! | `teacher.params`, `teacher.buffers` | 1 (0 for buffers) to 2^50 |
//! | `student.init_from_teacher` | one entry per student layer, each 0 to [`MAX_LAYERS`] - 1 |
//!
//! The same keys under `[teacher.arch]` have the same bounds. Counts no work is proportional to
//! (`warmup_steps`, `save_every`, `log_every`, `keep_checkpoints`, `prune.every_steps`) take any
//! 64-bit value; TOML itself stops at 2^63 - 1.
use crate::schema::errors::SpecError;

/// Most transformer layers (`student.transformer.layers`, `teacher.arch.transformer.layers`).
pub const MAX_LAYERS: u64 = 4096;
/// Most entries of `hidden` and of `channels` (each gives up to 4 layers).
pub const MAX_BLOCKS: usize = 1024;
/// Largest single size: a width, an input dimension, a vocabulary, classes, positions, a kernel.
pub const MAX_SIZE: u64 = 1 << 24;
/// Longest layer list [`crate::schema::arch::layers`] expands a valid spec into (8,197 entries for
/// [`MAX_LAYERS`] transformer layers, 8,194 for [`MAX_BLOCKS`] conv and hidden blocks); also
/// the most layers a caller's `TeacherModel` may list.
pub const MAX_LAYER_LIST: usize = 2 * MAX_LAYERS as usize + 8;
/// Largest micro-batch considered (2^40): beyond it every figure is absurd anyway.
pub const MAX_BATCH: u64 = 1 << 40;
/// Most epochs (`train.epochs`).
pub const MAX_EPOCHS: u64 = 1_000_000;

/// `Ok` when `lo <= v <= hi`, else an error on `key`: "is v; must be between lo and hi".
pub(crate) fn within(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), SpecError> {
    if (lo..=hi).contains(&v) {
        return Ok(());
    }
    Err(SpecError::Invalid { key: key.to_string(), message: format!("is {v}; must be between {lo} and {hi}") })
}

/// A list of at most `max` entries, each [`within`] `lo..=hi`; errors name `key`.
pub(crate) fn list(key: &str, values: &[u64], max: usize, lo: u64, hi: u64) -> Result<(), SpecError> {
    if values.len() > max {
        let message = format!("has {} entries; at most {max}", values.len());
        return Err(SpecError::Invalid { key: key.to_string(), message });
    }
    values.iter().try_for_each(|&v| within(key, v, lo, hi))
}
