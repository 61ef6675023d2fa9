//! The training loop of one student: seeded batches, soft targets, per-epoch evaluation, and
//! checkpoints from which [`Trainer::restore`] continues bit for bit. Each step is the parameter
//! update (`update`: [`super::step::forward_backward`], loss scaling, the optimiser at its
//! schedule's rate, pruning masks), then `advance` (the step count and pruning events), then
//! `log_step` (the books of [`super::loop_state`], progress, metrics lines); the checkpoint
//! format is [`super::checkpoint`]'s. It reports through [`Progress`] and [`MetricsLog`], never
//! printing results itself. In a data-parallel job ([`crate::data_parallel`]) each rank trains on
//! its share of every global batch ([`Batches::shard`]), the Reducer averages the gradients, the
//! step's figures and the decision to stop are agreed by all-reduce, and every epoch ends with
//! rank 0's buffers sent out and a check that all ranks hold the same student.
use std::{ops::Range, path::PathBuf, time::Instant};

use estimator_wasm::schema::arch::checkpoint_segments;
use tch::{nn::VarStore, Tensor};

use super::step::{forward_backward, param_segments, restore_running_stats, save_running_stats, StepBatch, StepConfig};
use crate::data_parallel::Ddp;
use crate::host::error::{DistillError, Result};
use crate::host::phase_times::{during, Phase};
use crate::host::progress::Progress;
use crate::inputs::data::permutation;
use crate::prune::{PruneSchedule, Pruner};
use crate::student::Student;
use crate::train::amp::{GradScaler, MAX_CONSECUTIVE_SKIPS};
use crate::train::batches::Batches;
use crate::train::checkpoint::{Restored, Snapshot};
use crate::train::eval::{accuracy, student_pass};
use crate::train::fused_lm_loss::FusedLmLoss;
use crate::train::hidden_step::batch_of;
use crate::train::loop_state::{merge_figures, HeldOutFigures, LoopState, StepFigures};
use crate::train::metrics::MetricsLog;
use crate::train::objective::Agreement;
use crate::train::optim::Optimizer;
use crate::train::schedule::Schedule;
use crate::train::similarity::spearman_of_cosines;
pub use crate::train::train_io::{Checkpoints, RunEnd, SoftTargets, TrainInputs, TrainOutcome, SPEARMAN_PAIRS};

/// The training loop of one student over [`TrainInputs`].
pub struct Trainer<'a> {
    inputs: &'a TrainInputs<'a>,
    student: Student,
    vs: VarStore,
    opt: Optimizer,
    names: Vec<String>,
    params: Vec<Tensor>,
    scaler: Option<GradScaler>,
    pruner: Option<Pruner>,
    schedule: Schedule,
    /// `kd.fused_head`: the head and the loss fused.
    fused: Option<FusedLmLoss>,
    segments: Vec<Range<usize>>,
    param_segment: Vec<usize>,
    /// The epoch's optimiser steps (a last batch BatchNorm cannot train on is dropped).
    batches: Batches,
    state: LoopState,
    /// Data parallelism: the Reducer of `params` in `inputs.strategy`'s group.
    ddp: Option<Ddp<'a>>,
    /// `[[kd.hidden]]`: the pairs and their projections (variables of `vs`).
    hidden: Option<crate::train::objective::hidden_kd::HiddenKd>,
}

/// A trained student, taken out of its [`Trainer`] for export.
pub struct Trained {
    pub vs: VarStore,
    pub student: Student,
    /// The pruner that ran (its masks and kept units), when `[prune]` is set.
    pub pruner: Option<Pruner>,
}

