//! The training loop's books: its position (step), the running sums of the logging window and
//! of the epoch, the counts of skipped steps and logged lines, and the metrics lines made from
//! them. With the tensors, this is all a resumed run needs (a checkpoint's `state.json`).
use serde::{Deserialize, Serialize};

use crate::metrics::{EpochLine, StepLine};
use crate::objective::LossValues;

/// What one optimiser step produced, for the books.
#[derive(Debug, Clone, Copy)]
pub struct StepFigures {
    /// The batch's loss parts (non-finite when an fp16 step was skipped).
    pub losses: LossValues,
    /// Correct top-1 predictions of the student in the batch (`None` when nothing scores them:
    /// unlabelled data, embeddings), and the batch's samples.
    pub correct: Option<f64>,
    pub samples: f64,
    /// Wall time of the step, seconds.
    pub seconds: f64,
    /// False for an fp16 step skipped for a non-finite loss or gradients.
    pub applied: bool,
}

/// The held-out figures of an epoch end (see [`EpochLine`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HeldOut {
    pub test_accuracy: Option<f64>,
    pub agreement: Option<f64>,
    pub spearman: Option<f64>,
}

/// Running sums over a logging window or an epoch.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
struct Window {
    #[serde(flatten)]
    sums: LossValues,
    correct: f64,
    samples: f64,
    /// Samples of `samples` without a score (unlabelled data, embeddings).
    #[serde(default)]
    unscored: f64,
    batches: f64,
    seconds: f64,
}

impl Window {
    fn add(&mut self, f: &StepFigures) {
        self.sums += f.losses;
        match f.correct {
            Some(c) => self.correct += c,
            None => self.unscored += f.samples,
        }
        self.samples += f.samples;
        self.batches += 1.0;
        self.seconds += f.seconds;
    }

    /// Mean loss parts per step of the window.
    fn losses(&self) -> LossValues {
        self.sums.mean(self.batches.max(1.0))
    }

    /// Top-1 accuracy of the scored samples; `None` when none was scored.
    fn accuracy(&self) -> Option<f64> {
        let scored = self.samples - self.unscored;
        (scored > 0.0 || self.samples == 0.0).then(|| self.correct / scored)
    }

    fn samples_per_s(&self) -> f64 {
        self.samples / self.seconds.max(1e-9)
    }
}

/// The loop's position and running sums, changed only through its methods.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct LoopState {
    /// Optimiser steps (= batches) completed.
    step: u64,
    window: Window,
    epoch: Window,
    total_samples: f64,
    train_seconds: f64,
    /// Lines in metrics.jsonl at this point (a resumed run truncates to it).
    metrics_lines: u64,
    /// fp16: optimiser steps skipped for a non-finite loss or gradients (the run's one count).
    skipped_steps: u64,
    /// fp16: steps skipped in a row up to now (the run stops at `amp::MAX_CONSECUTIVE_SKIPS`).
    #[serde(default)]
    consecutive_skips: u64,
    last_epoch: Option<EpochLine>,
}

impl LoopState {
    /// Optimiser steps (= batches) completed.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// One more optimiser step completed (applied or skipped).
    pub fn advance(&mut self) {
        self.step += 1;
    }

    /// Counts the update of the current step as `applied` or skipped (fp16, non-finite loss or
    /// gradients); returns the steps skipped in a row up to now (0 after an applied one).
    pub fn count_update(&mut self, applied: bool) -> u64 {
        if applied {
            self.consecutive_skips = 0;
        } else {
            self.skipped_steps += 1;
            self.consecutive_skips += 1;
        }
        self.consecutive_skips
    }

    /// fp16: optimiser steps skipped so far.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// Lines in metrics.jsonl at this point.
    pub fn metrics_lines(&self) -> u64 {
        self.metrics_lines
    }

    /// A resumed run found only `lines` of metrics.jsonl whole: it continues the log from there.
    pub fn keep_metrics_lines(&mut self, lines: u64) {
        self.metrics_lines = lines;
    }

    /// Adds a finished step to the books. A skipped step's (possibly inf/NaN) loss stays out of
    /// the logged means; its time and samples count towards the throughput.
    pub fn record(&mut self, f: &StepFigures) {
        if f.applied {
            self.window.add(f);
            self.epoch.add(f);
        }
        self.total_samples += f.samples;
        self.train_seconds += f.seconds;
    }

    /// The progress text of the current logging window.
    pub fn window_status(&self) -> String {
        let (w, l) = (&self.window, self.window.losses());
        match w.accuracy() {
            Some(a) => format!("{l} acc {a:.3}"),
            None => l.to_string(),
        }
    }

    /// The metrics line of the logging window ending now (`epoch` 0-based, `lr` of the step).
    pub fn step_line(&self, epoch: u64, lr: f64, loss_scale: Option<f64>) -> StepLine {
        StepLine {
            kind: "step",
            step: self.step,
            epoch: epoch + 1,
            lr,
            losses: self.window.losses(),
            accuracy: self.window.accuracy(),
            samples_per_s: self.window.samples_per_s(),
            loss_scale,
        }
    }

    /// The step line was written: a new window starts.
    pub fn step_logged(&mut self) {
        self.metrics_lines += 1;
        self.window = Window::default();
    }

    /// The metrics line of the epoch ending now (`epoch` 0-based) with its held-out figures.
    pub fn epoch_line(&self, epoch: u64, held_out: HeldOut, sparsity: Option<f64>) -> EpochLine {
        EpochLine {
            kind: "epoch".into(),
            epoch: epoch + 1,
            step: self.step,
            losses: self.epoch.losses(),
            train_accuracy: self.epoch.accuracy(),
            test_accuracy: held_out.test_accuracy,
            agreement: held_out.agreement,
            spearman: held_out.spearman,
            sparsity,
            samples_per_s: self.epoch.samples_per_s(),
            elapsed_s: self.train_seconds,
        }
    }

    /// The epoch line was written: it is the latest, and a new epoch starts.
    pub fn epoch_logged(&mut self, line: EpochLine) {
        self.metrics_lines += 1;
        self.last_epoch = Some(line);
        self.epoch = Window::default();
    }

    /// The latest epoch line (`None` before the first epoch ends).
    pub fn last_epoch(&self) -> Option<&EpochLine> {
        self.last_epoch.as_ref()
    }

    /// Training throughput over the run (optimiser steps only), samples/s.
    pub fn samples_per_s(&self) -> f64 {
        self.total_samples / self.train_seconds.max(1e-9)
    }

    /// Training time so far (evaluations excluded), seconds.
    pub fn train_seconds(&self) -> f64 {
        self.train_seconds
    }
}
