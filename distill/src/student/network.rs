//! The interface of a student network: what the training step, the evaluation and the exports
//! need from any kind of student (see `student/mod.rs` for the kinds).
use std::ops::Range;

use tch::Tensor;

use crate::inputs::data::ModelInput;

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

    /// The output (logits [B, classes], or an embedding [B, E]) for the model input `input`
    /// (the attention mask included): every block in order.
    fn forward(&self, input: &ModelInput, train: bool) -> Tensor {
        self.forward_blocks(&input.x, 0..self.block_count(), input.mask.as_ref(), train)
    }

    /// A random model input of `batch` samples on the CPU, of the shape and kind the network
    /// takes (for latency measurements): normal floats for images and vectors; token ids and a
    /// full attention mask for text.
    fn example_input(&self, batch: i64) -> ModelInput;

    /// Trainable parameter elements.
    fn params(&self) -> u64;

    /// The block that holds the variable `name` (as the VarStore names it, e.g. `fc1.weight`).
    fn block_of(&self, name: &str) -> Option<usize>;
}
