//! The student: the kinds of student network, one file each, behind [`Student`], which the
//! trainer, the step and the exports use through the [`Network`] interface (`network.rs`).
//!
//! * [`network`]: the interface, [`Network`].
//! * [`layered`]: `family = "mlp" | "cnn"`, one block per layer of `estimator_wasm::schema::arch`.
//! * [`transformer`]: `family = "transformer"`, likewise, from its parts: [`embedding`],
//!   [`attention`], [`feed_forward`], [`norm`], [`linear`].
//! * [`teacher_init`]: a transformer student's weights copied from a BERT teacher (DistilBERT),
//!   or a Llama one ([`llama_init`]); [`head_fit`]: a factorised LM head fitted to the teacher's.
//!
//! A network is a sequence of blocks, the unit of gradient checkpointing (`train/step.rs`): block 0
//! takes the model input ([`ModelInput`]: normalised images or vectors [B, ...input_shape]; token
//! ids [B, S] and their attention mask for text), the last block returns the output the
//! objective compares with the teacher's (logits [B, classes], or an embedding [B, E]).
//!
//! A new kind of student is one more file implementing [`Network`], one more variant of
//! [`Student`] and one more arm in [`Student::new`] and [`Student::net`].
use std::ops::Range;
use std::path::Path;

use estimator_wasm::schema::{Config, Family};
use tch::{nn, nn::VarStore, Tensor};

use crate::host::error::Result;
use crate::inputs::data::ModelInput;

/// The line of a `student.init` file (`path`, named in `cfg_path`) that does not load: for a
/// variable it lacks, the names it holds (a PyTorch `state_dict`'s prefix, `model.fc1.weight`,
/// shows at once), else libtorch's reason.
pub fn init_error(cfg_path: &Path, path: &Path, e: &tch::TchError) -> crate::DistillError {
    let why = match e {
        tch::TchError::TensorNameNotFound(name, _) => {
            let mut held: Vec<String> = (Tensor::read_safetensors(path).or_else(|_| Tensor::load_multi(path)))
                .map(|named| named.into_iter().map(|(n, _)| format!("{n:?}")).collect())
                .unwrap_or_default();
            held.sort();
            let n = held.len();
            let more = if n > 8 { format!(", ... ({n} in all)") } else { String::new() };
            held.truncate(8);
            let held = if n == 0 { "none".to_string() } else { held.join(", ") + &more };
            format!("has no tensor {name:?} of this student (it holds {held}): give it one tensor per student variable under that name, e.g. a run's student.safetensors")
        }
        e => crate::host::error::first_line(&e.to_string()),
    };
    crate::DistillError::config(cfg_path, format!("student.init = {}: {why}", path.display()))
}

pub mod attention;
pub mod build;
pub mod embedding;
pub mod feed_forward;
pub mod head_fit;
pub mod init_plan;
pub mod layered;
pub mod linear;
pub mod llama_init;
pub mod network;
pub mod norm;
pub mod teacher_init;
pub mod transformer;

pub use layered::{activate, Block, Layered};
pub use network::Network;
pub use teacher_init::{init_from_teacher, TeacherInit};
pub use transformer::Transformer;

/// The trainable variables of `vs` (those that require a gradient), in name order.
///
/// tch's `VarStore::variables` is a `HashMap`, whose order changes from run to run: everything
/// that lists parameters (the optimiser's order, `report.json`'s per-layer pruning table) goes
/// through this, so it is the same on every run.
pub fn trainable(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// Where a fresh student's weights come from besides its seeded random initialisation, applied
/// in this order: the teacher's parameters (`student.init_from_teacher`), then a safetensors
/// file (`student.init`, resolved).
#[derive(Debug, Default, Clone, Copy)]
pub struct StudentInit<'a> {
    /// `crate::student::build::teacher_weights`; `None` without `student.init_from_teacher`.
    pub teacher: Option<&'a TeacherWeights>,
    pub file: Option<&'a Path>,
}

