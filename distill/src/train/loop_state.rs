//! The training loop's books: its position (step), the running sums of the logging window and
//! of the epoch, the counts of skipped steps and logged lines, and the metrics lines made from
//! them. With the tensors, this is all a resumed run needs (a checkpoint's `state.json`).
use serde::{Deserialize, Serialize};

use crate::data_parallel::Strategy;
use crate::host::error::Result;
use crate::train::metrics::{EpochLine, StepLine};
use crate::train::objective::LossValues;

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
pub struct HeldOutFigures {
    pub test_accuracy: Option<f64>,
    pub agreement: Option<f64>,
    pub spearman: Option<f64>,
    /// A language model's test perplexity.
    pub perplexity: Option<f64>,
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

    /// Adds every sum of `other` (its batches and seconds too).
    fn absorb(&mut self, other: &Window) {
        self.sums += other.sums;
        self.correct += other.correct;
        self.samples += other.samples;
        self.unscored += other.unscored;
        self.batches += other.batches;
        self.seconds += other.seconds;
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
    /// A data-parallel rank's steps since the ranks last merged their figures
    /// ([`LoopState::merge_ranks`]): empty in a checkpoint, which is written after a merge.
    #[serde(skip)]
    unmerged: Window,
    /// Samples of this rank's skipped steps (fp16) since the last merge.
    #[serde(skip)]
    unmerged_skipped: f64,
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

    /// A data-parallel rank's step: kept apart until the ranks merge their figures (its loss
    /// parts already weighted by `world * local / global` samples, as its gradient is).
    pub fn record_unmerged(&mut self, f: &StepFigures) {
        if f.applied {
            self.unmerged.add(f);
        } else {
            // a skipped step's samples count towards the throughput, as in `record`
            self.unmerged_skipped += f.samples;
        }
        self.train_seconds += f.seconds;
    }

    /// True when steps await [`LoopState::merge_ranks`] (the same steps on every rank).
    pub fn has_unmerged(&self) -> bool {
        self.unmerged.batches > 0.0 || self.unmerged_skipped > 0.0
    }

    /// Merges the ranks' steps since the last merge into the books: `all_reduce` sums the packed
    /// figures over the `world` ranks in place; loss parts are then divided by `world` (each
    /// rank's were weighted to make their mean the global batch's), samples and correct
    /// predictions are the ranks' sums, batches and seconds this rank's.
    ///
    /// # Errors
    /// The error of `all_reduce`.
    pub fn merge_ranks<E>(
        &mut self,
        world: f64,
        all_reduce: impl FnOnce(&mut [f64]) -> Result<(), E>,
    ) -> Result<(), E> {
        let u = std::mem::take(&mut self.unmerged);
        let skipped = std::mem::take(&mut self.unmerged_skipped);
        // every rank runs the same pairs: the hidden term is there on all or on none
        let mut packed = [
            u.sums.loss,
            u.sums.kd,
            u.sums.ce,
            u.sums.hidden.unwrap_or(0.0),
            u.correct,
            u.samples,
            u.unscored,
            skipped,
        ];
        all_reduce(&mut packed)?;
        let [loss, kd, ce, hidden, correct, samples, unscored, skipped] = packed;
        let merged = Window {
            sums: LossValues {
                loss: loss / world,
                kd: kd / world,
                ce: ce / world,
                hidden: u.sums.hidden.map(|_| hidden / world),
            },
            correct,
            samples,
            unscored,
            batches: u.batches,
            seconds: u.seconds,
        };
        self.window.absorb(&merged);
        self.epoch.absorb(&merged);
        self.total_samples += merged.samples + skipped;
        Ok(())
    }

    /// The progress text of the current logging window.
    pub fn window_status(&self) -> String {
        let mut w = self.window;
        w.absorb(&self.unmerged);
        let (w, l) = (&w, w.losses());
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
    pub fn epoch_line(&self, epoch: u64, held_out: HeldOutFigures, sparsity: Option<f64>) -> EpochLine {
        EpochLine {
            kind: "epoch".into(),
            epoch: epoch + 1,
            step: self.step,
            losses: self.epoch.losses(),
            train_accuracy: self.epoch.accuracy(),
            test_accuracy: held_out.test_accuracy,
            agreement: held_out.agreement,
            spearman: held_out.spearman,
            perplexity: held_out.perplexity,
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

/// Merges the data-parallel ranks' step figures since the last merge into `state` ([`LoopState::merge_ranks`]:
/// one all-reduce of 7 numbers). Every rank calls it after the same steps: when a line is logged,
/// not every step, as each collective costs a round trip.
///
/// # Errors
/// [`crate::host::error::DistillError::Distributed`] when a peer is gone.
pub fn merge_figures(strategy: &Strategy, state: &mut LoopState) -> Result<()> {
    state.merge_ranks(strategy.world_size() as f64, |packed| strategy.merge(packed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(loss: f64, correct: f64, samples: f64) -> StepFigures {
        let losses = LossValues { loss, kd: 2.0 * loss, ce: 0.5 * loss, hidden: Some(0.25 * loss) };
        StepFigures { losses, correct: Some(correct), samples, seconds: 0.01, applied: true }
    }

    #[test]
    fn merged_ranks_book_the_global_batches_means() {
        // Two steps of a global batch of 10 over 2 ranks: 5 + 5 samples, then 4 + 6 (weights
        // 2 * 4 / 10 and 2 * 6 / 10 on the losses, as the gradients are weighted). Rank 0's
        // means are 1.0 and 2.0, rank 1's 3.0 and 4.0; the global ones (1 * 5 + 3 * 5) / 10 = 2.0
        // and (2 * 4 + 4 * 6) / 10 = 3.2, so the window's mean per step is 2.6.
        let mut zero = LoopState::default();
        zero.record_unmerged(&step(1.0, 4.0, 5.0));
        zero.record_unmerged(&step(2.0 * 0.8, 3.0, 4.0));
        assert!(zero.has_unmerged());
        let l = 3.0 + 4.0 * 1.2;
        let rank_one = [l, 2.0 * l, 0.5 * l, 0.25 * l, 5.0 + 6.0, 11.0, 0.0, 0.0];
        zero.merge_ranks(2.0, |packed| {
            packed.iter_mut().zip(rank_one).for_each(|(a, b)| *a += b);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(!zero.has_unmerged());
        let line = zero.step_line(0, 0.1, None);
        assert!((line.losses.loss - 2.6).abs() < 1e-12, "{:?}", line.losses);
        assert!((line.losses.kd - 5.2).abs() < 1e-12 && (line.losses.ce - 1.3).abs() < 1e-12);
        assert!((line.losses.hidden.unwrap() - 0.65).abs() < 1e-12, "{:?}", line.losses);
        // (4 + 3 + 5 + 6) correct of 20 samples
        assert_eq!(line.accuracy, Some(18.0 / 20.0));
        assert!((zero.samples_per_s() - 20.0 / 0.02).abs() < 1e-6);
        // a second merge adds only the steps after the first
        zero.record_unmerged(&step(1.0, 1.0, 5.0));
        zero.merge_ranks(2.0, |packed| {
            packed.iter_mut().zip([1.0, 2.0, 0.5, 0.25, 1.0, 5.0, 0.0, 0.0]).for_each(|(a, b)| *a += b);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!((zero.step_line(0, 0.1, None).losses.loss - (2.0 + 3.2 + 1.0) / 3.0).abs() < 1e-12);
        assert!((zero.samples_per_s() - 30.0 / 0.03).abs() < 1e-6);
    }
}
