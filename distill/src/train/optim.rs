//! AdamW and SGD over tensors we own, so that their state (moments, momentum buffers, step)
//! can be checkpointed and restored exactly; tch's libtorch optimisers cannot export it.
//!
//! The update rules follow `torch/optim/adamw.py` and `torch/optim/sgd.py` (single-tensor
//! paths; AdamW through ATen's fused kernel, the update of `AdamW(fused=True)`). Gradients are passed in explicitly (from `Tensor::run_backward`, i.e.
//! `torch.autograd.grad`) rather than accumulated into `.grad`, so between steps no gradient is
//! resident: the same memory profile as PyTorch's `zero_grad(set_to_none=True)`. Weight decay applies to conv and linear weights only; biases and norm parameters are
//! not decayed (the usual practice; set weight_decay = 0 to disable it everywhere).
use estimator_wasm::schema::OptimizerKind as Kind_;
use tch::{Device, Kind, Tensor};

use crate::config::TrainSettings;
use crate::host::error::Result;
use crate::torch::shim::{fused_adamw, AdamW};

/// What one fused AdamW call shares: weight decay on or off, dtype, device.
type Group = (bool, Kind, Device);

/// One trainable parameter with its optimiser state.
#[derive(Debug)]
struct Slot {
    name: String,
    param: Tensor,
    decay: bool,
    /// AdamW first moment / SGD momentum buffer (fp32, like the parameter).
    m: Option<Tensor>,
    /// AdamW second moment.
    v: Option<Tensor>,
}

impl Slot {
    /// This parameter's weight decay under the run's `weight_decay`.
    fn decay_of(&self, weight_decay: f64) -> f64 {
        if self.decay {
            weight_decay
        } else {
            0.0
        }
    }
}

/// AdamW's update of one parameter operator by operator (`torch/optim/adamw.py`'s
/// single-tensor path), at optimiser step `step` (1 for the first), under `no_grad`; its
/// moments must exist. The fused kernel computes the same update in one pass.
fn adamw_step(slot: &Slot, g: &Tensor, step: u64, h: AdamW) {
    let (m, v) = (slot.m.as_ref().expect("first moment"), slot.v.as_ref().expect("second moment"));
    let ([b1, b2], t) = (h.betas, step as i32);
    if h.weight_decay > 0.0 {
        let _ = slot.param.shallow_clone().g_mul_scalar_(1.0 - h.lr * h.weight_decay);
    }
    let _ = m.shallow_clone().lerp_(g, 1.0 - b1);
    let _ = v.shallow_clone().g_mul_scalar_(b2).addcmul_(g, &(g * (1.0 - b2)));
    let (bc1, bc2_sqrt) = (1.0 - b1.powi(t), (1.0 - b2.powi(t)).sqrt());
    let denom = v.sqrt() / bc2_sqrt + h.eps;
    let _ = slot.param.shallow_clone().addcdiv_(&(m * (-h.lr / bc1)), &denom);
}

#[derive(Debug)]
pub struct Optimizer {
    kind: Kind_,
    slots: Vec<Slot>,
    betas: [f64; 2],
    eps: f64,
    momentum: f64,
    nesterov: bool,
    weight_decay: f64,
    /// Optimiser steps taken (AdamW's bias-correction t).
    pub step: u64,
}

impl Optimizer {
    /// An optimiser over `params` (name -> parameter tensor sharing storage with the model).
    /// Names ending in `.weight` of conv/linear layers (2-D or 4-D) are weight-decayed; the kind
    /// and its hyperparameters are `train`'s.
    pub fn new(params: Vec<(String, Tensor)>, train: &TrainSettings) -> Optimizer {
        let mut params = params;
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = params
            .into_iter()
            .map(|(name, param)| {
                let decay = name.ends_with(".weight") && param.dim() >= 2;
                Slot { name, param, decay, m: None, v: None }
            })
            .collect();
        Optimizer {
            kind: train.optimizer,
            slots,
            betas: train.betas,
            eps: train.eps,
            momentum: train.momentum,
            nesterov: train.nesterov,
            weight_decay: train.weight_decay,
            step: 0,
        }
    }

