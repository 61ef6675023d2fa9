//! Assembles a [`Plan`] from a compiled [`MemoryModel`]: the peak over moments, the breakdown by
//! category and by layer, the device total and the fit on a GPU.
use crate::memory::breakdown::{Fit, LayerRow, MomentBytes, Plan, Totals};
use crate::memory::errors::EstimateError;
use crate::memory::inputs::Inputs;
use crate::memory::memory_model::MemoryModel;
use crate::memory::moments::{self, live, At, AtBatch, Tally};
use crate::memory::scan;
use crate::memory::sizes::Size;
use crate::schema::catalogue::Gpu;
use crate::schema::Config;

impl MemoryModel {
    /// The full estimate at micro-batch `b`: moments, categories, layers, totals and fit.
    ///
    /// # Errors
    /// [`EstimateError::Spec`] on `train.batch_size` for `b` outside 1 to `batch::MAX_BATCH`
    /// (the cfg.toml's rule), [`EstimateError::Overflow`] past 2^64 bytes.
    pub fn plan(&self, b: u64) -> Result<Plan, EstimateError> {
        check_batch(b)?;
        let cuda = self.setup.runtime.cuda;
        let scan = scan::scan(self, b)?;
        let best = scan.checked_peak()?;
        let mut moments = Vec::with_capacity(7);
        let mut peak = None;
        let mut batches: Vec<Option<AtBatch>> = vec![None; self.student.stages.len()];
        for found in scan.moments.iter().flatten() {
            let stage = &self.student.stages[found.stage];
            let a = batches[found.stage].get_or_insert_with(|| AtBatch::new(self, stage, b));
            let mut tally = Tally::default();
            live(self, stage, a, found.at, &mut tally);
            let pool = tally.pool.check("live memory")?;
            let layer = match found.at {
                At::Forward(l) | At::Backward(l) => Some(self.student.layers[stage.layers.start + l].id.clone()),
                At::TeacherForward => moments::largest_live_teacher(self, b),
                At::Evaluation => self.eval.live.0.clone(),
                At::TeacherCache => self.eval.teacher_live.0.clone(),
                At::Loss | At::BackwardStart | At::OptimizerStep => None,
            };
            let row = MomentBytes::new(found.at.moment(), layer, stage.index, tally.categories, &pool, found.reserved);
            if *found == best {
                peak = Some(row.clone());
            }
            moments.push(row);
        }
        let peak = peak.ok_or_else(|| EstimateError::overflow("the peak"))?;
        let moments_allocated = moments.iter().map(|m| m.allocated).max().unwrap_or(0);
        let peak_stage = &self.student.stages[best.stage];
        let (fragmentation, total) = self.setup.runtime.device_total(peak.reserved)?;
        let totals = Totals {
            requested: peak.requested,
            allocated: peak.allocated,
            reserved: peak.reserved,
            fragmentation,
            cuda_context: self.setup.runtime.cuda_context,
            nccl: self.setup.runtime.nccl,
            total,
        };
        let mut layers = Vec::with_capacity(self.student.layers.len() + 1);
        for s in &self.student.stages {
            for l in &self.student.layers[s.layers.clone()] {
                layers.push(LayerRow {
                    id: l.id.clone(),
                    kind: l.kind,
                    output: l.output_shape.clone(),
                    params: l.params,
                    weight_bytes: l.states.weights,
                    grad_bytes: l.states.grads,
                    optimizer_bytes: l.states.optimizer,
                    saved_bytes: exact(&l.saved, b)?,
                    kept_bytes: if s.checkpointing { Some(exact(l.kept.as_slice(), b)?) } else { None },
                    stage: s.index,
                });
            }
        }
        layers.push(LayerRow {
            id: "loss".into(),
            kind: "loss",
            output: Vec::new(),
            params: 0,
            weight_bytes: 0,
            grad_bytes: 0,
            optimizer_bytes: 0,
            saved_bytes: exact(&self.student.loss.saved, b)?,
            kept_bytes: None,
            stage: self.student.stages.len() as u64 - 1,
        });
        // the fast bound's total, as the browser (no replay) shows it; `Plan::fit_total` is
        // what distill fits
        let fit = self.setup.gpu.filter(|_| cuda).map(|g| Fit::of(g, total));
        Ok(Plan {
            batch: b,
            target: self.setup.target,
            precision: self.setup.precision,
            params: self.summary.counts,
            model_states: peak_stage.states,
            peak_moment: peak.moment,
            peak: peak.categories,
            totals,
            moments,
            layers,
            fit,
            pruning: self.summary.pruning,
            flops: self.flops.at(b),
            notes: self.summary.notes.clone(),
            reserved_replay: self.reserved_replay(b, moments_allocated),
        })
    }

