//! AdamW and SGD over tensors we own, so that their state (moments, momentum buffers, step)
//! can be checkpointed and restored exactly; tch's libtorch optimisers cannot export it.
//!
//! The update rules follow `torch/optim/adamw.py` and `torch/optim/sgd.py` (single-tensor
//! paths). Gradients are passed in explicitly (from `Tensor::run_backward`, i.e.
//! `torch.autograd.grad`) rather than accumulated into `.grad`, so between steps no gradient is
//! resident: the same memory profile as PyTorch's `zero_grad(set_to_none=True)`. Weight decay applies to conv and linear weights only; biases and norm parameters are
//! not decayed (the usual practice; set weight_decay = 0 to disable it everywhere).
use estimator_wasm::schema::{OptimizerKind as Kind_, TrainSpec};
use tch::{Kind, Tensor};

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
    /// Names ending in `.weight` of conv/linear layers (2-D or 4-D) are weight-decayed.
    pub fn new(params: Vec<(String, Tensor)>, spec: &TrainSpec) -> Optimizer {
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
            kind: spec.optimizer,
            slots,
            betas: spec.betas,
            eps: spec.eps,
            momentum: spec.momentum,
            nesterov: spec.nesterov,
            weight_decay: spec.weight_decay,
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
    pub fn step(&mut self, lr: f64, grads: &[Tensor]) {
        assert_eq!(grads.len(), self.slots.len(), "one gradient per parameter");
        self.step += 1;
        let t = self.step as i32;
        let [b1, b2] = self.betas;
        let (eps, wd, momentum, nesterov, kind) =
            (self.eps, self.weight_decay, self.momentum, self.nesterov, self.kind);
        tch::no_grad(|| {
            for (slot, g) in self.slots.iter_mut().zip(grads) {
                if !g.defined() {
                    continue;
                }
                let decay = if slot.decay { wd } else { 0.0 };
                match kind {
                    Kind_::Adamw => {
                        let m = slot.m.get_or_insert_with(|| g.zeros_like());
                        let v = slot.v.get_or_insert_with(|| g.zeros_like());
                        if decay > 0.0 {
                            let _ = slot.param.g_mul_scalar_(1.0 - lr * decay);
                        }
                        let _ = m.lerp_(g, 1.0 - b1);
                        let _ = v.g_mul_scalar_(b2);
                        let _ = v.addcmul_(g, &(g * (1.0 - b2)));
                        let bc1 = 1.0 - b1.powi(t);
                        let bc2_sqrt = (1.0 - b2.powi(t)).sqrt();
                        let denom = v.sqrt() / bc2_sqrt + eps;
                        let _ = slot.param.addcdiv_(&(&*m * (-lr / bc1)), &denom);
                    }
                    Kind_::Sgd => {
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
                }
            }
        });
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
