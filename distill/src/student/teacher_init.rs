//! DistilBERT-style initialisation (Sanh et al. 2019, arXiv:1910.01108): a transformer
//! student's embeddings and layers copied from a BERT teacher, student layer `i` from teacher
//! layer `student.init_from_teacher[i]`.
//!
//! The teacher's parameters carry Hugging Face `BertModel` names, possibly under one prefix
//! (`bert.`, `model.`): `embeddings.{word,position,token_type}_embeddings.weight`,
//! `embeddings.LayerNorm.*` and `encoder.layer.{j}.{attention.self.{query,key,value},
//! attention.output.dense, attention.output.LayerNorm, intermediate.dense, output.dense,
//! output.LayerNorm}.*`. They map onto the student's names (`layer_ops.rs`): `embed.tokens`,
//! `embed.positions`, `embed.token_types`, `embed_norm`, and per student layer `blk{i}_attn.qkv`
//! (query | key | value rows concatenated), `.proj`, `.norm`, `blk{i}_mlp.fc1`, `.fc2`, `.norm`.
//! A projection `head` has no teacher counterpart and keeps its own initialisation.
//!
//! A student feed-forward narrower than the teacher's (`mlp_width` F' < F) takes, in each copied
//! layer, the F' neurons with the largest `|w_in| * |w_out|` (the L2 norms of the neuron's row of
//! `intermediate.dense.weight` [F, d] and column of `output.dense.weight` [d, F]): their `fc1`
//! rows and biases and `fc2` columns, in the teacher's order; `fc2`'s bias is whole. This is
//! magnitude pruning of whole neurons, done once before training (docs/kd-pitfalls.md, P7); the
//! distillation then recovers what the dropped neurons carried.
//!
//! A Llama teacher (`embed_tokens.weight`) is mapped by [`super::llama_init`] instead.
//!
//! The heads count is not in the teacher's parameters: the student's `heads` must be the
//! teacher's for a copied layer to compute what the teacher's does, which the schema checks where
//! `[teacher]` describes the teacher (a preset or an arch).
use std::collections::HashMap;

use estimator_wasm::schema::{Config, MlpKind, NormKind, NormPosition};
use tch::nn::VarStore;
use tch::Tensor;

pub use super::init_plan::TeacherInit;
use super::init_plan::{apply_plan, layer_count, strongest_neurons, Take, Transfer, KEY};
use crate::host::error::{DistillError, Result};