    /// The parameters in a fixed order (sorted by name): the `inputs` of `run_backward`, whose
    /// gradients [`Optimizer::step`] takes in the same order.
    pub fn params(&self) -> Vec<&Tensor> {
        self.slots.iter().map(|s| &s.param).collect()
    }

    /// One update at learning rate `lr` with `grads[i]` the gradient of `params()[i]`.
    /// Undefined gradients leave their parameter untouched.
    ///
    /// AdamW runs ATen's fused kernel ([`crate::torch::shim::fused_adamw`]): one call per group of
    /// parameters sharing a decay, dtype and device, instead of ~9 operators per tensor, which
    /// dominate the update of a small student. A non-contiguous parameter (none that the trainer
    /// builds) takes the operator-by-operator update, [`adamw_step`].
    ///
    /// # Errors
    /// [`DistillError::Torch`](crate::host::error::DistillError::Torch) when libtorch rejects the fused
    /// call.
    pub fn step(&mut self, lr: f64, grads: &[Tensor]) -> Result<()> {
        assert_eq!(grads.len(), self.slots.len(), "one gradient per parameter");
        self.step += 1;
        let (step, wd) = (self.step, self.weight_decay);
        let live = self.slots.iter_mut().zip(grads).filter(|(_, g)| g.defined());
        match self.kind {
            Kind_::Adamw => {
                let h = AdamW { lr, betas: self.betas, eps: self.eps, weight_decay: 0.0 };
                let mut groups: Vec<(Group, Vec<(&Slot, &Tensor)>)> = Vec::new();
                for (slot, g) in live {
                    // laid out as the parameter (a gradient may come transposed)
                    let zeros = || slot.param.zeros_like();
                    slot.m.get_or_insert_with(zeros);
                    slot.v.get_or_insert_with(zeros);
                    let slot: &Slot = slot;
                    if !slot.param.is_contiguous() {
                        tch::no_grad(|| adamw_step(slot, g, step, AdamW { weight_decay: slot.decay_of(wd), ..h }));
                        continue;
                    }
                    let key = (slot.decay, slot.param.kind(), slot.param.device());
                    match groups.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, members)) => members.push((slot, g)),
                        None => groups.push((key, vec![(slot, g)])),
                    }
                }
                for ((decay, _, _), members) in groups {
                    let moments = |which: fn(&Slot) -> &Option<Tensor>| -> Vec<&Tensor> {
                        members.iter().map(|(s, _)| which(s).as_ref().expect("made above")).collect()
                    };
                    let params: Vec<&Tensor> = members.iter().map(|(s, _)| &s.param).collect();
                    let grads: Vec<&Tensor> = members.iter().map(|(_, g)| *g).collect();
                    let h = AdamW { weight_decay: if decay { wd } else { 0.0 }, ..h };
                    tch::no_grad(|| fused_adamw(&params, &grads, &moments(|s| &s.m), &moments(|s| &s.v), step, h))?;
                }
            }
            Kind_::Sgd => {
                let (momentum, nesterov) = (self.momentum, self.nesterov);
                tch::no_grad(|| {
                    for (slot, g) in live {
                        let decay = slot.decay_of(wd);
                        let mut d = if decay > 0.0 { g + &slot.param * decay } else { g.shallow_clone() };
                        if momentum > 0.0 {
                            let buf = match slot.m.as_mut() {
                                Some(buf) => {
                                    let _ = buf.g_mul_scalar_(momentum).g_add_(&d);
                                    buf
                                }
                                None => slot.m.insert(d.detach().copy()),
                            };
                            d = if nesterov { &d + &*buf * momentum } else { buf.shallow_clone() };
                        }
                        let _ = slot.param.g_add_(&(d * (-lr)));
                    }
                });
            }
        }
        Ok(())
    }

    /// Named state tensors for a checkpoint: `<param>.m`, `<param>.v` (those that exist).
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for slot in &self.slots {
            let name = &slot.name;
            if let Some(m) = &slot.m {
                out.push((format!("{name}.m"), m.shallow_clone()));
            }
            if let Some(v) = &slot.v {
                out.push((format!("{name}.v"), v.shallow_clone()));
            }
        }
        out
    }

    /// Restores state written by [`Optimizer::state`] (tensors are copied onto each parameter's
    /// device and kind); unknown names are ignored, missing ones stay cold.
    pub fn load_state(&mut self, step: u64, tensors: &[(String, Tensor)]) {
        self.step = step;
        for (key, t) in tensors {
            let Some((name, which)) = key.rsplit_once('.') else {
                continue;
            };
            if let Some(slot) = self.slots.iter_mut().find(|s| s.name == name) {
                let t = t.to_device(slot.param.device()).to_kind(Kind::Float);
                match which {
                    "m" => slot.m = Some(t),
                    "v" => slot.v = Some(t),
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn spec() -> TrainSettings {
        let text = "[data]\ninput_shape=[4]\nclasses=5\n[student]\nfamily=\"mlp\"\n[train]\nweight_decay = 0.1\n";
        TrainSettings::resolved(&estimator_wasm::Config::from_toml_str(text).unwrap().train, 1)
    }

    /// The fused update equals the operator-by-operator one over 5 steps, for a decayed weight,
    /// an undecayed bias, a weight whose gradient arrives transposed (not row-major: the fused
    /// kernel walks storage order) and a parameter left without a gradient.
    #[test]
    fn fused_adamw_equals_the_operator_by_operator_update() {
        let _guard = crate::torch::test_rng::lock();
        tch::manual_seed(5);
        let opts = (Kind::Float, Device::Cpu);
        let init = [("a.weight", vec![6, 5]), ("a.bias", vec![6]), ("b.weight", vec![4, 3]), ("c.weight", vec![2, 2])]
            .map(|(n, shape)| (n.to_string(), Tensor::randn(shape, opts)));
        let named = || init.iter().map(|(n, t)| (n.clone(), t.copy())).collect::<Vec<_>>();
        let mut fused = Optimizer::new(named(), &spec());
        // The reference: the same slots, updated by adamw_step alone.
        let mut reference = Optimizer::new(named(), &spec());
        for step in 1..=5u64 {
            // sorted names: a.bias, a.weight, b.weight, c.weight
            let grads = [
                Tensor::randn([6], opts),
                Tensor::randn([6, 5], opts),
                Tensor::randn([3, 4], opts).tr(),
                Tensor::new(),
            ];
            assert!(!grads[2].is_contiguous());
            let lr = 0.05 * step as f64;
            fused.step(lr, &grads).unwrap();
            reference.step += 1;
            for (slot, g) in reference.slots.iter_mut().zip(&grads).filter(|(_, g)| g.defined()) {
                slot.m.get_or_insert_with(|| slot.param.zeros_like());
                slot.v.get_or_insert_with(|| slot.param.zeros_like());
                let h = AdamW { lr, betas: [0.9, 0.999], eps: 1e-8, weight_decay: slot.decay_of(0.1) };
                tch::no_grad(|| adamw_step(slot, g, step, h));
            }
        }
        let mut sorted: Vec<&(String, Tensor)> = init.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut moved = 0f64;
        for ((a, b), (name, t0)) in fused.params().iter().zip(reference.params()).zip(sorted) {
            let diff = (*a - b).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "{name}: fused differs from the reference by {diff}");
            moved = moved.max((*a - t0).abs().max().double_value(&[]));
            if name == "c.weight" {
                assert_eq!((*a - t0).abs().max().double_value(&[]), 0.0, "no gradient, no update");
            }
        }
        assert!(moved > 0.1, "the parameters moved by {moved}");
        assert_eq!(fused.state().len(), 6, "moments for the three parameters that got gradients");
    }
}
