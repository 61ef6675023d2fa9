//! One training step's forward and backward: autocast, the KD loss in fp32, loss scaling, and
//! gradient checkpointing by segments (Chen et al. 2016, arXiv:1604.06174).
//!
//! The student's layers are split into segments (`estimator_wasm::arch::checkpoint_segments`,
//! the split the memory estimator prices; one segment without checkpointing). Dropout in
//! segment `k` of step `s` draws from libtorch's generator reseeded with (seed, s, k), so a
//! recomputed segment replays the same masks and a resumed run replays the same steps.
//!
//! With checkpointing, the forward runs segments `0..K-1` under `no_grad`, keeping only each
//! segment's input; the last segment runs with autograd and the loss is back-propagated to its
//! parameters and its input. Then, from the last segment down, each earlier segment is
//! recomputed with autograd from its kept input and the gradient of its output is pushed in
//! through the surrogate `sum(out * grad_out)`, whose gradient is exactly `grad_out`.
//! BatchNorm running statistics are restored before a recompute, so they move once per step.
use std::ops::Range;

use estimator_wasm::spec::Precision;
use tch::{Device, Kind, Tensor};

use crate::amp::GradScaler;
use crate::error::Result;
use crate::loss::{kd_loss, KdLoss};
use crate::shim::autocast;
use crate::student::Student;

/// What a step needs to know about the run.
pub struct StepConfig<'a> {
    pub device: Device,
    pub precision: Precision,
    pub temperature: f64,
    pub alpha: f64,
    pub seed: u64,
    /// Contiguous block ranges covering the student; more than one means checkpointing.
    pub segments: &'a [Range<usize>],
    /// `param_segment[i]`: the segment holding optimiser parameter `i`.
    pub param_segment: &'a [usize],
    /// Recompute segments in the backward (checkpointing) instead of keeping their graphs.
    pub recompute: bool,
}

/// One training batch: normalised inputs [B, ...], labels [B], soft targets [B, C], and the
/// index of the optimiser step it feeds.
pub struct Batch<'a> {
    pub x: &'a Tensor,
    pub y: &'a Tensor,
    pub soft: Option<&'a Tensor>,
    pub step: u64,
}

/// A batch's loss parts, logits and the gradient of every optimiser parameter.
pub struct Gradients {
    pub loss: KdLoss,
    /// Student logits [B, C] (detached), for the running train accuracy.
    pub logits: Tensor,
    /// Aligned with `Optimizer::params()`; undefined where a parameter got no gradient.
    pub grads: Vec<Tensor>,
}

