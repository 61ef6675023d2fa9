//! The training loop: seeded batches, teacher soft targets, the KD loss, backward, optimiser
//! step and schedule, logging and per-epoch evaluation. It reports through [`Progress`] and
//! [`MetricsLog`] and never prints results itself.
use std::time::Instant;

use estimator_wasm::spec::{BatchSize, Config};
use tch::{Device, Kind, Tensor};

use crate::data::{permutation, Dataset, Normalizer};
use crate::error::{DistillError, Result};
use crate::eval::{accuracy, student_predictions};
use crate::loss::kd_loss;
use crate::metrics::{EpochLine, MetricsLog, StepLine};
use crate::optim::Optimizer;
use crate::progress::Progress;
use crate::schedule::Schedule;
use crate::student::Student;
use crate::teacher::Teacher;

/// Where the soft targets of a training batch come from.
pub enum SoftTargets<'a> {
    /// alpha = 0: labels only.
    None,
    /// Teacher logits [N_train, C] precomputed once (exact: the teacher is frozen, in eval mode,
    /// and the data is not augmented).
    Cached(Tensor),
    /// The teacher runs on every batch.
    Live(&'a Teacher),
}

impl SoftTargets<'_> {
    fn get(&self, index: &Tensor, x: &Tensor) -> Result<Option<Tensor>> {
        Ok(match self {
            SoftTargets::None => None,
            SoftTargets::Cached(all) => Some(all.index_select(0, index)),
            SoftTargets::Live(teacher) => Some(teacher.logits(x)?),
        })
    }
}

/// Everything a run trains on.
pub struct TrainInputs<'a> {
    pub spec: &'a Config,
    pub train: &'a Dataset,
    pub test: &'a Dataset,
    pub norm: &'a Normalizer,
    pub targets: SoftTargets<'a>,
    /// Teacher top-1 on the test set [N_test], for agreement.
    pub teacher_test_preds: Option<&'a Tensor>,
    pub device: Device,
}

/// Final figures of a training run.
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    pub steps: u64,
    pub loss: f64,
    pub kd: f64,
    pub ce: f64,
    pub test_accuracy: f64,
    pub agreement: Option<f64>,
    /// Training throughput over the whole run (optimiser steps only, evaluation excluded).
    pub samples_per_s: f64,
    pub train_seconds: f64,
}

/// Running sums over a logging window or an epoch.
#[derive(Default, Clone, Copy)]
struct Window {
    loss: f64,
    kd: f64,
    ce: f64,
    correct: f64,
    samples: f64,
    batches: f64,
    seconds: f64,
}

impl Window {
    fn mean(&self, v: f64) -> f64 {
        v / self.batches.max(1.0)
    }
}

/// Micro-batch size of a spec whose `batch_size` is resolved.
pub fn batch_size(spec: &Config) -> usize {
    match spec.train.batch_size {
        BatchSize::Fixed(n) => n as usize,
        BatchSize::Auto => unreachable!("batch_size = \"auto\" is resolved before training"),
    }
}

