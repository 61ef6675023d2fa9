//! What a training run reads ([`TrainInputs`]: the resolved run, the data, the soft targets, the
//! job's process group) and how it ends ([`TrainOutcome`], [`RunEnd`], [`Checkpoints`]); the loop
//! itself is [`crate::train::trainer`].
use std::path::PathBuf;

use tch::Tensor;

use crate::config::RunSettings;
use crate::data_parallel::Strategy;
use crate::host::error::Result;
use crate::inputs::data::{Batch, Dataset};
use crate::inputs::teacher::Teacher;
use crate::train::objective::{LossValues, Objective};

/// Where the soft targets (the teacher's outputs: whatever the objective compares, logits or
/// embeddings) of a training batch come from.
pub enum SoftTargets<'a> {
    /// alpha = 0: labels only.
    None,
    /// Teacher outputs [N_train, ...] precomputed once (the teacher is frozen, in eval mode, and
    /// the data is not augmented, so these are the soft targets every epoch would see).
    Cached(Tensor),
    /// The teacher runs on every batch.
    Live(&'a Teacher),
}

impl SoftTargets<'_> {
    /// Soft targets of training rows `index` of `data`, whose batch is `batch`.
    pub(crate) fn get(&self, index: &Tensor, batch: &Batch, data: &Dataset) -> Result<Option<Tensor>> {
        Ok(match self {
            SoftTargets::None => None,
            SoftTargets::Cached(all) => Some(all.index_select(0, index)),
            SoftTargets::Live(teacher) => Some(teacher.finite_output(batch, data)?),
        })
    }
}

/// Random held-out sentence pairs whose cosines the Spearman figure compares (the text
/// benchmark asks for at least 5,000).
pub const SPEARMAN_PAIRS: usize = 5000;

/// Everything a run trains on.
pub struct TrainInputs<'a> {
    /// The resolved run: cfg, micro-batch, device.
    pub settings: &'a RunSettings,
    /// The loss of a batch, built once from `settings`' `[kd]`
    /// ([`crate::train::objective::from_spec`]); everything that trains, evaluates or reports this
    /// student takes it from here.
    pub objective: &'a dyn Objective,
    pub train: &'a Dataset,
    pub test: &'a Dataset,
    pub soft_targets: SoftTargets<'a>,
    /// The teacher's predictions on the test set (top-1 classes [N_test], or embeddings
    /// [N_test, E]), for agreement.
    pub teacher_test_preds: Option<&'a Tensor>,
    /// The teacher's parameters a fresh student starts from (`student.init_from_teacher`).
    pub teacher_weights: Option<&'a crate::student::TeacherWeights>,
    /// Alone, or one rank of a data-parallel job (its process group).
    pub strategy: &'a Strategy,
    /// Normalise BatchNorm over the job's global batch (`--sync-batch-norm`).
    pub sync_batch_norm: bool,
}

impl TrainInputs<'_> {
    /// Where a fresh student's weights come from: the teacher's, then `student.init`.
    pub fn init(&self) -> crate::student::StudentInit<'_> {
        crate::student::StudentInit { teacher: self.teacher_weights, file: self.settings.init() }
    }
}

/// Final figures of a training run.
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    pub steps: u64,
    /// The last epoch's mean loss parts.
    pub losses: LossValues,
    /// Top-1 test accuracy (`None` for unlabelled data or embeddings).
    pub test_accuracy: Option<f64>,
    /// Agreement with the teacher (top-1, or mean cosine for embeddings).
    pub agreement: Option<f64>,
    /// Embeddings: Spearman's rho of the student's and the teacher's test cosines.
    pub spearman: Option<f64>,
    /// A language model's test perplexity.
    pub perplexity: Option<f64>,
    /// Training throughput over the run (optimiser steps only, evaluation excluded).
    pub samples_per_s: f64,
    pub train_seconds: f64,
    /// fp16 only: optimiser steps skipped for inf/NaN gradients, and the final loss scale.
    pub skipped_steps: u64,
    pub final_scale: Option<f64>,
    pub segments: usize,
    /// Training samples left out of every epoch (see [`Batches`]).
    pub dropped_per_epoch: u64,
}

/// How a call to [`Trainer::run`] ended.
pub enum RunEnd {
    Finished(TrainOutcome),
    /// Stopped early (Ctrl-C or a step limit) after writing a checkpoint at this step.
    Stopped {
        step: u64,
    },
}

/// When the loop writes checkpoints and when it stops early.
pub struct Checkpoints {
    /// Folder of this run's checkpoints.
    pub dir: PathBuf,
    /// Checked after every step: true stops the loop after a checkpoint (Ctrl-C).
    pub stop: &'static std::sync::atomic::AtomicBool,
    /// Stop after this many completed steps (with a checkpoint).
    pub stop_after: Option<u64>,
    /// Write the checkpoints (false on a data-parallel job's ranks above 0: rank 0's serve all,
    /// the ranks holding the same student).
    pub write: bool,
}