/// Forward and backward of one batch. `extra_loss` (e.g. an L1 penalty, fp32 scalar with a
/// graph to the parameters) is added to the KD loss before back-propagation.
pub fn forward_backward(
    cfg: &StepConfig,
    student: &Student,
    params: &[&Tensor],
    batch: &Batch,
    scaler: Option<&GradScaler>,
    extra_loss: &dyn Fn() -> Option<Tensor>,
) -> Result<Gradients> {
    let Batch { x, y, soft, step } = *batch;
    let k = cfg.segments.len();
    let seed_segment = |segment: usize| tch::manual_seed(segment_seed(cfg.seed, step, segment as u64));
    let run = |h: &Tensor, segment: usize| -> Result<Tensor> {
        seed_segment(segment);
        autocast(cfg.device, cfg.precision, || student.forward_range(h, cfg.segments[segment].clone(), true))
    };
    let mut grads: Vec<Tensor> = params.iter().map(|_| Tensor::new()).collect();
    let in_segment =
        |segment: usize| -> Vec<usize> { (0..params.len()).filter(|&i| cfg.param_segment[i] == segment).collect() };

    if !cfg.recompute || k == 1 {
        let mut h = x.shallow_clone();
        for segment in 0..k {
            h = run(&h, segment)?;
        }
        let (loss, backprop) = finish(cfg, &h, y, soft, scaler, extra_loss);
        let out = Tensor::f_run_backward(&[&backprop], params, false, false)?;
        return Ok(Gradients { loss, logits: h.detach(), grads: out });
    }

    // Forward: keep only the input of each segment (and BN statistics from before it).
    let mut inputs = vec![x.shallow_clone()];
    let mut stats_before = Vec::with_capacity(k);
    for segment in 0..k - 1 {
        stats_before.push(copies(&student.running_stats(cfg.segments[segment].clone())));
        let h = tch::no_grad(|| run(&inputs[segment], segment))?;
        inputs.push(h);
    }
    // Last segment with autograd, from a leaf that collects the gradient of its input.
    let leaf = inputs[k - 1].detach().set_requires_grad(true);
    let logits = run(&leaf, k - 1)?;
    let (loss, backprop) = finish(cfg, &logits, y, soft, scaler, extra_loss);
    let mut grad_out = backward_into(&backprop, params, &in_segment(k - 1), Some(&leaf), &mut grads)?;
    // Earlier segments, last to first: recompute, then push the output gradient in.
    for segment in (0..k - 1).rev() {
        for (t, saved) in student.running_stats(cfg.segments[segment].clone()).iter_mut().zip(&stats_before[segment]) {
            tch::no_grad(|| t.copy_(saved));
        }
        let input = (segment > 0).then(|| inputs[segment].detach().set_requires_grad(true));
        let out = run(input.as_ref().unwrap_or(&inputs[0]), segment)?;
        let surrogate = (out * &grad_out).sum(Kind::Float);
        grad_out = backward_into(&surrogate, params, &in_segment(segment), input.as_ref(), &mut grads)?;
    }
    Ok(Gradients { loss, logits: logits.detach(), grads })
}

/// The KD loss in fp32 plus any extra term, and the tensor to back-propagate (scaled for fp16).
fn finish(
    cfg: &StepConfig,
    logits: &Tensor,
    y: &Tensor,
    soft: Option<&Tensor>,
    scaler: Option<&GradScaler>,
    extra_loss: &dyn Fn() -> Option<Tensor>,
) -> (KdLoss, Tensor) {
    let mut loss = kd_loss(logits, soft, y, cfg.temperature, cfg.alpha);
    if let Some(extra) = extra_loss() {
        loss.total = &loss.total + extra;
    }
    let backprop = match scaler {
        Some(s) => s.scaled(&loss.total),
        None => loss.total.shallow_clone(),
    };
    (loss, backprop)
}

/// Back-propagates `root` to the parameters `which` (indices into `params`) and to `input`,
/// storing the parameter gradients into `grads`; returns the input's gradient (or an undefined
/// tensor without input).
fn backward_into(
    root: &Tensor,
    params: &[&Tensor],
    which: &[usize],
    input: Option<&Tensor>,
    grads: &mut [Tensor],
) -> Result<Tensor> {
    let mut targets: Vec<&Tensor> = which.iter().map(|&i| params[i]).collect();
    if let Some(input) = input {
        targets.push(input);
    }
    let mut out = Tensor::f_run_backward(&[root], &targets, false, false)?;
    let grad_in = if input.is_some() { out.pop().unwrap_or_else(Tensor::new) } else { Tensor::new() };
    for (&i, g) in which.iter().zip(out) {
        grads[i] = g;
    }
    Ok(grad_in)
}

fn copies(tensors: &[Tensor]) -> Vec<Tensor> {
    tensors.iter().map(|t| t.detach().copy()).collect()
}

/// The libtorch seed of segment `segment` of optimiser step `step`: SplitMix64 over the three
/// numbers, so neighbouring steps and segments get unrelated streams.
pub fn segment_seed(seed: u64, step: u64, segment: u64) -> i64 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (mix(mix(mix(seed) ^ step) ^ segment) >> 1) as i64
}

