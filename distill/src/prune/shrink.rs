//! Physically removing the units that structured pruning masked: a new, narrower student whose
//! weights are the kept rows and columns of the old ones (docs/kd-pitfalls.md P7, P8). A
//! transformer keeps its layers and narrows each feed-forward ([`shrink_feed_forwards`]).
//!
//! Walking the layers in order, each conv/linear layer keeps the rows of its kept units and the
//! columns of the previous layer's kept units; norms keep their kept features; `flatten` expands
//! kept channels into their H*W columns. Because the masked student multiplied removed units'
//! outputs by zero, the shrunk student computes the same logits.
use std::collections::HashMap;

use estimator_wasm::schema::arch::Op;
use estimator_wasm::schema::{Config, MlpKind};
use tch::{nn::VarStore, Device, Kind, Tensor};

use crate::host::error::{DistillError, Result};
use crate::student::transformer::Transformer;
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
    if let Student::Transformer(t) = old_student {
        return shrink_feed_forwards(spec, old, t, kept, device);
    }
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

/// [`shrink`] for a transformer: every feed-forward keeps the rows of `fc1` (gate and up rows
/// under SwiGLU) and the columns of `fc2` of its kept neurons (`kept["blk{i}_mlp.fc1"]`), and
/// `mlp_width` becomes their count; every other variable is copied whole. All layers keep the
/// same count (`kept_units` of one width and sparsity), as the schema's one `mlp_width` needs.
fn shrink_feed_forwards(
    spec: &Config,
    old: &VarStore,
    student: &Transformer,
    kept: &HashMap<String, Vec<i64>>,
    device: Device,
) -> Result<Shrunk> {
    let mut narrow = spec.clone();
    narrow.prune = None;
    let mut gated = false;
    let mut rows: HashMap<String, (Vec<i64>, i64)> = HashMap::new(); // fc1 id -> (kept, width)
    for layer in &student.layers {
        let Op::FeedForward(ff) = &layer.op else { continue };
        gated = ff.mlp == MlpKind::Swiglu;
        let id = format!("{}.fc1", layer.id);
        let k = kept.get(&id).cloned().unwrap_or_else(|| (0..ff.width as i64).collect());
        rows.insert(id, (k, ff.width as i64));
    }
    let counts: std::collections::BTreeSet<usize> = rows.values().map(|(k, _)| k.len()).collect();
    let [width] = counts.into_iter().collect::<Vec<_>>()[..] else {
        return Err(DistillError::Usage(
            "prune: the feed-forward layers kept different widths; one mlp_width cannot describe them".into(),
        ));
    };
    if let Some(t) = narrow.student.transformer.as_mut() {
        t.mlp_width = Some(width as u64);
    }
    let vs = VarStore::new(device);
    let shrunk = Student::new(&vs.root(), &narrow)?;
    let old_vars = old.variables();
    let index = |v: &[i64]| Tensor::from_slice(v).to_device(device);
    tch::no_grad(|| {
        for (name, mut var) in vs.variables() {
            let Some(value) = old_vars.get(&name) else { continue };
            let mut value = value.to_device(device);
            let (block, leaf) = name.split_once('.').unwrap_or((&name, ""));
            if let Some((k, full)) = rows.get(&format!("{block}.fc1")) {
                if leaf.starts_with("fc1.") {
                    let picked: Vec<i64> =
                        if gated { k.iter().copied().chain(k.iter().map(|i| i + full)).collect() } else { k.clone() };
                    value = value.index_select(0, &index(&picked));
                } else if leaf == "fc2.weight" {
                    value = value.index_select(1, &index(k));
                }
            }
            var.copy_(&value);
        }
    });
    Ok(Shrunk { spec: narrow, vs, student: shrunk })
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
        let _rng = crate::torch::test_rng::lock();
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

    /// One-shot structured pruning of [`TINY`]'s 16 feed-forward neurons per layer at
    /// `sparsity`, then the shrink; `edits` as for `transformer::tests::spec`.
    fn prune_and_shrink_a_transformer(edits: &[(&str, &str)], sparsity: f64) -> (Config, Shrunk, Student, VarStore) {
        use crate::prune::{PruneSchedule, Pruner};
        use crate::student::transformer::tests::{build, spec};
        let _rng = crate::torch::test_rng::lock();
        let text = format!("[prune]\nmethod = \"structured\"\nsparsity = {sparsity}\n[kd]");
        let mut edits = edits.to_vec();
        edits.push(("[kd]", &text));
        let spec = spec(&edits);
        let (vs, mut student) = build(&spec);
        let schedule = PruneSchedule { t0: 0, t_end: 0, every: 1, initial: 0.0, target: sparsity };
        let named = crate::student::trainable(&vs);
        let mut pruner = Pruner::new(spec.prune.as_ref().unwrap(), schedule, &student, &named).unwrap();
        assert_eq!(pruner.maybe_prune(0, &mut student), Some(sparsity));
        let shrunk = shrink(&spec, &vs, &student, &pruner.kept_indices(), Device::Cpu).unwrap();
        (spec, shrunk, student, vs)
    }

    #[test]
    fn structured_pruning_removes_a_transformers_weakest_feed_forward_neurons_and_the_shrunk_one_agrees() {
        use crate::student::transformer::tests::batch;
        let _rng = crate::torch::test_rng::lock();
        for (edits, gated) in [(&[][..], false), (&[("norm_position = \"post\"", "mlp = \"swiglu\"")][..], true)] {
            // Before pruning: each neuron's score |fc1 row| * |fc2 column| from the weights.
            let (spec, shrunk, student, vs) = prune_and_shrink_a_transformer(edits, 0.3);
            let vars = vs.variables();
            for i in 1..=2 {
                let fc1 = Vec::<Vec<f32>>::try_from(&vars[&format!("blk{i}_mlp.fc1.weight")]).unwrap();
                let fc2 = Vec::<Vec<f32>>::try_from(&vars[&format!("blk{i}_mlp.fc2.weight").to_string()]).unwrap();
                // floor(16 * 0.3) = 4 neurons removed: their fc1 rows (gate and up) and fc2 columns are 0.
                let zero_cols: Vec<usize> = (0..16).filter(|&n| fc2.iter().all(|row| row[n] == 0.0)).collect();
                assert_eq!(zero_cols.len(), 4, "layer {i}: {zero_cols:?}");
                for &n in &zero_cols {
                    assert!(fc1[n].iter().all(|&w| w == 0.0));
                    assert_eq!(gated, fc1.len() == 32);
                    if gated {
                        assert!(fc1[16 + n].iter().all(|&w| w == 0.0));
                    }
                }
            }
            let t = shrunk.spec.student.transformer.as_ref().unwrap();
            assert_eq!(t.mlp_width, Some(12));
            assert!(shrunk.spec.prune.is_none());
            let shrunk_fc1 = shrunk.vs.variables()["blk1_mlp.fc1.weight"].size();
            assert_eq!(shrunk_fc1, [if gated { 24 } else { 12 }, 8]);
            // The estimator's shrunk student is the one built.
            let planned = estimator_wasm::schema::arch::structured(&spec.student, 0.3);
            let planned = estimator_wasm::schema::arch::layers(&planned, &spec.data).unwrap();
            assert_eq!(shrunk.student.params(), estimator_wasm::schema::arch::param_count(&planned));
            let x = batch(&[5, 12, 1], 12);
            let diff = (shrunk.student.forward(&x, false) - student.forward(&x, false)).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "shrunk vs masked: {diff}");
        }
    }

    #[test]
    fn transformer_neurons_are_ranked_by_what_they_read_times_what_they_write() {
        use crate::student::transformer::tests::{build, spec};
        // Scores from the initial weights, before pruning zeroes them.
        let _rng = crate::torch::test_rng::lock();
        let (_, _, _, vs) = prune_and_shrink_a_transformer(&[], 0.5);
        let (fresh, _) = build(&spec(&[]));
        let (pruned, init) = (vs.variables(), fresh.variables());
        for i in 1..=2 {
            let norms = |name: &str, dim: i64| {
                Vec::<f32>::try_from(&init[&format!("blk{i}_mlp.{name}.weight")].norm_scalaropt_dim(2, [dim], false))
                    .unwrap()
            };
            let (rows, cols) = (norms("fc1", 1), norms("fc2", 0));
            let mut order: Vec<usize> = (0..16).collect();
            order.sort_by(|&a, &b| (rows[a] * cols[a]).total_cmp(&(rows[b] * cols[b])));
            let fc2 = Vec::<Vec<f32>>::try_from(&pruned[&format!("blk{i}_mlp.fc2.weight")]).unwrap();
            let mut removed: Vec<usize> = (0..16).filter(|&n| fc2.iter().all(|row| row[n] == 0.0)).collect();
            let mut weakest = order[..8].to_vec();
            removed.sort();
            weakest.sort();
            assert_eq!(removed, weakest, "layer {i}");
        }
    }
}
