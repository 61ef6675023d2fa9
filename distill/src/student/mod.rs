//! The student: the kinds of student network, one file each, behind [`Student`], which the
//! trainer, the step and the exports use through the [`Network`] interface (`network.rs`).
//!
//! * [`network`]: the interface, [`Network`].
//! * [`layered`]: `family = "mlp" | "cnn"`, one block per layer of `estimator_wasm::schema::arch`.
//!
//! A network is a sequence of blocks, the unit of gradient checkpointing (`step.rs`): block 0
//! takes the model input (normalised images or vectors [B, ...input_shape]; token ids [B, S]
//! for text), the last block returns the output the objective compares with the teacher's
//! (logits [B, classes], or an embedding [B, E]).
use std::ops::Range;

use estimator_wasm::schema::Config;
use tch::{nn, Tensor};

use crate::error::Result;

pub mod layered;
pub mod network;

pub use layered::{activate, Block, Layered};
pub use network::Network;

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