/// Maps each optimiser parameter (by name `<layer id>.<leaf>`) to the segment of its block.
pub fn param_segments(student: &Student, names: &[String], segments: &[Range<usize>]) -> Vec<usize> {
    names
        .iter()
        .map(|name| {
            let id = name.split('.').next().unwrap_or(name);
            let block = student.block_index(id).unwrap_or(0);
            segments.iter().position(|r| r.contains(&block)).unwrap_or(0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::arch::checkpoint_segments;
    use estimator_wasm::spec::{Checkpointing, Config};
    use tch::nn::VarStore;

    fn setup(dropout: f64) -> (Config, VarStore, Student, Vec<String>) {
        let text = format!(
            "[data]\ninput_shape = [1, 8, 8]\nclasses = 5\n[student]\nfamily = \"cnn\"\nchannels = [4, 6]\nhidden = [12, 8]\nnorm = \"batch\"\ndropout = {dropout}\n"
        );
        let spec = Config::from_toml_str(&text).unwrap();
        tch::manual_seed(11);
        let vs = VarStore::new(Device::Cpu);
        let student = Student::new(&vs.root(), &spec).unwrap();
        let mut names: Vec<String> =
            vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).map(|(n, _)| n).collect();
        names.sort();
        (spec, vs, student, names)
    }

    /// Blocks of the test student; under the RNG lock, since building it reseeds the global
    /// generator that a concurrent test may be drawing from.
    fn block_count(dropout: f64) -> usize {
        let _guard = crate::rng_lock();
        setup(dropout).2.blocks.len()
    }

    /// Gradients (and BN running statistics after the step) of one batch.
    fn grads(dropout: f64, segments: &[Range<usize>], recompute: bool) -> (Vec<Tensor>, Vec<Tensor>) {
        let _guard = crate::rng_lock();
        let (_, vs, student, names) = setup(dropout);
        let vars = vs.variables();
        let params: Vec<Tensor> = names.iter().map(|n| vars[n].shallow_clone()).collect();
        let refs: Vec<&Tensor> = params.iter().collect();
        let cfg = StepConfig {
            device: Device::Cpu,
            precision: Precision::Fp32,
            temperature: 2.0,
            alpha: 0.5,
            seed: 3,
            segments,
            param_segment: &param_segments(&student, &names, segments),
            recompute,
        };
        let x = Tensor::linspace(-1.0, 1.0, 6 * 64, (Kind::Float, Device::Cpu)).reshape([6, 1, 8, 8]).sin() * 3.0;
        let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0]);
        let soft = Tensor::linspace(-2.0, 2.0, 30, (Kind::Float, Device::Cpu)).reshape([6, 5]);
        let batch = Batch { x: &x, y: &y, soft: Some(&soft), step: 7 };
        let out = forward_backward(&cfg, &student, &refs, &batch, None, &|| None).unwrap();
        (out.grads, student.running_stats(0..student.blocks.len()).iter().map(|t| t.copy()).collect())
    }

    fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
        a.iter().zip(b).map(|(a, b)| (a - b).abs().max().double_value(&[])).fold(0.0, f64::max)
    }

    #[test]
    fn checkpointed_gradients_equal_full_backprop() {
        let n = block_count(0.0);
        #[allow(clippy::single_range_in_vec_init)]
        let whole = vec![0..n];
        for mode in [Checkpointing::Sqrt, Checkpointing::Segments(2), Checkpointing::Segments(n as u64)] {
            let segments = checkpoint_segments(n, mode).unwrap();
            assert!(segments.len() > 1);
            let (g_ref, bn_ref) = grads(0.0, &whole, false);
            let (g, bn) = grads(0.0, &segments, true);
            assert!(g.iter().all(Tensor::defined), "every parameter gets a gradient");
            assert!(max_diff(&g, &g_ref) < 1e-6, "{mode:?}: grads differ by {}", max_diff(&g, &g_ref));
            assert!(max_diff(&bn, &bn_ref) < 1e-7, "{mode:?}: BN statistics must move once");
        }
    }

    #[test]
    fn recomputed_segments_replay_dropout() {
        let n = block_count(0.3);
        let segments = checkpoint_segments(n, Checkpointing::Segments(3)).unwrap();
        let (g_ref, _) = grads(0.3, &segments, false);
        let (g, _) = grads(0.3, &segments, true);
        assert!(max_diff(&g, &g_ref) < 1e-6, "grads differ by {}", max_diff(&g, &g_ref));
    }
}