impl<'a> Trainer<'a> {
    /// A trainer for `student` (variables in `vs`) over `inputs`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] for a pruning schedule that does not fit the run.
    pub fn new(inputs: &'a TrainInputs<'a>, vs: VarStore, mut student: Student) -> Result<Trainer<'a>> {
        let (settings, train) = (inputs.settings, inputs.settings.train());
        let world = inputs.strategy.world_size();
        let batches = Batches::sharded(inputs.train.len(), train.batch_size, world, &student)?;
        let steps_per_epoch = batches.steps_per_epoch;
        let hidden = crate::train::hidden_step::build(inputs, &vs)?;
        let named = crate::student::trainable(&vs);
        let opt = Optimizer::new(named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(), train);
        let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
        let params: Vec<Tensor> = opt.params().into_iter().map(|t| t.shallow_clone()).collect();
        let n_blocks = student.block_count();
        #[allow(clippy::single_range_in_vec_init)] // one segment spanning every block
        let segments =
            checkpoint_segments(n_blocks, settings.student().checkpointing).unwrap_or_else(|| vec![0..n_blocks]);
        let param_segment = param_segments(&student, &names, &segments, hidden.as_ref());
        let scaler =
            crate::torch::precision::loss_scaling(train.precision).then(|| GradScaler::new(inputs.settings.device()));
        let pruner = match settings.prune() {
            Some(p) => {
                let schedule = PruneSchedule::new(p, steps_per_epoch, train.epochs)?;
                let mut pruner = Pruner::new(p, schedule, &student, &named)?;
                pruner.maybe_prune(0, &mut student);
                Some(pruner)
            }
            None => None,
        };
        let ddp = inputs.strategy.reducer(&params, &buffers(&vs))?;
        let schedule = Schedule {
            lr: train.lr,
            min_lr: train.min_lr,
            warmup: train.warmup_steps,
            total: steps_per_epoch * train.epochs,
        };
        Ok(Trainer {
            inputs,
            fused: FusedLmLoss::of(settings.resolved_spec(), &student),
            student,
            vs,
            opt,
            names,
            params,
            scaler,
            pruner,
            schedule,
            segments,
            param_segment,
            batches,
            state: LoopState::default(),
            ddp,
            hidden,
        })
    }

    /// Trains until the last step, or until `checkpoints` says stop.
    ///
    /// # Errors
    /// [`DistillError::Diverged`] on a non-finite loss (with the step and value), or under fp16
    /// [`DistillError::Overflow`] after `MAX_CONSECUTIVE_SKIPS` skipped steps in a row; I/O errors of
    /// the metrics log or checkpoints; teacher errors in live mode.
    pub fn run(
        &mut self,
        progress: &Progress,
        metrics: &mut MetricsLog,
        name: &str,
        checkpoints: Option<&Checkpoints>,
    ) -> Result<RunEnd> {
        let settings = self.inputs.settings;
        let train = settings.train();
        let (n, epochs, total) = (self.inputs.train.len(), train.epochs, self.schedule.total);
        let steps_per_epoch = self.batches.steps_per_epoch;
        progress.start(name, epochs, steps_per_epoch, self.state.step());
        let pruning = self.pruner.as_ref().and_then(Pruner::rounding_warning);
        self.schedule.warmup_warning().into_iter().chain(pruning).for_each(|w| progress.warn(w));
        let mut order: Option<(u64, Vec<i64>)> = None;
        while self.state.step() < total {
            if self.state.step() + 1 == total {
                // the last step: an interrupt from now on lets it, the evaluation and the export
                // finish (stopping would checkpoint a finished run)
                crate::host::interrupt::enter(crate::host::interrupt::Phase::Finishing);
            }
            let (epoch, i) = (self.state.step() / steps_per_epoch, self.state.step() % steps_per_epoch);
            if order.as_ref().map(|(e, _)| *e) != Some(epoch) {
                let (seed, batch) = (train.seed, self.batches.size);
                let epoch_order = match settings.data().bucket_by_length {
                    true => self.inputs.train.epoch_order(seed, epoch, batch),
                    false => permutation(n, seed, epoch),
                };
                order = Some((epoch, epoch_order));
            }
            let (chunk, weight) = {
                let all = &order.as_ref().expect("set above").1;
                let global = self.batches.range(i);
                let local = self.inputs.strategy.shard(global.clone(), |g, rank| self.batches.shard(g, rank));
                let weight = (local.len() * self.inputs.strategy.world_size()) as f64 / global.len() as f64;
                (all[local].to_vec(), weight)
            };
            let (started, lr) = (Instant::now(), self.schedule.at(self.state.step()));
            let update = self.update(&chunk, weight, epoch, lr)?;
            self.advance();
            let seconds = started.elapsed().as_secs_f64();
            let figures = StepFigures { seconds, ..update };
            self.log_step(&figures, epoch, lr, progress, metrics)?;
            let step = self.state.step();
            let epoch_end = step % steps_per_epoch == 0;
            if epoch_end {
                during(Phase::Evaluation, || self.end_epoch(epoch, progress, metrics, name))?;
            }
            if let Some(c) = checkpoints {
                let every = train.save_every;
                let ctrl_c = c.stop.load(std::sync::atomic::Ordering::SeqCst);
                // Every rank of a job stops after the same step: Ctrl-C reaches them at different
                // times, so they agree on it at the steps that log or save (the same on all).
                let meet = step % train.log_every == 0 || epoch_end || (every > 0 && step % every == 0);
                let ctrl_c = self.inputs.strategy.agree_to_stop(ctrl_c, meet)?;
                let stop = ctrl_c || c.stop_after == Some(step);
                if epoch_end || stop || (every > 0 && step % every == 0) {
                    self.merge_figures()?;
                    if let Some(ddp) = &self.ddp {
                        ddp.sync_buffers()?;
                    }
                    metrics.sync()?;
                    if c.write {
                        during(Phase::Checkpoints, || self.save(&c.dir))?;
                    }
                }
                if stop && step < total {
                    progress.finish();
                    return Ok(RunEnd::Stopped { step });
                }
            }
        }
        progress.finish();
        let last = self.state.last_epoch().expect("epochs >= 1 is validated");
        Ok(RunEnd::Finished(TrainOutcome {
            steps: self.state.step(),
            losses: last.losses,
            test_accuracy: last.test_accuracy,
            agreement: last.agreement,
            spearman: last.spearman,
            perplexity: last.perplexity,
            samples_per_s: self.state.samples_per_s(),
            train_seconds: self.state.train_seconds(),
            skipped_steps: self.state.skipped_steps(),
            final_scale: self.loss_scale(),
            segments: self.segments.len(),
            dropped_per_epoch: self.batches.dropped as u64,
        }))
    }

    /// One forward and backward on the training batch that needs the most memory (see
    /// [`crate::inputs::data::widths::widest_batch`]), leaving the optimiser, the step and the metrics
    /// untouched: checks that the batch fits the device.
    pub fn probe(&self) -> Result<()> {
        let rows = crate::inputs::data::widths::widest_batch(
            self.inputs.train,
            self.batches.size,
            self.inputs.settings.resolved_spec(),
        );
        let (data, soft, teacher_hidden) = batch_of(self.inputs, self.hidden.as_ref(), &rows)?;
        let params: Vec<&Tensor> = self.params.iter().collect();
        let (labels, soft) = (data.labels.as_ref(), soft.as_ref());
        let batch =
            StepBatch { input: &data.input, labels, soft, step: 0, weight: 1.0, teacher_hidden: &teacher_hidden };
        // outside the Reducer: a probe's gradients are neither averaged nor kept
        let cfg = StepConfig { ddp: None, sync_batch_norm: None, ..self.step_config() };
        forward_backward(&cfg, &self.student, &params, &batch, self.scaler.as_ref(), &|| None).map(|_| ())
    }

    fn step_config(&self) -> StepConfig<'_> {
        let settings = self.inputs.settings;
        StepConfig {
            device: settings.device(),
            precision: settings.train().precision,
            objective: self.inputs.objective,
            // each rank of a job draws its own dropout masks (rank 0 the masks of one process)
            seed: self.inputs.strategy.rank_seed(settings.train().seed),
            segments: &self.segments,
            param_segment: &self.param_segment,
            recompute: self.segments.len() > 1,
            ddp: self.ddp.as_ref(),
            sync_batch_norm: self.inputs.strategy.sync_batch_norm(self.inputs.sync_batch_norm),
            loss_chunk: crate::train::chunked_loss::loss_chunk(settings.resolved_spec()),
            fused_head: self.fused.as_ref(),
            hidden: self.hidden.as_ref(),
        }
    }

    /// The parameter update of training rows `chunk` at learning rate `lr` (`epoch` 0-based,
    /// for errors; `weight` as [`StepBatch::weight`]): forward and backward, then under fp16
    /// unscaling (a non-finite step is skipped and BatchNorm's running statistics are put back),
    /// the optimiser step and the pruning masks. Returns the step's figures (of the global batch
    /// under data parallelism) but its time (0 here), which the caller measures.
    fn update(&mut self, chunk: &[i64], weight: f64, epoch: u64, lr: f64) -> Result<StepFigures> {
        let step = self.state.step();
        let (data, soft, teacher_hidden) = batch_of(self.inputs, self.hidden.as_ref(), chunk)?;
        let params: Vec<&Tensor> = self.params.iter().collect();
        let pruner = self.pruner.as_ref();
        let extra = || pruner.and_then(Pruner::l1_penalty);
        let (labels, soft) = (data.labels.as_ref(), soft.as_ref());
        let batch = StepBatch { input: &data.input, labels, soft, step, weight, teacher_hidden: &teacher_hidden };
        if let Some(ddp) = &self.ddp {
            ddp.before_forward()?;
        }
        let stats = self.scaler.as_ref().map(|_| save_running_stats(&self.student));
        let out = forward_backward(&self.step_config(), &self.student, &params, &batch, self.scaler.as_ref(), &extra)?;
        let preds = &out.predictions;
        let scored = self.inputs.objective.agreement().classifies();
        // a share of the batch's samples (for tokens, of its predicting positions)
        let correct = data.labels.as_ref().filter(|_| scored).map(|y| accuracy(preds, y) * chunk.len() as f64);
        let losses = out.loss.values();
        // Under data parallelism the loss parts are weighted as the gradient is, so that the
        // ranks' mean is the global batch's (`LoopState::merge_ranks`).
        let booked =
            if self.inputs.strategy.is_data_parallel() && weight != 1.0 { losses.mean(1.0 / weight) } else { losses };
        let figures = StepFigures { losses: booked, correct, samples: chunk.len() as f64, seconds: 0.0, applied: true };
        // A rank's own loss: a non-finite one on another rank makes the averaged gradients, so
        // every rank's next loss, non-finite too.
        let value = losses.loss;
        let mut grads = out.grads;
        // fp16: a non-finite loss or gradient skips the step and backs the scale off; only a
        // run of skips stops training. Other precisions have no scale to blame: stop at once.
        let applied = match self.scaler.as_mut() {
            Some(scaler) => scaler.unscale_and_update(&mut grads, value.is_finite())?,
            None if value.is_finite() => true,
            None => return Err(DistillError::Diverged { step: step + 1, epoch: epoch + 1, value }),
        };
        if applied {
            if let Some(p) = &self.pruner {
                p.mask_grads(&params, &mut grads);
            }
            self.opt.step(lr, &grads)?;
            if let Some(p) = self.pruner.as_mut() {
                p.apply_masks();
            }
        } else {
            // Skipped: BatchNorm's running statistics are put back too, so nothing changes.
            restore_running_stats(&self.student, &stats.unwrap_or_default());
        }
        let skipped = self.state.count_update(applied);
        if skipped >= MAX_CONSECUTIVE_SKIPS {
            let scale = self.loss_scale().unwrap_or(0.0);
            return Err(DistillError::Overflow { skipped, step: step + 1, epoch: epoch + 1, value, scale });
        }
        Ok(StepFigures { applied, ..figures })
    }

    /// Data parallelism: merges the ranks' figures of the steps since the last merge (every rank
    /// calls this after the same steps); nothing in one process.
    fn merge_figures(&mut self) -> Result<()> {
        match self.inputs.strategy.is_data_parallel() && self.state.has_unmerged() {
            true => merge_figures(self.inputs.strategy, &mut self.state),
            false => Ok(()),
        }
    }

    /// Moves the loop one step on: the step count, and a pruning event when the schedule has one.
    fn advance(&mut self) {
        self.state.advance();
        if let Some(p) = self.pruner.as_mut() {
            p.maybe_prune(self.state.step(), &mut self.student);
        }
    }

    /// Books a finished step: the running sums, the progress line, and every `log_every` steps
    /// (and at the last) a metrics line.
    fn log_step(
        &mut self,
        figures: &StepFigures,
        epoch: u64,
        lr: f64,
        progress: &Progress,
        metrics: &mut MetricsLog,
    ) -> Result<()> {
        match self.inputs.strategy.is_data_parallel() {
            true => self.state.record_unmerged(figures),
            false => self.state.record(figures),
        }
        progress.step(self.state.window_status());
        let step = self.state.step();
        if step % self.inputs.settings.train().log_every == 0 || step == self.schedule.total {
            self.merge_figures()?;
            metrics.write(&self.state.step_line(epoch, lr, self.loss_scale()))?;
            self.state.step_logged();
        }
        Ok(())
    }

    /// Evaluates on the test set at the end of epoch `epoch` (0-based) and logs it.
    fn end_epoch(&mut self, epoch: u64, progress: &Progress, metrics: &mut MetricsLog, name: &str) -> Result<()> {
        let inputs = self.inputs;
        self.merge_figures()?;
        if let Some(ddp) = &self.ddp {
            ddp.sync_buffers()?;
            inputs.strategy.check_identical(&ddp.tensors(), &format!("after epoch {}", epoch + 1))?;
        }
        let train = inputs.settings.train();
        let pass = student_pass(&self.student, inputs.test, inputs.objective, train.eval_batch_size);
        let preds = pass.predictions;
        let kind = inputs.objective.agreement();
        let held_out = HeldOutFigures {
            perplexity: pass.perplexity,
            test_accuracy: inputs.test.labels().filter(|_| kind.classifies()).map(|y| accuracy(&preds, y)),
            agreement: inputs.teacher_test_preds.map(|t| kind.between(&preds, t)),
            spearman: match (kind, inputs.teacher_test_preds) {
                (Agreement::Cosine, Some(t)) => spearman_of_cosines(&preds, t, SPEARMAN_PAIRS, train.seed),
                _ => None,
            },
        };
        let sparsity = self.pruner.as_ref().map(Pruner::measured_sparsity);
        let line = self.state.epoch_line(epoch, held_out, sparsity);
        metrics.write(&line)?;
        let figure = |label: &str, v: Option<f64>| v.map(|v| format!(" {label} {v:.4}")).unwrap_or_default();
        progress.epoch(format!(
            "{name} epoch {}/{}: {}{}{}{}{}{}{} {:.0} samples/s",
            epoch + 1,
            train.epochs,
            line.losses,
            figure("train acc", line.train_accuracy),
            figure("test acc", line.test_accuracy),
            figure(if kind.classifies() { "agreement" } else { "cosine" }, line.agreement),
            figure("spearman", line.spearman),
            figure("perplexity", line.perplexity),
            line.sparsity.map(|s| format!(" sparsity {s:.3}")).unwrap_or_default(),
            line.samples_per_s
        ));
        self.state.epoch_logged(line);
        Ok(())
    }

    /// Writes a checkpoint of the current step under `dir` (see [`crate::train::checkpoint`] for its format).
    pub fn save(&self, dir: &std::path::Path) -> Result<PathBuf> {
        let snapshot = Snapshot {
            vs: &self.vs,
            optim: self.opt.state(),
            optimizer_step: self.opt.step,
            prune: self.pruner.as_ref().map(Pruner::state).unwrap_or_default(),
            amp: self.scaler.as_ref().map(GradScaler::state),
            state: &self.state,
            config: self.inputs.settings.to_toml(),
        };
        snapshot.write(dir, self.inputs.settings.train().keep_checkpoints)
    }

    /// Continues from the checkpoint at `path` (written by [`Trainer::save`] for the same config);
    /// leaves the trainer untouched when it fails.
    ///
    /// # Errors
    /// [`DistillError::Usage`] when the checkpoint is unreadable or was written for another
    /// config.
    pub fn restore(&mut self, path: &std::path::Path) -> Result<()> {
        let saved = Restored::read(path, &self.inputs.settings.to_toml())?;
        saved.copy_model_into(&self.vs);
        self.opt.load_state(saved.optimizer_step, &saved.optim());
        if let Some(p) = self.pruner.as_mut() {
            p.load_state(saved.tensors(), &mut self.student);
        }
        if let (Some(s), Some((scale, tracker))) = (self.scaler.as_mut(), saved.amp()) {
            s.load_state(&scale, &tracker);
        }
        self.state = saved.state;
        Ok(())
    }

    /// Optimiser steps completed.
    pub fn step(&self) -> u64 {
        self.state.step()
    }

    /// Lines of metrics.jsonl that the current step accounts for.
    pub fn metrics_lines(&self) -> u64 {
        self.state.metrics_lines()
    }

    /// A resumed run found only `lines` of them whole: it continues the log from there.
    pub fn keep_metrics_lines(&mut self, lines: u64) {
        self.state.keep_metrics_lines(lines);
    }

    /// The epoch's optimiser steps (a last batch BatchNorm cannot train on is dropped).
    pub fn batches(&self) -> &Batches {
        &self.batches
    }

    /// The student's variables (parameters and buffers).
    pub fn vs(&self) -> &VarStore {
        &self.vs
    }

    /// The trained student, its variables and its pruner, for export.
    pub fn into_trained(self) -> Trained {
        Trained { vs: self.vs, student: self.student, pruner: self.pruner }
    }

    /// Names of the optimised parameters, sorted.
    pub fn param_names(&self) -> &[String] {
        &self.names
    }

    /// fp16: the current loss scale.
    pub fn loss_scale(&self) -> Option<f64> {
        self.scaler.as_ref().map(GradScaler::scale)
    }
}

/// The student's buffers (BatchNorm running statistics: variables without gradients), sorted by
/// name so that every rank lists them in the same order.
fn buffers(vs: &VarStore) -> Vec<Tensor> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().filter(|(_, t)| !t.requires_grad()).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named.into_iter().map(|(_, t)| t).collect()
}
