//! A language-model student initialised from a Llama teacher (dispatched to by
//! [`super::teacher_init::init_from_teacher`]) (SmolLM2, Llama, Mistral): the
//! token embedding and student layer `i` from teacher layer `student.init_from_teacher[i]`.
//!
//! The teacher's parameters carry Hugging Face `LlamaModel` names, possibly under one prefix
//! (`model.`): `embed_tokens.weight`, `layers.{j}.{input_layernorm, self_attn.{q,k,v,o}_proj,
//! post_attention_layernorm, mlp.{gate,up,down}_proj}.weight`, `norm.weight`, and an untied
//! `lm_head.weight`. They map onto the student's names (`layer_ops.rs`): `embed.tokens`, per
//! student layer `blk{i}_attn.norm`, `.qkv` (q | k | v rows), `.proj`, `blk{i}_mlp.norm`, `.fc1`
//! (gate | up rows), `.fc2`, then `final_norm`, and an untied student `head` from `lm_head`
//! (or, for a tied teacher, the embedding); a factorised student head (`head_rank`) is fitted to
//! that by [`super::head_fit`] instead.
//!
//! A narrower student feed-forward (`mlp_width` F' < F) takes, in each copied layer, the F'
//! neurons with the largest `|[gate_n, up_n]| * |down[:, n]|` (the L2 norms of what the neuron
//! reads and writes, the rule `crate::prune` uses for SwiGLU), in the teacher's order.
//!
//! Rotary positions are in the teacher's code, not its parameters: the student's `rope_theta`
//! must be the teacher's (SmolLM2: 100000) for a copied layer to compute what the teacher's does.
use std::collections::HashMap;

use estimator_wasm::schema::{Config, MlpKind, NormKind, NormPosition, TransformerSpec};
use tch::nn::VarStore;
use tch::Tensor;

use super::init_plan::{apply_plan, layer_count, strongest_neurons, Take, TeacherInit, Transfer, KEY};
use crate::host::error::{DistillError, Result};

const EMBED: &str = "embed_tokens.weight";

/// The prefix before the teacher's `embed_tokens.weight`, when it is a Llama.
pub fn llama_prefix(teacher: &[(String, Tensor)]) -> Option<String> {
    teacher.iter().find(|(n, _)| n.ends_with(EMBED)).map(|(n, _)| n[..n.len() - EMBED.len()].to_string())
}

/// [`super::init_from_teacher`] for a Llama teacher whose names start with `prefix`.
///
/// # Errors
/// [`DistillError::Usage`], one line naming the key and the fix, when the student is not a
/// pre-norm RMSNorm SwiGLU transformer without biases, a layer index is out of range, a
/// teacher parameter is missing or a shape differs from the student's.
pub fn init_from_llama(
    vs: &VarStore,
    spec: &Config,
    teacher: &[(String, Tensor)],
    prefix: String,
) -> Result<TeacherInit> {
    let t = check_student(spec)?;
    let by_name: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let teacher_layers = layer_count(teacher, &format!("{prefix}layers."));
    let name = |leaf: &str| format!("{prefix}{leaf}");
    let mut plan: Vec<Transfer> = vec![("embed.tokens.weight".into(), vec![name(EMBED)], Take::All)];
    let (mut layer_map, mut mlp_neurons) = (Vec::new(), None);
    for (i, &j) in spec.student.init_from_teacher.iter().enumerate() {
        let j = j as usize;
        if j >= teacher_layers {
            return Err(DistillError::Usage(format!(
                "{KEY}[{i}] = {j}, but the teacher has {teacher_layers} layers: use indices below {teacher_layers}"
            )));
        }
        layer_map.push((i, j));
        let src = |leaf: &str| name(&format!("layers.{j}.{leaf}.weight"));
        let (attn, mlp) = (format!("blk{}_attn", i + 1), format!("blk{}_mlp", i + 1));
        let qkv = ["q", "k", "v"].map(|p| src(&format!("self_attn.{p}_proj"))).to_vec();
        if let Some(k) = by_name.get(qkv[1].as_str()) {
            check_kv_heads(t, k.size())?;
        }
        plan.push((format!("{attn}.norm.weight"), vec![src("input_layernorm")], Take::All));
        plan.push((format!("{attn}.qkv.weight"), qkv, Take::All));
        plan.push((format!("{attn}.proj.weight"), vec![src("self_attn.o_proj")], Take::All));
        plan.push((format!("{mlp}.norm.weight"), vec![src("post_attention_layernorm")], Take::All));
        let gate_up = vec![src("mlp.gate_proj"), src("mlp.up_proj")];
        let width = t.mlp_width() as i64;
        let (fc1, fc2) = match (
            by_name.get(gate_up[0].as_str()),
            by_name.get(gate_up[1].as_str()),
            by_name.get(src("mlp.down_proj").as_str()),
        ) {
            (Some(gate), Some(up), Some(down)) if width < gate.size()[0] => {
                let full = gate.size()[0];
                mlp_neurons = Some((width, full));
                let keep = strongest_neurons(&Tensor::cat(&[*gate, *up], 1), down, width);
                let both = Tensor::cat(&[keep.shallow_clone(), &keep + full], 0);
                (Take::Rows(both), Take::Cols(keep))
            }
            _ => (Take::All, Take::All),
        };
        plan.push((format!("{mlp}.fc1.weight"), gate_up, fc1));
        plan.push((format!("{mlp}.fc2.weight"), vec![src("mlp.down_proj")], fc2));
    }
    plan.push(("final_norm.weight".into(), vec![name("norm.weight")], Take::All));
    if !t.tie_embeddings && t.head_rank.is_none() {
        plan.push(("head.weight".into(), vec![teacher_head_name(&by_name, &prefix)], Take::All));
    }
    let names = format!(
        "Hugging Face LlamaModel names: {prefix}{EMBED}, {prefix}layers.N.{{input_layernorm,self_attn.{{q,k,v,o}}_proj,\
         post_attention_layernorm,mlp.{{gate,up,down}}_proj}}.weight, {prefix}norm.weight"
    );
    let (tensors, elements, kept) = apply_plan(vs, &by_name, &plan, &names)?;
    Ok(TeacherInit { prefix, teacher_layers, layer_map, tensors, elements, kept, mlp_neurons, head_fit: None })
}

