//! The interface of a student network: what the training step, the evaluation and the exports
//! need from any kind of student (see `student/mod.rs` for the kinds).
use std::ops::Range;

use tch::Tensor;

/// A trainable student network as the training step sees it.
pub trait Network {
    /// Blocks in forward order.
    fn block_count(&self) -> usize;

    /// Runs blocks `blocks` on `h` (the input of the first of them) and returns the last one's
    /// output. `mask` is the attention mask [B, S] of text inputs (1 = token, 0 = padding),
    /// `None` for images and vectors; `train` selects dropout and batch statistics.
    fn forward_blocks(&self, h: &Tensor, blocks: Range<usize>, mask: Option<&Tensor>, train: bool) -> Tensor;

    /// The running statistics (BatchNorm mean and variance) of `blocks`, sharing storage with
    /// the model: gradient checkpointing restores them before recomputing a segment so that
    /// each training step updates them once.
    fn running_stats(&self, blocks: Range<usize>) -> Vec<Tensor>;

    /// Trainable parameter elements.
    fn params(&self) -> u64;

    /// The block that holds the variable `name` (as the VarStore names it, e.g. `fc1.weight`).
    fn block_of(&self, name: &str) -> Option<usize>;
}
