//! One training step's forward and backward: autocast, the objective's loss in fp32, loss scaling, and
//! gradient checkpointing by segments (Chen et al. 2016, arXiv:1604.06174).
//!
//! The student's layers are split into segments (`estimator_wasm::schema::arch::checkpoint_segments`,
//! the split the memory estimator prices; one segment without checkpointing). Dropout in
//! block `b` of step `s` draws from libtorch's generator reseeded with (seed, s, b) before that
//! block, so a recomputed segment replays the same masks, a resumed run replays the same steps,
//! and the masks (hence the training) do not depend on how the blocks are split into segments.
//!
//! With checkpointing, the forward runs segments `0..K-1` under `no_grad`, keeping only each
//! segment's input; the last segment runs with autograd and the loss is back-propagated to
//! every parameter (its own through the logits, any through an extra term such as L1) and to
//! its input. Then, from the last segment down to the first that holds parameters, each earlier
//! segment is recomputed with autograd from its kept input and the gradient of its output is
//! pushed in through the surrogate `sum(out * grad_out)`, whose gradient is exactly `grad_out`;
//! the gradients of a parameter add up. Any segment count works, whatever blocks a segment holds.
//! BatchNorm running statistics are restored before a recompute, so they move once per step.
//!
//! `[[kd.hidden]]` pairs: a pair's term is made from its block's output as the run of blocks
//! holding it ends. Without checkpointing it joins the loss; with checkpointing the forward
//! under `no_grad` gives the values of the earlier segments' terms (for the logged loss), and
//! each recompute adds its segment's terms (times the step's weight, scaled for fp16) to the
//! surrogate, so they reach the block and its projection as they would in one graph.
use std::ops::Range;

use estimator_wasm::schema::Precision;
use tch::{Device, Kind, Tensor};

use crate::data_parallel::sync_batch_norm::synchronised;
use crate::data_parallel::{Ddp, ProcessGroup};
use crate::host::error::Result;
use crate::inputs::data::ModelInput;
use crate::student::Student;
use crate::torch::shim::autocast;
use crate::train::amp::GradScaler;
use crate::train::backward::run_backward;
use crate::train::chunked_loss::chunked_loss;
use crate::train::fused_lm_loss::FusedLmLoss;
use crate::train::objective::hidden_kd::HiddenKd;
use crate::train::objective::{LossParts, Objective};

/// What a step needs to know about the run.
pub struct StepConfig<'a> {
    pub device: Device,
    pub precision: Precision,
    /// The loss of a batch from the student's output, the soft targets and the labels.
    pub objective: &'a dyn Objective,
    pub seed: u64,
    /// Contiguous block ranges covering the student; more than one means checkpointing.
    pub segments: &'a [Range<usize>],
    /// `param_segment[i]`: the segment holding optimiser parameter `i`.
    pub param_segment: &'a [usize],
    /// Recompute segments in the backward (checkpointing) instead of keeping their graphs.
    pub recompute: bool,
    /// Data parallelism: the Reducer averages the gradients across ranks. One backward pass
    /// accumulates into `.grad` as autograd runs; a step of several (checkpointing, a chunked
    /// loss) computes its gradients alone and hands them over at the end ([`Ddp::average`]).
    pub ddp: Option<&'a Ddp<'a>>,
    /// SyncBatchNorm: the training forward's BatchNorm layers normalise over this group's ranks
    /// ([`crate::data_parallel::sync_batch_norm`]).
    pub sync_batch_norm: Option<&'a ProcessGroup>,
    /// A language model's loss in chunks of this many positions (`kd.loss_chunk`): the head,
    /// the student's last block, runs with the loss chunk by chunk ([`crate::train::chunked_loss`]).
    pub loss_chunk: Option<i64>,
    /// A language model's head fused with its loss (`kd.fused_head`): the student runs up to
    /// its head, whose logits the loss makes chunk by chunk ([`crate::train::fused_lm_loss`]).
    pub fused_head: Option<&'a FusedLmLoss>,
    /// `[[kd.hidden]]`: the outputs of the pairs' blocks are kept and their weighted distances
    /// to [`StepBatch::teacher_hidden`] added to the objective's loss (`None`: nothing kept).
    pub hidden: Option<&'a HiddenKd>,
}