    /// Only the device totals at micro-batch `b` (the fast path the batch search uses).
    ///
    /// # Errors
    /// As [`MemoryModel::plan`].
    pub fn totals(&self, b: u64) -> Result<Totals, EstimateError> {
        check_batch(b)?;
        let peak = scan::scan(self, b)?.checked_peak()?;
        let (fragmentation, total) = self.setup.runtime.device_total(peak.reserved)?;
        Ok(Totals {
            requested: peak.pool.requested,
            allocated: peak.pool.allocated,
            reserved: peak.reserved,
            fragmentation,
            cuda_context: self.setup.runtime.cuda_context,
            nccl: self.setup.runtime.nccl,
            total,
        })
    }

    /// The caching allocator's reserved bytes, replayed: its peak over a run at micro-batch `b`
    /// (the run's requests replayed on `crate::memory::caching_allocator`'s model by
    /// `crate::memory::alloc_trace`, cached blocks of earlier passes included), at least
    /// `most_allocated`, the most any moment allocates (segments hold every block in use).
    /// `None` on the CPU, where nothing is cached, and in the browser build (wasm32), whose page
    /// shows the fast bound and would carry the replay's code for nothing (18 KB of its 250 KB
    /// gzip budget). Only [`MemoryModel::plan`] runs it: the replay walks every request of the
    /// run, too slow for [`MemoryModel::totals`]' sweeps.
    fn reserved_replay(&self, b: u64, most_allocated: u64) -> Option<u64> {
        if !self.setup.runtime.cuda || cfg!(target_arch = "wasm32") {
            return None;
        }
        let replay = crate::memory::alloc_trace::Run::of(self, b, self.setup.eval_batch).peak_reserved();
        Some(replay.max(most_allocated))
    }

    /// FLOPs of one training step at micro-batch `b` (`crate::memory::flops`' convention).
    pub fn flops(&self, b: u64) -> crate::memory::flops::StepFlops {
        self.flops.at(b)
    }

    /// Exact bytes autograd holds for backward at the forward end, one micro-batch: the saved
    /// set (or, with checkpointing, the kept segment inputs) plus the loss's saved tensors,
    /// parameters excluded. This is what `saved_tensors_hooks` measures (`fidelity/`).
    ///
    /// # Errors
    /// [`EstimateError::Overflow`].
    pub fn saved_bytes(&self, b: u64) -> Result<u64, EstimateError> {
        let mut total = exact(&self.student.loss.saved, b)?;
        for s in &self.student.stages {
            for l in &self.student.layers[s.layers.clone()] {
                let part = if s.checkpointing { exact(l.kept.as_slice(), b)? } else { exact(&l.saved, b)? };
                total = crate::memory::runtime::add(total, part, "saved bytes")?;
            }
        }
        Ok(total)
    }
}

fn exact(sizes: &[Size], b: u64) -> Result<u64, EstimateError> {
    sizes.iter().try_fold(0u64, |acc, s| crate::memory::runtime::add(acc, s.at(b)?, "saved bytes"))
}

