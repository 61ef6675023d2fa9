//! The training loop: seeded batches, soft targets, [`step::forward_backward`], loss scaling,
//! the optimiser and its schedule, pruning events, logging, per-epoch evaluation, and
//! checkpoints from which [`Trainer::restore`] continues bit for bit. It reports through
//! [`Progress`] and [`MetricsLog`] and never prints results itself.
use std::ops::Range;
use std::path::PathBuf;
use std::time::Instant;

use estimator_wasm::schema::arch::checkpoint_segments;
use estimator_wasm::schema::{BatchSize, Config, Precision};
use serde::{Deserialize, Serialize};
use tch::{nn::VarStore, Device, Kind, Tensor};

use crate::amp::{GradScaler, MAX_CONSECUTIVE_SKIPS};
use crate::batches::Batches;
use crate::checkpoint;
use crate::data::{permutation, Dataset, Normalizer};
use crate::error::{DistillError, Result};
use crate::eval::{accuracy, student_predictions};
use crate::metrics::{EpochLine, MetricsLog, StepLine};
use crate::optim::Optimizer;
use crate::progress::Progress;
use crate::prune::{PruneSchedule, Pruner};
use crate::schedule::Schedule;
use crate::step::{forward_backward, param_segments, restore_running_stats, save_running_stats, Batch, StepConfig};
use crate::student::Student;
use crate::teacher::Teacher;

/// Where the soft targets of a training batch come from.
pub enum SoftTargets<'a> {
    /// alpha = 0: labels only.
    None,
    /// Teacher logits [N_train, C] precomputed once (the teacher is frozen, in eval mode, and the
    /// data is not augmented, so these are the soft targets every epoch would see).
    Cached(Tensor),
    /// The teacher runs on every batch.
    Live(&'a Teacher),
}