/// Trains `student` (whose parameters the optimiser holds) for `spec.train.epochs` epochs.
///
/// # Errors
/// [`DistillError::Diverged`] on a non-finite loss (with the step and value); I/O errors of
/// the metrics log; teacher forward errors in live mode.
pub fn train(
    inputs: &TrainInputs,
    student: &Student,
    opt: &mut Optimizer,
    progress: &Progress,
    metrics: &mut MetricsLog,
    name: &str,
) -> Result<TrainOutcome> {
    let spec = inputs.spec;
    let (kd_spec, train_spec) = (&spec.kd, &spec.train);
    let batch = batch_size(spec);
    let n = inputs.train.len();
    let steps_per_epoch = n.div_ceil(batch) as u64;
    let schedule = Schedule {
        lr: train_spec.lr,
        min_lr: train_spec.min_lr,
        warmup: train_spec.warmup_steps,
        total: steps_per_epoch * train_spec.epochs,
    };
    progress.start(name, train_spec.epochs, steps_per_epoch);
    let mut step = 0u64;
    let mut total_samples = 0.0;
    let mut train_seconds = 0.0;
    let mut outcome = None;
    let start = Instant::now();
    for epoch in 0..train_spec.epochs {
        let order = permutation(n, train_spec.seed, epoch);
        let mut window = Window::default();
        let mut epoch_sums = Window::default();
        for chunk in order.chunks(batch) {
            let t0 = Instant::now();
            let index = Tensor::from_slice(chunk).to_device(inputs.device);
            let (x, y) = inputs.train.batch(&index);
            let x = inputs.norm.apply(&x);
            let soft = inputs.targets.get(&index, &x)?;
            // Dropout draws from libtorch's global generator: reseeding it per step makes every
            // step reproducible on its own (and so a resumed run identical to an unbroken one).
            tch::manual_seed(step_seed(train_spec.seed, step));
            let logits = student.forward(&x, true);
            let loss = kd_loss(&logits, soft.as_ref(), &y, kd_spec.temperature, kd_spec.alpha);
            let value = loss.total.double_value(&[]);
            if !value.is_finite() {
                return Err(DistillError::Diverged { step: step + 1, epoch: epoch + 1, value });
            }
            let grads = Tensor::f_run_backward(&[&loss.total], &opt.params(), false, false)?;
            let lr = schedule.at(step);
            opt.step(lr, &grads);
            step += 1;

            let correct =
                logits.argmax(-1, false).eq_tensor(&y).to_kind(Kind::Float).sum(Kind::Float).double_value(&[]);
            let seconds = t0.elapsed().as_secs_f64();
            let b = chunk.len() as f64;
            for w in [&mut window, &mut epoch_sums] {
                w.loss += value;
                w.kd += loss.kd.double_value(&[]);
                w.ce += loss.ce.double_value(&[]);
                w.correct += correct;
                w.samples += b;
                w.batches += 1.0;
                w.seconds += seconds;
            }
            total_samples += b;
            train_seconds += seconds;
            progress.step(format!(
                "loss {:.4} (kd {:.4} ce {:.4}) acc {:.3}",
                window.mean(window.loss),
                window.mean(window.kd),
                window.mean(window.ce),
                window.correct / window.samples
            ));
            if step % train_spec.log_every == 0 || step == schedule.total {
                metrics.write(&StepLine {
                    kind: "step",
                    step,
                    epoch: epoch + 1,
                    lr,
                    loss: window.mean(window.loss),
                    kd: window.mean(window.kd),
                    ce: window.mean(window.ce),
                    accuracy: window.correct / window.samples,
                    samples_per_s: window.samples / window.seconds.max(1e-9),
                })?;
                window = Window::default();
            }
        }
        let preds = student_predictions(student, inputs.test, inputs.norm, train_spec.eval_batch_size as usize);
        let test_accuracy = accuracy(&preds, &inputs.test.y);
        let agreement = inputs.teacher_test_preds.map(|t| accuracy(&preds, t));
        let line = EpochLine {
            kind: "epoch",
            epoch: epoch + 1,
            step,
            loss: epoch_sums.mean(epoch_sums.loss),
            kd: epoch_sums.mean(epoch_sums.kd),
            ce: epoch_sums.mean(epoch_sums.ce),
            train_accuracy: epoch_sums.correct / epoch_sums.samples,
            test_accuracy,
            agreement,
            samples_per_s: epoch_sums.samples / epoch_sums.seconds.max(1e-9),
            elapsed_s: start.elapsed().as_secs_f64(),
        };
        metrics.write(&line)?;
        progress.epoch(format!(
            "{name} epoch {}/{}: loss {:.4} (kd {:.4} ce {:.4}) train acc {:.4} test acc {:.4}{} {:.0} samples/s",
            epoch + 1,
            train_spec.epochs,
            line.loss,
            line.kd,
            line.ce,
            line.train_accuracy,
            test_accuracy,
            agreement.map(|a| format!(" agreement {a:.4}")).unwrap_or_default(),
            line.samples_per_s
        ));
        outcome = Some(TrainOutcome {
            steps: step,
            loss: line.loss,
            kd: line.kd,
            ce: line.ce,
            test_accuracy,
            agreement,
            samples_per_s: total_samples / train_seconds.max(1e-9),
            train_seconds,
        });
    }
    progress.finish();
    Ok(outcome.expect("epochs >= 1 is validated"))
}

/// The libtorch seed of optimiser step `step`: SplitMix64 of (seed, step), so nearby steps get
/// unrelated streams.
pub fn step_seed(seed: u64, step: u64) -> i64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(step).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 1) as i64
}