/// What a fresh student takes from the teacher (`student.init_from_teacher`).
#[derive(Debug)]
pub struct TeacherWeights {
    /// The teacher's parameters by their TorchScript names, fp32 on the CPU.
    pub params: Vec<(String, Tensor)>,
    /// The first [`head_fit::HEAD_FIT_WINDOWS`] training inputs, on which a factorised head
    /// (`student.transformer.head_rank`) is fitted ([`head_fit`]); `None` without one.
    pub sample: Option<ModelInput>,
}

/// The student of a run, of the kind its `student.family` names.
#[derive(Debug)]
pub enum Student {
    Layered(Layered),
    Transformer(Transformer),
}

impl Student {
    /// Builds the student of the kind `spec.student.family` names, its variables under `root`.
    ///
    /// # Errors
    /// [`crate::DistillError::Usage`] for a layer the trainer cannot build.
    pub fn new(root: &nn::Path, spec: &Config) -> Result<Student> {
        #[cfg(test)]
        crate::torch::test_rng::assert_held("building a student (random initialisation)");
        match spec.student.family {
            Family::Mlp | Family::Cnn => Ok(Student::Layered(Layered::new(root, spec)?)),
            Family::Transformer => Ok(Student::Transformer(Transformer::new(root, spec)?)),
        }
    }

    /// The network interface of this student.
    pub fn net(&self) -> &dyn Network {
        match self {
            Student::Layered(s) => s,
            Student::Transformer(s) => s,
        }
    }

    /// The layered student, for what only it supports (structured pruning and shrinking,
    /// BatchNorm batch checks); `None` for other kinds.
    pub fn layered(&self) -> Option<&Layered> {
        match self {
            Student::Layered(s) => Some(s),
            Student::Transformer(_) => None,
        }
    }

    /// As [`Student::layered`], mutable (to set structured-pruning unit masks).
    pub fn layered_mut(&mut self) -> Option<&mut Layered> {
        match self {
            Student::Layered(s) => Some(s),
            Student::Transformer(_) => None,
        }
    }

    /// See [`Network::forward`].
    pub fn forward(&self, input: &ModelInput, train: bool) -> Tensor {
        #[cfg(test)]
        if train {
            crate::torch::test_rng::assert_held("a training-mode forward (dropout)");
        }
        self.net().forward(input, train)
    }

    /// See [`Network::example_input`].
    pub fn example_input(&self, batch: i64) -> ModelInput {
        #[cfg(test)]
        crate::torch::test_rng::assert_held("an example input");
        self.net().example_input(batch)
    }

    /// See [`Network::forward_blocks`].
    pub fn forward_blocks(&self, h: &Tensor, blocks: Range<usize>, mask: Option<&Tensor>, train: bool) -> Tensor {
        #[cfg(test)]
        if train {
            crate::torch::test_rng::assert_held("a training-mode forward (dropout)");
        }
        self.net().forward_blocks(h, blocks, mask, train)
    }

    /// A language model's head ([`Transformer::lm_head`]); `None` for other students.
    pub fn lm_head(&self) -> Option<transformer::LmHead> {
        match self {
            Student::Transformer(t) => t.lm_head(),
            Student::Layered(_) => None,
        }
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

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    #[test]
    fn trainable_variables_come_in_name_order_without_frozen_ones() {
        let vs = VarStore::new(Device::Cpu);
        let root = vs.root();
        for i in (0..20).map(|i| (i * 7) % 20) {
            let _ = (&root / format!("layer{i:02}")).zeros("weight", &[1]);
        }
        let _ = (&root / "frozen").zeros_no_train("running_mean", &[1]);
        let got: Vec<String> = trainable(&vs)
            .into_iter()
            .map(|(n, t)| {
                assert_eq!(t.kind(), Kind::Float);
                n
            })
            .collect();
        let want: Vec<String> = (0..20).map(|i| format!("layer{i:02}.weight")).collect();
        assert_eq!(got, want);
    }
}
