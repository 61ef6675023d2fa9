//! The run as resolved ([`RunSettings`]), the form every stage after the memory plan reads. It
//! holds the cfg's sections with every choice made: the `[train]` section as [`TrainSettings`]
//! (the micro-batch a number, never `"auto"`), the estimator's target the device's, the files
//! resolved against the cfg's folder. The cfg as written stays behind in [`super::WrittenCfg`];
//! nothing here hands it out.
use std::path::Path;

use estimator_wasm::schema::{
    BatchSize, Config, DataSpec, EstimateSpec, KdSpec, OptimizerKind, Precision, PruneSpec, StudentSpec, Target,
    TeacherSpec, TrainSpec,
};
use tch::Device;

use super::{with_absolute_files, WrittenCfg};

/// `[train]` as resolved: the written section with the micro-batch a number of samples.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSettings {
    /// Passes over the train set.
    pub epochs: u64,
    /// The micro-batch, samples (`train.batch_size`, `"auto"` resolved by the memory plan).
    pub batch_size: usize,
    /// Samples per evaluation batch (`train.eval_batch_size`).
    pub eval_batch_size: usize,
    pub optimizer: OptimizerKind,
    /// Peak learning rate, after warm-up.
    pub lr: f64,
    /// Learning rate at the last optimiser step.
    pub min_lr: f64,
    /// Optimiser steps of linear warm-up.
    pub warmup_steps: u64,
    /// Decoupled (AdamW) or L2 (SGD) weight decay.
    pub weight_decay: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// SGD with Nesterov momentum.
    pub nesterov: bool,
    /// AdamW (beta1, beta2).
    pub betas: [f64; 2],
    /// AdamW's epsilon.
    pub eps: f64,
    /// The student's training precision.
    pub precision: Precision,
    /// A checkpoint every this many optimiser steps (0: only at epoch ends).
    pub save_every: u64,
    /// Checkpoints kept, newest first.
    pub keep_checkpoints: usize,
    /// Seed of weight init, data order and dropout.
    pub seed: u64,
    /// A `metrics.jsonl` line every this many optimiser steps.
    pub log_every: u64,
}

impl TrainSettings {
    /// The written `section` with the micro-batch `batch_size` (samples).
    pub fn resolved(section: &TrainSpec, batch_size: usize) -> TrainSettings {
        TrainSettings {
            epochs: section.epochs,
            batch_size,
            eval_batch_size: section.eval_batch_size as usize,
            optimizer: section.optimizer,
            lr: section.lr,
            min_lr: section.min_lr,
            warmup_steps: section.warmup_steps,
            weight_decay: section.weight_decay,
            momentum: section.momentum,
            nesterov: section.nesterov,
            betas: section.betas,
            eps: section.eps,
            precision: section.precision,
            save_every: section.save_every,
            keep_checkpoints: section.keep_checkpoints as usize,
            seed: section.seed,
            log_every: section.log_every,
        }
    }
}

/// The run as resolved: the micro-batch a number, the estimator's target and the device, the
/// files named by the cfg resolved. Built once, by [`WrittenCfg::settle`] (or
/// [`WrittenCfg::unplanned`]); it cannot hold `"auto"`, and it keeps no copy of the cfg as
/// written.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The cfg.toml as given on the command line.
    cfg_path: std::path::PathBuf,
    /// `[data].tokenizer`, resolved against the cfg's folder.
    tokenizer: Option<std::path::PathBuf>,
    /// `student.init`, resolved against the cfg's folder.
    init: Option<std::path::PathBuf>,
    /// The cfg with `train.batch_size` the micro-batch and `estimate.target` the device's.
    resolved: Config,
    train: TrainSettings,
    auto_batch: bool,
    device: Device,
}

impl RunSettings {
    /// `cfg` resolved with the micro-batch `batch_size` (`auto_batch`: it was `"auto"`), the
    /// estimator's `target` and the `device`.
    pub(super) fn new(cfg: WrittenCfg, batch_size: usize, auto_batch: bool, target: Target, device: Device) -> Self {
        let WrittenCfg { path, spec, data, init } = cfg;
        let mut resolved = spec;
        resolved.train.batch_size = BatchSize::Fixed(batch_size as u64);
        resolved.estimate.target = target;
        let train = TrainSettings::resolved(&resolved.train, batch_size);
        RunSettings { cfg_path: path, tokenizer: data.tokenizer, init, resolved, train, auto_batch, device }
    }

    /// The same run on labels alone (`kd.alpha = 0`), for the `--baseline` student.
    pub fn labels_only(&self) -> RunSettings {
        let mut labels_only = self.clone();
        labels_only.resolved.kd.alpha = 0.0;
        // nor the teacher's hidden states
        labels_only.resolved.kd.hidden.clear();
        labels_only
    }

    /// `[train]`, resolved: read the micro-batch here.
    pub fn train(&self) -> &TrainSettings {
        &self.train
    }

    /// `[data]`: the input's shape and classes, normalisation, text handling.
    pub fn data(&self) -> &DataSpec {
        &self.resolved.data
    }

    /// `[teacher]`: its precision, output selector and caching.
    pub fn teacher(&self) -> &TeacherSpec {
        &self.resolved.teacher
    }

    /// `[student]`: the student network.
    pub fn student(&self) -> &StudentSpec {
        &self.resolved.student
    }

    /// `[kd]`: the distillation objective's terms (the objective itself is built once, by the run,
    /// from these).
    pub fn kd(&self) -> &KdSpec {
        &self.resolved.kd
    }

    /// `[prune]`, when set.
    pub fn prune(&self) -> Option<&PruneSpec> {
        self.resolved.prune.as_ref()
    }

    /// `[estimate]`, with the target the device's.
    pub fn estimate(&self) -> &EstimateSpec {
        &self.resolved.estimate
    }

    /// The whole cfg as resolved (`train.batch_size` the micro-batch, `estimate.target` the
    /// device's), for code that reads the student's shape from a whole cfg: the student's
    /// network and its starting weights, its exports, the hidden-state pairs, the teacher-output
    /// cache's key. The train section is read from [`Self::train`].
    pub fn resolved_spec(&self) -> &Config {
        &self.resolved
    }

    /// [`Self::resolved_spec`] as cfg.toml text, for the copies of it a run writes (`run.json`,
    /// checkpoints) and compares on `--resume`.
    pub fn to_toml(&self) -> String {
        self.resolved.to_toml_string()
    }

    /// [`Self::to_toml`] with the files it names absolute ([`with_absolute_files`]): the run
    /// folder's `config.toml`, which `distill --student` takes from any folder.
    pub fn portable_toml(&self) -> String {
        with_absolute_files(&self.resolved, self.cfg_path()).to_toml_string()
    }

    /// The cfg.toml as given on the command line.
    pub fn cfg_path(&self) -> &Path {
        &self.cfg_path
    }

    /// `student.init`, resolved against the cfg's folder.
    pub fn init(&self) -> Option<&Path> {
        self.init.as_deref()
    }

    /// `[data].tokenizer`, resolved against the cfg's folder.
    pub fn tokenizer(&self) -> Option<&Path> {
        self.tokenizer.as_deref()
    }

    /// Whether the micro-batch was `"auto"` in the cfg (chosen by the memory plan).
    pub fn auto_batch(&self) -> bool {
        self.auto_batch
    }

    /// The device the run trains on (`--device`, parsed).
    pub fn device(&self) -> Device {
        self.device
    }
}