/// What one training step runs on: the batch's model input (with its attention mask for text),
/// labels [B] (`None` for unlabelled data), the teacher's outputs [B, ...] (soft targets), and
/// the index of the optimiser step it feeds.
pub struct StepBatch<'a> {
    pub input: &'a ModelInput,
    pub labels: Option<&'a Tensor>,
    pub soft: Option<&'a Tensor>,
    pub step: u64,
    /// Factor on the objective's loss in the backward: 1, or under data parallelism
    /// `world * local / global` samples, so that averaging the ranks' gradients gives the
    /// gradient of the global batch's mean loss when the shares differ in size.
    pub weight: f64,
    /// The teacher's hidden states the pairs of [`StepConfig::hidden`] read (empty without).
    pub teacher_hidden: &'a [Tensor],
}

/// A batch's loss parts, the student's predictions and the gradient of every optimiser parameter.
pub struct Gradients {
    pub loss: LossParts,
    /// The objective's predictions of the student's output (detached), for the running train
    /// metric.
    pub predictions: Tensor,
    /// Aligned with `Optimizer::params()`; undefined where a parameter got no gradient.
    pub grads: Vec<Tensor>,
}

/// Forward and backward of one batch. `extra_loss` (e.g. an L1 penalty, fp32 scalar with a
/// graph to the parameters) is added to the objective's loss before back-propagation.
pub fn forward_backward(
    cfg: &StepConfig,
    student: &Student,
    params: &[&Tensor],
    batch: &StepBatch,
    scaler: Option<&GradScaler>,
    extra_loss: &dyn Fn() -> Option<Tensor>,
) -> Result<Gradients> {
    let StepBatch { input, labels, soft, step, weight, teacher_hidden } = *batch;
    let (x, mask) = (&input.x, input.mask.as_ref());
    let k = cfg.segments.len();
    if let Some(ddp) = cfg.ddp.filter(|_| (cfg.recompute && k > 1) || cfg.loss_chunk.is_some()) {
        // Several backward passes would mark a parameter ready more than once, which the
        // Reducer refuses: this rank's gradients first, then averaged in one pass.
        let alone = StepConfig { ddp: None, ..*cfg };
        let out = forward_backward(&alone, student, params, batch, scaler, extra_loss)?;
        return Ok(Gradients { grads: ddp.average(&out.grads)?, ..out });
    }
    // Block by block, each reseeded by its index, so that dropout is the same for any split.
    // The hidden pairs' terms are made from the blocks they read as each run of blocks ends
    // (outside autocast), with that run's graph: the step's, none under `no_grad`, a
    // recomputed segment's; `terms` holds them until the caller takes them ([`sum`]).
    let terms = std::cell::RefCell::new(Vec::<Tensor>::new());
    let run_blocks = |h: &Tensor, blocks: Range<usize>| -> Result<Tensor> {
        let kept = std::cell::RefCell::new(Vec::<(usize, Tensor)>::new());
        let forward = || {
            autocast(cfg.device, cfg.precision, || {
                blocks.fold(h.shallow_clone(), |h, block| {
                    tch::manual_seed(block_seed(cfg.seed, step, block as u64));
                    let out = student.forward_blocks(&h, block..block + 1, mask, true);
                    if cfg.hidden.is_some_and(|kd| kd.wants(block)) {
                        kept.borrow_mut().push((block, out.shallow_clone()));
                    }
                    out
                })
            })
        };
        let out = match cfg.sync_batch_norm {
            Some(group) => synchronised(group, forward)?,
            None => forward(),
        }?;
        if let Some(kd) = cfg.hidden {
            let made = kept.take().into_iter().filter_map(|(block, h)| kd.at_block(block, &h, teacher_hidden, mask));
            terms.borrow_mut().extend(made);
        }
        Ok(out)
    };
    let take_terms = || sum(terms.take());
    // A chunked or fused loss runs the last segment without the head, which runs with the loss.
    let head = student.block_count() - 1;
    let apart = cfg.loss_chunk.is_some() || cfg.fused_head.is_some();
    let run = |h: &Tensor, segment: usize| -> Result<Tensor> {
        let blocks = cfg.segments[segment].clone();
        match apart && segment == k - 1 {
            true => run_blocks(h, blocks.start..head),
            false => run_blocks(h, blocks),
        }
    };
    let chunked =
        |body: &Tensor, hidden: Option<Tensor>, grads: &mut [Tensor]| -> Result<(LossParts, Tensor, Tensor)> {
            let chunk = cfg.loss_chunk.expect("called for a chunked loss");
            let leaf = body.detach().set_requires_grad(true);
            let run_head = |h: &Tensor| run_blocks(h, head..head + 1);
            let labels = labels.expect("a language model's batches carry next-token labels");
            let c = chunked_loss(cfg.objective, &run_head, &leaf, labels, soft, chunk, weight, scaler, params, grads)?;
            let mut loss = c.loss;
            let mut root = (body * &c.grad_hidden).sum(Kind::Float);
            if let Some(hidden) = hidden {
                // the chunks' parts carry no graph; the pairs' term reaches the body through `root`
                loss.add_hidden(&hidden.detach());
                root += scaled(&(hidden * weight), scaler);
            }
            if let Some(extra) = extra_loss() {
                loss.loss = &loss.loss + &extra;
                root += scaled(&extra, scaler);
            }
            Ok((loss, root, c.predictions))
        };
    let mut grads: Vec<Tensor> = params.iter().map(|_| Tensor::new()).collect();
    let in_segment =
        |segment: usize| -> Vec<usize> { (0..params.len()).filter(|&i| cfg.param_segment[i] == segment).collect() };

    if !cfg.recompute || k == 1 {
        let mut h = x.shallow_clone();
        for segment in 0..k {
            h = run(&h, segment)?;
        }
        let hidden = take_terms();
        if cfg.loss_chunk.is_some() {
            let (loss, root, predictions) = chunked(&h, hidden, &mut grads)?;
            let all: Vec<usize> = (0..params.len()).collect();
            let _ = backward_into(&root, params, &all, None, &mut grads)?;
            return Ok(Gradients { loss, predictions, grads });
        }
        let (loss, backprop, predictions) = finish(cfg, &h, labels, soft, scaler, extra_loss, weight, hidden);
        if let Some(ddp) = cfg.ddp {
            if !backprop.requires_grad() {
                return Err(crate::DistillError::NothingToTrain);
            }
            ddp.before_backward()?;
            backprop.f_backward().map_err(|e| ddp.backward_error(e))?;
            return Ok(Gradients { loss, predictions, grads: ddp.grads() });
        }
        let out = run_backward(&backprop, params)?;
        return Ok(Gradients { loss, predictions, grads: out });
    }

    // Forward: keep only the input of each segment (and BN statistics from before it), and the
    // values of the hidden pairs' terms it passes (their gradients come with the recompute).
    let mut inputs = vec![x.shallow_clone()];
    let mut stats_before = Vec::with_capacity(k);
    for segment in 0..k - 1 {
        stats_before.push(copies(&student.running_stats(cfg.segments[segment].clone())));
        let h = tch::no_grad(|| run(&inputs[segment], segment))?;
        inputs.push(h);
    }
    let early = take_terms();
    // Last segment with autograd, from a leaf that collects the gradient of its input.
    let leaf = inputs[k - 1].detach().set_requires_grad(true);
    let output = run(&leaf, k - 1)?;
    let hidden = take_terms();
    let (mut loss, backprop, predictions) = match cfg.loss_chunk {
        Some(_) => chunked(&output, hidden, &mut grads)?,
        None => finish(cfg, &output, labels, soft, scaler, extra_loss, weight, hidden),
    };
    if let Some(early) = early {
        loss.add_hidden(&early);
    }
    // The loss reaches the last segment's parameters through the logits and any parameter
    // directly through the extra term (an L1 penalty): back-propagate it to all of them.
    let all: Vec<usize> = (0..params.len()).collect();
    let mut grad_out = backward_into(&backprop, params, &all, Some(&leaf), &mut grads)?;
    // Earlier segments, last to first, down to the first one holding parameters (segments in
    // front of it, such as a lone `flatten`, need no gradient): recompute, then push the output
    // gradient in.
    let lowest = cfg.param_segment.iter().copied().min().unwrap_or(k - 1);
    for segment in (lowest..k - 1).rev() {
        for (t, saved) in student.running_stats(cfg.segments[segment].clone()).iter_mut().zip(&stats_before[segment]) {
            tch::no_grad(|| t.copy_(saved));
        }
        let input = (segment > lowest).then(|| inputs[segment].detach().set_requires_grad(true));
        let out = run(input.as_ref().unwrap_or(&inputs[segment]), segment)?;
        let mut surrogate = (out * &grad_out).sum(Kind::Float);
        // the pairs that read this segment's blocks: their term, weighted and scaled as the
        // loss is, enters beside the output's gradient
        if let Some(term) = take_terms() {
            surrogate += scaled(&(term * weight), scaler);
        }
        grad_out = backward_into(&surrogate, params, &in_segment(segment), input.as_ref(), &mut grads)?;
    }
    Ok(Gradients { loss, predictions, grads })
}