/// The teacher's output head [vocab, d]: its `lm_head.weight` under the prefix or at the top
/// (Hugging Face's `LlamaForCausalLM` keeps `lm_head` beside `model.`), or for a tied teacher
/// the embedding; `None` when it has neither (not a Llama). A factorised student head
/// (`head_rank`) is fitted to it ([`super::head_fit`]).
pub fn teacher_head<'a>(teacher: &'a [(String, Tensor)], prefix: &str) -> Option<&'a Tensor> {
    let by_name: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let name = teacher_head_name(&by_name, prefix);
    teacher.iter().find(|(n, _)| *n == name).map(|(_, t)| t)
}

/// The name of [`teacher_head`]: `{prefix}lm_head.weight`, `lm_head.weight`, else the embedding.
fn teacher_head_name(by_name: &HashMap<&str, &Tensor>, prefix: &str) -> String {
    let untied = [format!("{prefix}lm_head.weight"), "lm_head.weight".to_string()];
    untied.into_iter().find(|n| by_name.contains_key(n.as_str())).unwrap_or_else(|| format!("{prefix}{EMBED}"))
}

/// Refuses a student whose keys and values are not as wide as the teacher's `k_proj` [rows, d]
/// (`kv_heads` heads of `d_model / heads` each), naming the `kv_heads` that fits.
fn check_kv_heads(t: &TransformerSpec, k_proj: Vec<i64>) -> Result<()> {
    let (d, heads, kv) = (t.d_model as i64, t.heads as i64, t.kv_heads() as i64);
    let (rows, head_width) = (k_proj[0], d / heads.max(1));
    if k_proj.get(1) != Some(&d) || rows == kv * head_width {
        return Ok(()); // another width is named by the shape check, by d_model
    }
    let fix = if rows % head_width == 0 && heads % (rows / head_width) == 0 {
        format!("set student.transformer.kv_heads = {}", rows / head_width)
    } else {
        format!("no kv_heads divides them into heads of {head_width} (d_model / heads): choose heads so that d_model / heads divides {rows}")
    };
    Err(DistillError::Usage(format!(
        "{KEY}: the teacher's keys and values have {rows} rows each, and the student's {kv} key/value head(s) of {head_width} give {}: {fix}",
        kv * head_width
    )))
}

/// The student's transformer table, refused unless it is Llama's kind of layer.
fn check_student(spec: &Config) -> Result<&TransformerSpec> {
    let usage = |m: &str| Err(DistillError::Usage(format!("{KEY} copies a Llama teacher: {m}")));
    let Some(t) = spec.student.transformer.as_ref() else {
        return usage("it needs student.family = \"transformer\" with a [student.transformer] table");
    };
    if t.norm_position != NormPosition::Pre {
        return usage("set student.transformer.norm_position = \"pre\" (Llama's layers are pre-norm)");
    }
    if t.norm != NormKind::Rms {
        return usage("set student.transformer.norm = \"rms\" (Llama uses RMSNorm)");
    }
    if t.mlp != MlpKind::Swiglu {
        return usage("set student.transformer.mlp = \"swiglu\" (Llama's feed-forward is SwiGLU)");
    }
    if t.bias {
        return usage("set student.transformer.bias = false (Llama's projections have no biases)");
    }
    if t.token_types > 0 || t.max_positions > 0 {
        return usage(
            "set student.transformer.token_types = 0 and max_positions = 0 (Llama adds nothing to its token embedding)",
        );
    }
    if t.rope_theta.is_none() {
        return usage(
            "set student.transformer.rope_theta to the teacher's rotary base (SmolLM2: 100000, Llama 2: 10000)",
        );
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hugging Face's `LlamaForCausalLM` names its layers under `model.` and its untied head
    /// `lm_head.weight` at the top: the head is found there, not replaced by the embedding.
    #[test]
    fn the_untied_head_is_found_beside_the_prefix() {
        let t = |n: &str| (n.to_string(), Tensor::zeros([2, 2], (tch::Kind::Float, tch::Device::Cpu)));
        fn names(v: &[(String, Tensor)]) -> HashMap<&str, &Tensor> {
            v.iter().map(|(n, t)| (n.as_str(), t)).collect()
        }
        let hf = vec![t("model.embed_tokens.weight"), t("model.norm.weight"), t("lm_head.weight")];
        assert_eq!(llama_prefix(&hf).as_deref(), Some("model."));
        assert_eq!(teacher_head_name(&names(&hf), "model."), "lm_head.weight");
        let nested = vec![t("model.embed_tokens.weight"), t("model.lm_head.weight")];
        assert_eq!(teacher_head_name(&names(&nested), "model."), "model.lm_head.weight");
        let tied = vec![t("embed_tokens.weight"), t("norm.weight")];
        assert_eq!(teacher_head_name(&names(&tied), ""), "embed_tokens.weight");
        let bert = vec![t("embeddings.word_embeddings.weight")];
        assert!(teacher_head(&bert, "").is_none());
    }
}
