//! Physically removing the units that structured pruning masked: a new, narrower student whose
//! weights are the kept rows and columns of the old ones (docs/kd-pitfalls.md P7, P8).
//!
//! Walking the layers in order, each conv/linear layer keeps the rows of its kept units and the
//! columns of the previous layer's kept units; norms keep their kept features; `flatten` expands
//! kept channels into their H*W columns. Because the masked student multiplied removed units'
//! outputs by zero, the shrunk student computes the same logits.
use std::collections::HashMap;

use estimator_wasm::schema::arch::Op;
use estimator_wasm::schema::Config;
use tch::{nn::VarStore, Device, Kind, Tensor};

use crate::error::Result;
use crate::student::Student;

/// The narrower spec, its variables and the student built on them.
pub struct Shrunk {
    pub spec: Config,
    pub vs: VarStore,
    pub student: Student,
}

/// Builds the student of `spec` without the removed units, on `device`, from `old` (the masked
/// student's variables). `kept[layer]` lists the kept unit indices of each pruned layer. The
/// narrower spec has no `[prune]`: it describes the exported student, which training that cfg
/// must not prune again.
pub fn shrink(
    spec: &Config,
    old: &VarStore,
    old_student: &Student,
    kept: &HashMap<String, Vec<i64>>,
    device: Device,
) -> Result<Shrunk> {
    let mut narrow = spec.clone();
    let count = |id: String, width: u64| kept.get(&id).map(|k| k.len() as u64).unwrap_or(width);
    narrow.student.channels =
        spec.student.channels.iter().enumerate().map(|(i, &c)| count(format!("conv{}", i + 1), c)).collect();
    narrow.student.hidden =
        spec.student.hidden.iter().enumerate().map(|(j, &w)| count(format!("fc{}", j + 1), w)).collect();
    narrow.prune = None;

    let vs = VarStore::new(device);
    let student = Student::new(&vs.root(), &narrow)?;
    let old_vars = old.variables();
    let mut new_vars = vs.variables();
    let index = |v: &[i64]| Tensor::from_slice(v).to_device(device);
    let mut current: Option<Tensor> = None; // kept features of the current activation
    tch::no_grad(|| {
        for block in old_student.layered().into_iter().flat_map(|s| &s.blocks) {
            let id = &block.layer.id;
            let select = |leaf: &str, out: Option<&Tensor>, inp: Option<&Tensor>| {
                let name = format!("{id}.{leaf}");
                let Some(t) = old_vars.get(&name) else { return (name, None) };
                let mut t = t.to_device(device);
                if let Some(o) = out {
                    t = t.index_select(0, o);
                }
                if let Some(i) = inp {
                    t = t.index_select(1, i);
                }
                (name, Some(t))
            };
            let mut copies = Vec::new();
            match block.layer.op {
                Op::Conv2d { .. } | Op::Linear { .. } => {
                    let out = kept.get(id).map(|k| index(k));
                    copies.push(select("weight", out.as_ref(), current.as_ref()));
                    copies.push(select("bias", out.as_ref(), None));
                    current = out;
                }
                Op::BatchNorm { .. } | Op::LayerNorm { .. } => {
                    for leaf in ["weight", "bias", "running_mean", "running_var"] {
                        copies.push(select(leaf, current.as_ref(), None));
                    }
                }
                Op::Flatten => current = current.as_ref().map(|c| flattened(c, &block.layer.input)),
                _ => {}
            }
            for (name, value) in copies {
                if let (Some(value), Some(var)) = (value, new_vars.get_mut(&name)) {
                    var.copy_(&value);
                }
            }
        }
    });
    Ok(Shrunk { spec: narrow, vs, student })
}

/// Zeroes, in the masked student's variables `vs`, every weight column that reads a removed
/// unit, so that the dense student computes the masked function without its unit masks (as
/// `dense/student.safetensors` is loaded). The masks zero a removed unit's weights, bias and
/// norm parameters, so without the mask its activation emits f(0) downstream: 0 for relu, gelu,
/// silu, tanh and leaky_relu, but 0.5 for sigmoid, which the next conv/linear layer reads
/// unless its columns for that unit are zero. The masked function is unchanged (it fed those
/// columns zeros). `kept[layer]` lists the kept unit indices of each pruned layer.
pub fn zero_dead_inputs(vs: &VarStore, student: &Student, kept: &HashMap<String, Vec<i64>>) {
    let vars = vs.variables();
    let mut dead: Option<Tensor> = None; // removed features of the current activation
    tch::no_grad(|| {
        for block in student.layered().into_iter().flat_map(|s| &s.blocks) {
            let id = &block.layer.id;
            match block.layer.op {
                Op::Conv2d { .. } | Op::Linear { .. } => {
                    let Some(weight) = vars.get(&format!("{id}.weight")) else { continue };
                    if let Some(d) = dead.as_ref().filter(|d| d.numel() > 0) {
                        let _ = weight.shallow_clone().index_fill_(1, d, 0.0);
                    }
                    dead = kept.get(id).map(|k| {
                        let keep = Tensor::from_slice(k).to_device(weight.device());
                        let mut removed = Tensor::ones([weight.size()[0]], (Kind::Bool, weight.device()));
                        let _ = removed.index_fill_(0, &keep, 0);
                        removed.nonzero().flatten(0, -1)
                    });
                }
                Op::Flatten => dead = dead.as_ref().map(|d| flattened(d, &block.layer.input)),
                _ => {}
            }
        }
    });
}

/// The columns after `flatten` of channel indices `channels` [n] over an input [C, H, W]:
/// channel c becomes columns c*H*W .. (c+1)*H*W. Other inputs keep their indices.
fn flattened(channels: &Tensor, input: &[u64]) -> Tensor {
    let [_, h, w] = input else { return channels.shallow_clone() };
    let hw = (h * w) as i64;
    (channels.unsqueeze(1) * hw + Tensor::arange(hw, (Kind::Int64, channels.device())).unsqueeze(0)).flatten(0, -1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shrunk_spec_is_the_narrower_student_without_the_pruning_request() {
        let _rng = crate::test_rng::lock();
        let text = "[data]\ninput_shape = [1, 8, 8]\nclasses = 5\n[student]\nfamily = \"cnn\"\nchannels = [4, 6]\n\
                    hidden = [8]\n[prune]\nmethod = \"structured\"\nsparsity = 0.5\n";
        let spec = Config::from_toml_str(text).unwrap();
        let vs = VarStore::new(Device::Cpu);
        let student = Student::new(&vs.root(), &spec).unwrap();
        let kept = HashMap::from([("conv1".to_string(), vec![0, 2]), ("fc1".to_string(), vec![1, 3, 5, 7])]);
        let shrunk = shrink(&spec, &vs, &student, &kept, Device::Cpu).unwrap();
        let mut expected = spec.clone();
        expected.student.channels = vec![2, 6];
        expected.student.hidden = vec![4];
        expected.prune = None;
        assert_eq!(shrunk.spec, expected);
        assert!(!shrunk.spec.to_toml_string().contains("[prune]"), "{}", shrunk.spec.to_toml_string());
    }
}