/// The objective's loss in fp32 plus the hidden pairs' term `hidden` and any extra term, the
/// tensor to back-propagate (the objective's loss and the hidden term times `weight` plus the
/// extra term, scaled for fp16) and the objective's predictions; with a fused head, `output` is
/// the final hidden states and the loss the fused one.
#[allow(clippy::too_many_arguments)]
fn finish(
    cfg: &StepConfig,
    output: &Tensor,
    labels: Option<&Tensor>,
    soft: Option<&Tensor>,
    scaler: Option<&GradScaler>,
    extra_loss: &dyn Fn() -> Option<Tensor>,
    weight: f64,
    hidden: Option<Tensor>,
) -> (LossParts, Tensor, Tensor) {
    let (mut loss, predictions) = match cfg.fused_head {
        Some(fused) => fused.loss(output, soft, labels),
        None => (cfg.objective.loss(output, soft, labels), cfg.objective.predictions(&output.detach())),
    };
    if let Some(hidden) = hidden {
        loss.add_hidden(&hidden);
    }
    let weighted = if weight == 1.0 { loss.loss.shallow_clone() } else { &loss.loss * weight };
    let total = match extra_loss() {
        Some(extra) => {
            loss.loss = &loss.loss + &extra;
            weighted + extra
        }
        None => weighted,
    };
    (loss, scaled(&total, scaler), predictions)
}