/// The micro-batch under `train.batch_size`'s rule (1 to `MAX_BATCH`).
pub(crate) fn check_batch(b: u64) -> Result<(), EstimateError> {
    Ok(crate::schema::limits::within("train.batch_size", b, 1, crate::schema::limits::MAX_BATCH)?)
}

/// Estimates the memory of one training step of `config`.
///
/// The micro-batch is `inputs.batch`, else `train.batch_size`; with `batch_size = "auto"` and
/// an `[estimate] gpu` (or the caller's device), the largest batch that fits it (keeping
/// `estimate.safety_margin` free). Text with [`Inputs::text`] is priced at its batches' widths
/// (`crate::memory::text_widths`).
///
/// # Errors
/// [`EstimateError`]: an invalid config, an unknown teacher size or GPU, a batch of 0 or
/// `"auto"` without a GPU, or sizes past 2^64 bytes. Never panics.
pub fn estimate(config: &Config, inputs: &Inputs) -> Result<Plan, EstimateError> {
    let model = search_model(config, inputs)?;
    let b = match (model.default_batch(), model.gpu()) {
        (Some(b), _) => b,
        (None, Some(gpu)) => {
            crate::memory::batch::search(&model, gpu, model.safety_margin())?.batch.ok_or_else(|| {
                EstimateError::invalid("train.batch_size", format!("\"auto\": not even a batch of 1 fits {}", gpu.name))
            })?
        }
        (None, None) => {
            return Err(EstimateError::invalid(
                "train.batch_size",
                "\"auto\" needs a batch from the caller or an [estimate] gpu to fit",
            ))
        }
    };
    match &inputs.text {
        Some(text) => crate::memory::text_widths::plan(config, inputs, text, b),
        None => model.plan(b),
    }
}

/// The model a batch search prices: `config` as written, or for text with [`Inputs::text`]
/// every row at the widest training batch's width (the rows each width has depend on the
/// batch, which the search is looking for).
fn search_model(config: &Config, inputs: &Inputs) -> Result<MemoryModel, EstimateError> {
    match &inputs.text {
        Some(text) => {
            let widest = crate::memory::text_widths::widest(config, text);
            crate::memory::text_widths::model_at(config, inputs, text, widest)
        }
        None => MemoryModel::new(config, inputs),
    }
}

/// The largest micro-batch of `config` that fits `gpu`, keeping `safety_margin` (a fraction in
/// [0, 1)) of its memory free; `None` when not even 1 fits. Closed form, then verified: the
/// result fits and one more does not. The step is priced for `estimate.target`: a
/// `target = "cpu"` config fits only a device without CUDA context (the CPU's memory).
///
/// # Errors
/// As [`estimate`]; a margin out of [0, 1) as `estimate.safety_margin` is refused; a
/// `target = "cpu"` config and a GPU, on `estimate.target` ([`crate::memory::batch::search`]).
pub fn max_batch(
    config: &Config,
    inputs: &Inputs,
    gpu: &Gpu,
    safety_margin: f64,
) -> Result<Option<u64>, EstimateError> {
    let model = search_model(config, inputs)?;
    Ok(crate::memory::batch::search(&model, gpu, safety_margin)?.batch)
}

/// [`max_batch`] on every catalogue GPU (for `distill plan`), in catalogue order.
///
/// # Errors
/// As [`max_batch`].
pub fn max_batch_per_gpu(
    config: &Config,
    inputs: &Inputs,
    safety_margin: f64,
) -> Result<Vec<(&'static Gpu, Option<u64>)>, EstimateError> {
    let mut config = config.clone();
    config.estimate.target = crate::schema::Target::Cuda;
    crate::schema::catalogue::catalogue()
        .iter()
        .map(|g| {
            config.estimate.gpu = Some(g.name.to_string());
            let model = MemoryModel::new(&config, inputs)?;
            Ok((g, crate::memory::batch::search(&model, g, safety_margin)?.batch))
        })
        .collect()
}