/// Copies the teacher's weights `teacher` (name, tensor; e.g. from `Teacher::named_parameters`)
/// into the transformer student of `spec` whose variables are `vs`, under `no_grad`.
///
/// # Errors
/// [`DistillError::Usage`], one line naming the key and the fix, when `spec` is not a post-norm
/// LayerNorm transformer with biases and a standard MLP, the teacher is not a BERT
/// (no `embeddings.word_embeddings.weight`), a teacher layer index is out of range, a teacher
/// parameter the mapping needs is missing, or a shape differs from the student's (a student
/// feed-forward wider than the teacher's included; a narrower one takes the strongest neurons).
pub fn init_from_teacher(vs: &VarStore, spec: &Config, teacher: &[(String, Tensor)]) -> Result<TeacherInit> {
    if let Some(prefix) = super::llama_init::llama_prefix(teacher) {
        return super::llama_init::init_from_llama(vs, spec, teacher, prefix);
    }
    let t = check_student(spec)?;
    let by_name: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let prefix = bert_prefix(teacher)?;
    let teacher_layers = layer_count(teacher, &format!("{prefix}encoder.layer."));
    let mut plan: Vec<Transfer> = Vec::new();
    let embeddings = |leaf: &str| vec![format!("{prefix}embeddings.{leaf}")];
    // a table the teacher adds to every token but the student lacks would change the function
    for (rows, leaf, key) in [
        (t.max_positions, "position_embeddings.weight", "max_positions"),
        (t.token_types, "token_type_embeddings.weight", "token_types"),
    ] {
        if let (0, Some(table)) = (rows, by_name.get(embeddings(leaf)[0].as_str())) {
            return Err(DistillError::Usage(format!(
                "{KEY}: the teacher has {prefix}embeddings.{leaf} but student.transformer.{key} = 0: set {key} = {}",
                table.size()[0]
            )));
        }
    }
    plan.push(("embed.tokens.weight".into(), embeddings("word_embeddings.weight"), Take::All));
    if t.max_positions > 0 {
        plan.push(("embed.positions.weight".into(), embeddings("position_embeddings.weight"), Take::All));
    }
    if t.token_types > 0 {
        plan.push(("embed.token_types.weight".into(), embeddings("token_type_embeddings.weight"), Take::All));
    }
    for leaf in ["weight", "bias"] {
        plan.push((format!("embed_norm.{leaf}"), embeddings(&format!("LayerNorm.{leaf}")), Take::All));
    }
    let mut layer_map = Vec::new();
    let mut mlp_neurons = None;
    for (i, &j) in spec.student.init_from_teacher.iter().enumerate() {
        let j = j as usize;
        if j >= teacher_layers {
            let range = if teacher_layers == 0 { String::new() } else { format!(" (0-{})", teacher_layers - 1) };
            return Err(DistillError::Usage(format!(
                "{KEY}[{i}] = {j}, but the teacher has {teacher_layers} layers{range}: use indices below {teacher_layers}"
            )));
        }
        layer_map.push((i, j));
        let src = |part: &str, leaf: &str| format!("{prefix}encoder.layer.{j}.{part}.{leaf}");
        let (attn, mlp) = (format!("blk{}_attn", i + 1), format!("blk{}_mlp", i + 1));
        let width = t.mlp_width() as i64;
        let neurons = match (
            by_name.get(src("intermediate.dense", "weight").as_str()),
            by_name.get(src("output.dense", "weight").as_str()),
        ) {
            (Some(fc1), Some(fc2)) if width < fc1.size()[0] && fc2.size().get(1) == Some(&fc1.size()[0]) => {
                mlp_neurons = Some((width, fc1.size()[0]));
                Some(strongest_neurons(fc1, fc2, width))
            }
            _ => None,
        };
        let select = |dim: usize| match (&neurons, dim) {
            (Some(keep), 0) => Take::Rows(keep.shallow_clone()),
            (Some(keep), _) => Take::Cols(keep.shallow_clone()),
            (None, _) => Take::All,
        };
        for leaf in ["weight", "bias"] {
            let qkv = ["query", "key", "value"].map(|p| src(&format!("attention.self.{p}"), leaf));
            plan.push((format!("{attn}.qkv.{leaf}"), qkv.to_vec(), Take::All));
            plan.push((format!("{attn}.proj.{leaf}"), vec![src("attention.output.dense", leaf)], Take::All));
            plan.push((format!("{attn}.norm.{leaf}"), vec![src("attention.output.LayerNorm", leaf)], Take::All));
            plan.push((format!("{mlp}.fc1.{leaf}"), vec![src("intermediate.dense", leaf)], select(0)));
            let fc2 = if leaf == "weight" { select(1) } else { Take::All };
            plan.push((format!("{mlp}.fc2.{leaf}"), vec![src("output.dense", leaf)], fc2));
            plan.push((format!("{mlp}.norm.{leaf}"), vec![src("output.LayerNorm", leaf)], Take::All));
        }
    }

    let names = format!(
        "Hugging Face BertModel names: {prefix}embeddings.{{word,position,token_type}}_embeddings.weight, \
         {prefix}embeddings.LayerNorm.*, {prefix}encoder.layer.N.{{attention.self.{{query,key,value}},\
         attention.output.{{dense,LayerNorm}},intermediate.dense,output.{{dense,LayerNorm}}}}.*"
    );
    let (tensors, elements, kept) = apply_plan(vs, &by_name, &plan, &names)?;
    Ok(TeacherInit { prefix, teacher_layers, layer_map, tensors, elements, kept, mlp_neurons, head_fit: None })
}

/// The student's transformer table, refused unless it is BERT's kind of layer.
fn check_student(spec: &Config) -> Result<&estimator_wasm::schema::TransformerSpec> {
    let usage = |m: &str| Err(DistillError::Usage(format!("{KEY} copies a BERT teacher: {m}")));
    let Some(t) = spec.student.transformer.as_ref() else {
        return usage("it needs student.family = \"transformer\" with a [student.transformer] table");
    };
    if t.norm_position != NormPosition::Post {
        return usage("set student.transformer.norm_position = \"post\" (BERT's layers are post-norm)");
    }
    if t.norm != NormKind::Layer {
        return usage("set student.transformer.norm = \"layer\" (BERT uses LayerNorm)");
    }
    if t.mlp != MlpKind::Standard {
        return usage("set student.transformer.mlp = \"standard\" (BERT's feed-forward is not SwiGLU)");
    }
    if !t.bias {
        return usage("set student.transformer.bias = true (BERT's projections have biases)");
    }
    if t.kv_heads() != t.heads {
        return usage("remove student.transformer.kv_heads (BERT has no grouped-query attention)");
    }
    Ok(t)
}

/// The prefix before the teacher's `embeddings.word_embeddings.weight`.
fn bert_prefix(teacher: &[(String, Tensor)]) -> Result<String> {
    const WORDS: &str = "embeddings.word_embeddings.weight";
    if let Some((name, _)) = teacher.iter().find(|(n, _)| n.ends_with(WORDS)) {
        return Ok(name[..name.len() - WORDS.len()].to_string());
    }
    let some: Vec<&str> = teacher.iter().take(3).map(|(n, _)| n.as_str()).collect();
    Err(DistillError::Usage(format!(
        "{KEY} needs a BERT-style transformer teacher (a parameter named ...{WORDS}), but the teacher's \
         parameters are named {}: remove {KEY}",
        if some.is_empty() { "nothing (it has none)".to_string() } else { format!("{} ...", some.join(", ")) }
    )))
}
