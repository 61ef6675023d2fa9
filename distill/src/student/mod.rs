//! The student: what the trainer, the step and the exports need from a network ([`Network`]),
//! and the kinds of student, one file each, behind [`Student`].
//!
//! * [`layered`]: `family = "mlp" | "cnn"`, one block per layer of `estimator_wasm::arch`.
//!
//! A network is a sequence of blocks, the unit of gradient checkpointing (`step.rs`): block 0
//! takes the model input (normalised images or vectors [B, ...input_shape]; token ids [B, S]
//! for text), the last block returns the output the objective compares with the teacher's
//! (logits [B, classes], or an embedding [B, E]).
use std::ops::Range;

use estimator_wasm::spec::Config;
use tch::{nn, Tensor};

use crate::error::Result;

pub mod layered;

pub use layered::{activate, Block, Layered};

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

/// The student of a run, of the kind its `student.family` names.
#[derive(Debug)]
pub enum Student {
    Layered(Layered),
}

impl Student {
    /// Builds the student that `spec` describes, its variables under `root`.
    ///
    /// # Errors
    /// [`crate::DistillError::Usage`] for a family or layer the trainer cannot build.
    pub fn new(root: &nn::Path, spec: &Config) -> Result<Student> {
        Ok(Student::Layered(Layered::new(root, spec)?))
    }

    /// The network interface of this student.
    pub fn net(&self) -> &dyn Network {
        match self {
            Student::Layered(s) => s,
        }
    }

    /// The layered student, for what only it supports (structured pruning and shrinking,
    /// BatchNorm batch checks); `None` for other kinds.
    pub fn layered(&self) -> Option<&Layered> {
        match self {
            Student::Layered(s) => Some(s),
        }
    }

    /// As [`Student::layered`], mutable (to set structured-pruning unit masks).
    pub fn layered_mut(&mut self) -> Option<&mut Layered> {
        match self {
            Student::Layered(s) => Some(s),
        }
    }

    /// The output (logits [B, classes]) for model inputs `x` [B, ...] without an attention mask.
    pub fn forward(&self, x: &Tensor, train: bool) -> Tensor {
        self.forward_blocks(x, 0..self.block_count(), None, train)
    }

    /// See [`Network::forward_blocks`].
    pub fn forward_blocks(&self, h: &Tensor, blocks: Range<usize>, mask: Option<&Tensor>, train: bool) -> Tensor {
        self.net().forward_blocks(h, blocks, mask, train)
    }

    /// See [`Network::block_count`].
    pub fn block_count(&self) -> usize {
        self.net().block_count()
    }

    /// See [`Network::running_stats`].
    pub fn running_stats(&self, blocks: Range<usize>) -> Vec<Tensor> {
        self.net().running_stats(blocks)
    }

    /// See [`Network::params`].
    pub fn params(&self) -> u64 {
        self.net().params()
    }

    /// See [`Network::block_of`].
    pub fn block_of(&self, name: &str) -> Option<usize> {
        self.net().block_of(name)
    }
}