impl SoftTargets<'_> {
    /// Soft targets of training rows `index` (normalised inputs `x`) of `data`.
    fn get(&self, index: &Tensor, x: &Tensor, data: &Dataset) -> Result<Option<Tensor>> {
        Ok(match self {
            SoftTargets::None => None,
            SoftTargets::Cached(all) => Some(all.index_select(0, index)),
            SoftTargets::Live(teacher) => {
                Some(crate::preflight::finite_teacher_logits(teacher, x, &data.file_rows(index), &data.path)?)
            }
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

/// Running sums over a logging window or an epoch.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
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

/// The loop's position and running sums: with the tensors, all a resumed run needs.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct State {
    /// Optimiser steps (= batches) completed.
    pub step: u64,
    window: Window,
    epoch: Window,
    total_samples: f64,
    train_seconds: f64,
    /// Lines in metrics.jsonl at this point (a resumed run truncates to it).
    pub metrics_lines: u64,
    skipped_steps: u64,
    /// fp16: steps skipped in a row up to now (the run stops at `MAX_CONSECUTIVE_SKIPS`).
    #[serde(default)]
    consecutive_skips: u64,
    last_epoch: Option<EpochLine>,
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
}

pub struct Trainer<'a> {
    inputs: &'a TrainInputs<'a>,
    pub student: Student,
    pub vs: VarStore,
    opt: Optimizer,
    names: Vec<String>,
    params: Vec<Tensor>,
    scaler: Option<GradScaler>,
    pub pruner: Option<Pruner>,
    schedule: Schedule,
    segments: Vec<Range<usize>>,
    param_segment: Vec<usize>,
    /// The epoch's optimiser steps (a last batch BatchNorm cannot train on is dropped).
    pub batches: Batches,
    pub state: State,
}

/// Micro-batch size of a spec whose `batch_size` is resolved.
pub fn batch_size(spec: &Config) -> usize {
    match spec.train.batch_size {
        BatchSize::Fixed(n) => n as usize,
        BatchSize::Auto => unreachable!("batch_size = \"auto\" is resolved before training"),
    }
}

impl<'a> Trainer<'a> {
    /// A trainer for `student` (variables in `vs`) over `inputs`.
    ///
    /// # Errors
    /// [`DistillError::Usage`] for a pruning schedule that does not fit the run.
    pub fn new(inputs: &'a TrainInputs<'a>, vs: VarStore, mut student: Student) -> Result<Trainer<'a>> {
        let spec = inputs.spec;
        let batches = Batches::new(inputs.train.len(), batch_size(spec), &student.blocks)?;
        let steps_per_epoch = batches.steps_per_epoch;
        let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let opt = Optimizer::new(named.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect(), &spec.train);
        let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
        let params: Vec<Tensor> = opt.params().into_iter().map(|t| t.shallow_clone()).collect();
        let n_blocks = student.blocks.len();
        #[allow(clippy::single_range_in_vec_init)] // one segment spanning every block
        let segments = checkpoint_segments(n_blocks, spec.student.checkpointing).unwrap_or_else(|| vec![0..n_blocks]);
        let param_segment = param_segments(&student, &names, &segments);
        let scaler = (spec.train.precision == Precision::Fp16).then(|| GradScaler::new(inputs.device));
        let pruner = match &spec.prune {
            Some(p) => {
                let schedule = PruneSchedule::new(p, steps_per_epoch, spec.train.epochs)?;
                let mut pruner = Pruner::new(p, schedule, &student, &named)?;
                pruner.maybe_prune(0, &mut student);
                Some(pruner)
            }
            None => None,
        };
        let schedule = Schedule {
            lr: spec.train.lr,
            min_lr: spec.train.min_lr,
            warmup: spec.train.warmup_steps,
            total: steps_per_epoch * spec.train.epochs,
        };
        Ok(Trainer {
            inputs,
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
            state: State::default(),
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
        let spec = self.inputs.spec;
        let (n, epochs, total) = (self.inputs.train.len(), spec.train.epochs, self.schedule.total);
        let steps_per_epoch = self.batches.steps_per_epoch;
        progress.start(name, epochs, steps_per_epoch, self.state.step);
        let mut order: Option<(u64, Vec<i64>)> = None;
        while self.state.step < total {
            let (epoch, i) = (self.state.step / steps_per_epoch, self.state.step % steps_per_epoch);
            if order.as_ref().map(|(e, _)| *e) != Some(epoch) {
                order = Some((epoch, permutation(n, spec.train.seed, epoch)));
            }
            let chunk = {
                let all = &order.as_ref().expect("set above").1;
                all[self.batches.range(i)].to_vec()
            };
            self.train_step(&chunk, epoch, progress, metrics)?;
            let step = self.state.step;
            let epoch_end = step % steps_per_epoch == 0;
            if epoch_end {
                self.end_epoch(epoch, progress, metrics, name)?;
            }
            if let Some(c) = checkpoints {
                let stop = c.stop.load(std::sync::atomic::Ordering::SeqCst) || c.stop_after == Some(step);
                let every = spec.train.save_every;
                if epoch_end || stop || (every > 0 && step % every == 0) {
                    metrics.sync()?;
                    self.save(&c.dir)?;
                }
                if stop && step < total {
                    progress.finish();
                    return Ok(RunEnd::Stopped { step });
                }
            }
        }
        progress.finish();
        let last = self.state.last_epoch.clone().expect("epochs >= 1 is validated");
        Ok(RunEnd::Finished(TrainOutcome {
            steps: self.state.step,
            loss: last.loss,
            kd: last.kd,
            ce: last.ce,
            test_accuracy: last.test_accuracy,
            agreement: last.agreement,
            samples_per_s: self.state.total_samples / self.state.train_seconds.max(1e-9),
            train_seconds: self.state.train_seconds,
            skipped_steps: self.state.skipped_steps,
            final_scale: self.scaler.as_ref().map(GradScaler::scale),
            segments: self.segments.len(),
            dropped_per_epoch: self.batches.dropped as u64,
        }))
    }

    /// One forward and backward on the first `batch` training samples, leaving the optimiser,
    /// the step and the metrics untouched (checks that the batch fits the device).
    pub fn probe(&self) -> Result<()> {
        let n = self.batches.size as i64;
        let (x, y, soft) = self.batch_of(&Tensor::arange(n, (Kind::Int64, self.inputs.device)))?;
        let params: Vec<&Tensor> = self.params.iter().collect();
        let batch = Batch { x: &x, y: &y, soft: soft.as_ref(), step: 0 };
        forward_backward(&self.step_config(), &self.student, &params, &batch, self.scaler.as_ref(), &|| None)
            .map(|_| ())
    }

    /// Normalised inputs, labels and soft targets of the training rows `index`.
    fn batch_of(&self, index: &Tensor) -> Result<(Tensor, Tensor, Option<Tensor>)> {
        let (x, y) = self.inputs.train.batch(index);
        let x = self.inputs.norm.apply(&x);
        let soft = self.inputs.targets.get(index, &x, self.inputs.train)?;
        Ok((x, y, soft))
    }

    fn step_config(&self) -> StepConfig<'_> {
        let spec = self.inputs.spec;
        StepConfig {
            device: self.inputs.device,
            precision: spec.train.precision,
            temperature: spec.kd.temperature,
            alpha: spec.kd.alpha,
            seed: spec.train.seed,
            segments: &self.segments,
            param_segment: &self.param_segment,
            recompute: self.segments.len() > 1,
        }
    }

    fn train_step(&mut self, chunk: &[i64], epoch: u64, progress: &Progress, metrics: &mut MetricsLog) -> Result<()> {
        let t0 = Instant::now();
        let step = self.state.step;
        let inputs = self.inputs;
        let (x, y, soft) = self.batch_of(&Tensor::from_slice(chunk).to_device(inputs.device))?;
        let params: Vec<&Tensor> = self.params.iter().collect();
        let pruner = self.pruner.as_ref();
        let extra = || pruner.and_then(Pruner::l1_penalty);
        let batch = Batch { x: &x, y: &y, soft: soft.as_ref(), step };
        let stats = self.scaler.as_ref().map(|_| save_running_stats(&self.student));
        let out = forward_backward(&self.step_config(), &self.student, &params, &batch, self.scaler.as_ref(), &extra)?;
        let value = out.loss.total.double_value(&[]);
        let mut grads = out.grads;
        // fp16: a non-finite loss or gradient skips the step and backs the scale off; only a
        // run of skips stops training. Other precisions have no scale to blame: stop at once.
        let apply = match self.scaler.as_mut() {
            Some(scaler) => scaler.unscale_and_update(&mut grads, value.is_finite())?,
            None if value.is_finite() => true,
            None => return Err(DistillError::Diverged { step: step + 1, epoch: epoch + 1, value }),
        };
        let lr = self.schedule.at(step);
        if apply {
            if let Some(p) = &self.pruner {
                p.mask_grads(&params, &mut grads);
            }
            self.opt.step(lr, &grads);
            if let Some(p) = self.pruner.as_mut() {
                p.apply_masks();
            }
            self.state.consecutive_skips = 0;
        } else {
            // Skipped: BatchNorm's running statistics are put back too, so nothing changes.
            restore_running_stats(&self.student, &stats.unwrap_or_default());
            self.state.skipped_steps += 1;
            self.state.consecutive_skips += 1;
            if self.state.consecutive_skips >= MAX_CONSECUTIVE_SKIPS {
                let scale = self.scaler.as_ref().map_or(0.0, GradScaler::scale);
                let skipped = self.state.consecutive_skips;
                return Err(DistillError::Overflow { skipped, step: step + 1, epoch: epoch + 1, value, scale });
            }
        }
        self.state.step += 1;
        if let Some(p) = self.pruner.as_mut() {
            p.maybe_prune(self.state.step, &mut self.student);
        }

        let correct =
            out.logits.argmax(-1, false).eq_tensor(&y).to_kind(Kind::Float).sum(Kind::Float).double_value(&[]);
        let seconds = t0.elapsed().as_secs_f64();
        let b = chunk.len() as f64;
        let (kd, ce) = (out.loss.kd.double_value(&[]), out.loss.ce.double_value(&[]));
        // A skipped step's (possibly inf/NaN) loss stays out of the logged means.
        for w in [&mut self.state.window, &mut self.state.epoch].into_iter().filter(|_| apply) {
            w.loss += value;
            w.kd += kd;
            w.ce += ce;
            w.correct += correct;
            w.samples += b;
            w.batches += 1.0;
            w.seconds += seconds;
        }
        self.state.total_samples += b;
        self.state.train_seconds += seconds;
        let w = self.state.window;
        progress.step(format!(
            "loss {:.4} (kd {:.4} ce {:.4}) acc {:.3}",
            w.mean(w.loss),
            w.mean(w.kd),
            w.mean(w.ce),
            w.correct / w.samples
        ));
        let step = self.state.step;
        if step % inputs.spec.train.log_every == 0 || step == self.schedule.total {
            metrics.write(&StepLine {
                kind: "step",
                step,
                epoch: epoch + 1,
                lr,
                loss: w.mean(w.loss),
                kd: w.mean(w.kd),
                ce: w.mean(w.ce),
                accuracy: w.correct / w.samples,
                samples_per_s: w.samples / w.seconds.max(1e-9),
                loss_scale: self.scaler.as_ref().map(GradScaler::scale),
            })?;
            self.state.metrics_lines += 1;
            self.state.window = Window::default();
        }
        Ok(())
    }

    fn end_epoch(&mut self, epoch: u64, progress: &Progress, metrics: &mut MetricsLog, name: &str) -> Result<()> {
        let inputs = self.inputs;
        let preds =
            student_predictions(&self.student, inputs.test, inputs.norm, inputs.spec.train.eval_batch_size as usize);
        let test_accuracy = accuracy(&preds, &inputs.test.y);
        let agreement = inputs.teacher_test_preds.map(|t| accuracy(&preds, t));
        let e = self.state.epoch;
        let line = EpochLine {
            kind: "epoch".into(),
            epoch: epoch + 1,
            step: self.state.step,
            loss: e.mean(e.loss),
            kd: e.mean(e.kd),
            ce: e.mean(e.ce),
            train_accuracy: e.correct / e.samples,
            test_accuracy,
            agreement,
            sparsity: self.pruner.as_ref().map(|p| p.schedule.applied_at(self.state.step)),
            samples_per_s: e.samples / e.seconds.max(1e-9),
            elapsed_s: self.state.train_seconds,
        };
        metrics.write(&line)?;
        self.state.metrics_lines += 1;
        progress.epoch(format!(
            "{name} epoch {}/{}: loss {:.4} (kd {:.4} ce {:.4}) train acc {:.4} test acc {:.4}{}{} {:.0} samples/s",
            epoch + 1,
            inputs.spec.train.epochs,
            line.loss,
            line.kd,
            line.ce,
            line.train_accuracy,
            test_accuracy,
            agreement.map(|a| format!(" agreement {a:.4}")).unwrap_or_default(),
            line.sparsity.map(|s| format!(" sparsity {s:.3}")).unwrap_or_default(),
            line.samples_per_s
        ));
        self.state.last_epoch = Some(line);
        self.state.epoch = Window::default();
        Ok(())
    }

    /// Writes a checkpoint of the current step under `dir`.
    pub fn save(&self, dir: &std::path::Path) -> Result<PathBuf> {
        let mut tensors: Vec<(String, Tensor)> =
            self.vs.variables().into_iter().map(|(n, t)| (format!("model/{n}"), t)).collect();
        tensors.extend(self.opt.state().into_iter().map(|(n, t)| (format!("optim/{n}"), t)));
        if let Some(p) = &self.pruner {
            tensors.extend(p.state());
        }
        if let Some(s) = &self.scaler {
            let (scale, tracker) = s.state();
            tensors.push(("amp/scale".into(), scale));
            tensors.push(("amp/growth_tracker".into(), tracker));
        }
        let saved = Saved {
            state: self.state.clone(),
            optimizer_step: self.opt.step,
            config: self.inputs.spec.to_toml_string(),
        };
        checkpoint::save(dir, self.state.step, &tensors, &saved, self.inputs.spec.train.keep_checkpoints as usize)
    }

    /// Continues from the checkpoint at `path` (written by [`Trainer::save`] for the same config).
    ///
    /// # Errors
    /// [`DistillError::Usage`] when the checkpoint is unreadable or was written for another
    /// config.
    pub fn restore(&mut self, path: &std::path::Path) -> Result<()> {
        let (tensors, saved): (Vec<(String, Tensor)>, Saved) = checkpoint::load(path)?;
        if saved.config != self.inputs.spec.to_toml_string() {
            return Err(DistillError::Usage(format!(
                "{}: this checkpoint was written for another configuration; resume with the cfg.toml it was started with",
                path.display()
            )));
        }
        let get = |key: &str| tensors.iter().find(|(n, _)| n == key).map(|(_, t)| t.shallow_clone());
        tch::no_grad(|| {
            for (name, mut var) in self.vs.variables() {
                if let Some(t) = get(&format!("model/{name}")) {
                    var.copy_(&t);
                }
            }
        });
        let optim: Vec<(String, Tensor)> = tensors
            .iter()
            .filter_map(|(n, t)| n.strip_prefix("optim/").map(|k| (k.to_string(), t.shallow_clone())))
            .collect();
        self.opt.load_state(saved.optimizer_step, &optim);
        if let Some(p) = self.pruner.as_mut() {
            p.load_state(&tensors, &mut self.student);
        }
        if let (Some(s), Some(scale), Some(tracker)) =
            (self.scaler.as_mut(), get("amp/scale"), get("amp/growth_tracker"))
        {
            s.load_state(&scale, &tracker, saved.state.skipped_steps);
        }
        self.state = saved.state;
        Ok(())
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

/// What `state.json` of a checkpoint holds.
#[derive(Serialize, Deserialize)]
struct Saved {
    state: State,
    optimizer_step: u64,
    /// The resolved cfg.toml, to refuse resuming under another configuration.
    config: String,
}