/// `x` scaled for fp16 by `scaler` (`x` itself without).
fn scaled(x: &Tensor, scaler: Option<&GradScaler>) -> Tensor {
    scaler.map_or_else(|| x.shallow_clone(), |s| s.scaled(x))
}

/// The sum of the hidden pairs' terms `terms` (`None` without any).
fn sum(terms: Vec<Tensor>) -> Option<Tensor> {
    terms.into_iter().reduce(|a, b| a + b)
}

/// Back-propagates `root` to the parameters `which` (indices into `params`) and to `input`,
/// adding the parameter gradients into `grads`; returns the input's gradient (or an undefined
/// tensor without input).
fn backward_into(
    root: &Tensor,
    params: &[&Tensor],
    which: &[usize],
    input: Option<&Tensor>,
    grads: &mut [Tensor],
) -> Result<Tensor> {
    let mut wrt: Vec<&Tensor> = which.iter().map(|&i| params[i]).collect();
    if let Some(input) = input {
        wrt.push(input);
    }
    let mut out = run_backward(root, &wrt)?;
    let grad_in = if input.is_some() { out.pop().unwrap_or_else(Tensor::new) } else { Tensor::new() };
    for (&i, g) in which.iter().zip(out).filter(|(_, g)| g.defined()) {
        // in place (the gradients are autograd's fresh tensors): no second copy of a large one
        if grads[i].defined() {
            let _ = grads[i].g_add_(&g);
        } else {
            grads[i] = g;
        }
    }
    Ok(grad_in)
}

fn copies(tensors: &[Tensor]) -> Vec<Tensor> {
    tensors.iter().map(|t| t.detach().copy()).collect()
}

/// Copies of every BatchNorm running statistic of `student` (for [`restore_running_stats`]).
pub fn save_running_stats(student: &Student) -> Vec<Tensor> {
    copies(&student.running_stats(0..student.block_count()))
}

/// Puts back the running statistics `saved` by [`save_running_stats`] (a skipped fp16 step
/// must not leave its forward's statistics, which may be inf/NaN, in the model).
pub fn restore_running_stats(student: &Student, saved: &[Tensor]) {
    for (t, saved) in student.running_stats(0..student.block_count()).iter_mut().zip(saved) {
        tch::no_grad(|| t.copy_(saved));
    }
}

/// The libtorch seed of block `block` of optimiser step `step`: SplitMix64 over the three
/// numbers, so neighbouring steps and blocks get unrelated streams.
pub fn block_seed(seed: u64, step: u64, block: u64) -> i64 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (mix(mix(mix(seed) ^ step) ^ block) >> 1) as i64
}

/// Maps each optimiser parameter (by name `<layer id>.<leaf>`) to the segment of its block; a
/// hidden pair's projection (`kd_hidden.<k>.weight`, of `hidden`) to the segment of the block
/// its pair reads, whose recompute back-propagates the pair's term.
pub fn param_segments(
    student: &Student,
    names: &[String],
    segments: &[Range<usize>],
    hidden: Option<&HiddenKd>,
) -> Vec<usize> {
    names
        .iter()
        .map(|name| {
            let block = hidden.and_then(|kd| kd.block_of(name)).or_else(|| student.block_of(name)).unwrap_or(0);
            segments.iter().position(|r| r.contains(&block)).unwrap_or(0)
        })
        .collect()
}

#[cfg(test)]
#[path = "step_tests.rs"]
mod tests;
