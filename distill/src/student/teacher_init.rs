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
//! The heads count is not in the teacher's parameters: the student's `heads` must be the
//! teacher's for a copied layer to compute what the teacher's does.
use std::collections::{BTreeSet, HashMap};

use estimator_wasm::schema::{Config, MlpKind, NormKind, NormPosition};
use tch::nn::VarStore;
use tch::Tensor;

use crate::error::{DistillError, Result};

/// What [`init_from_teacher`] copied, for the run's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeacherInit {
    /// The prefix before the teacher's `embeddings.` names (`""` for a bare `BertModel`).
    pub prefix: String,
    /// Encoder layers of the teacher.
    pub teacher_layers: usize,
    /// `(student layer, teacher layer)`, 0-based, in student order.
    pub layer_map: Vec<(usize, usize)>,
    /// Student variables filled from the teacher.
    pub tensors: usize,
    /// Their elements.
    pub elements: u64,
    /// Student variables left as initialised (e.g. `head.weight`), in name order.
    pub kept: Vec<String>,
    /// `(kept, of)`: feed-forward neurons per copied layer when the student's are fewer than
    /// the teacher's (`None` when all are copied).
    pub mlp_neurons: Option<(i64, i64)>,
}

impl TeacherInit {
    /// One progress line: what the student took from the teacher.
    pub fn summary(&self) -> String {
        let layers: Vec<String> = self.layer_map.iter().map(|(s, t)| format!("{}<-{t}", s + 1)).collect();
        let kept =
            if self.kept.is_empty() { String::new() } else { format!("; kept random: {}", self.kept.join(", ")) };
        let neurons = match self.mlp_neurons {
            Some((kept, of)) => format!("; feed-forward neurons: the strongest {kept} of {of} per layer"),
            None => String::new(),
        };
        format!(
            "student: initialised from the teacher ({} tensors, {} values): embeddings and layers {} of its {}{neurons}{kept}",
            self.tensors,
            self.elements,
            layers.join(" "),
            self.teacher_layers
        )
    }
}

const KEY: &str = "student.init_from_teacher";

/// Which part of the teacher's tensor(s) a student variable takes.
enum Take {
    /// All of it (several tensors concatenated on dim 0, for `qkv`).
    All,
    /// The rows listed (int64 [F']): `fc1` of a narrower feed-forward.
    Rows(Tensor),
    /// The columns listed (int64 [F']): `fc2` of a narrower feed-forward.
    Cols(Tensor),
}

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
    let t = check_student(spec)?;
    let by_name: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let prefix = bert_prefix(teacher)?;
    let teacher_layers = layer_count(teacher, &prefix);
    let mut plan: Vec<(String, Vec<String>, Take)> = Vec::new();
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

    let missing: Vec<&String> =
        plan.iter().flat_map(|(_, src, _)| src).filter(|n| !by_name.contains_key(n.as_str())).collect();
    if let Some(first) = missing.first() {
        let more = if missing.len() > 1 { format!(" and {} more", missing.len() - 1) } else { String::new() };
        return Err(DistillError::Usage(format!(
            "{KEY}: the teacher has no parameter {first}{more} (expected Hugging Face BertModel names: \
             {prefix}embeddings.{{word,position,token_type}}_embeddings.weight, {prefix}embeddings.LayerNorm.*, \
             {prefix}encoder.layer.N.{{attention.self.{{query,key,value}},attention.output.{{dense,LayerNorm}},\
             intermediate.dense,output.{{dense,LayerNorm}}}}.*): export the teacher with those names or remove {KEY}"
        )));
    }
    let vars = vs.variables();
    let mut copies = Vec::with_capacity(plan.len());
    for (dst, src, take) in &plan {
        let target = vars.get(dst).ok_or_else(|| {
            DistillError::Usage(format!("{KEY}: the student has no variable {dst} to copy {} into", src.join(" + ")))
        })?;
        let parts: Vec<&Tensor> = src.iter().map(|n| by_name[n.as_str()]).collect();
        let whole = if parts.len() == 1 { parts[0].shallow_clone() } else { Tensor::cat(&parts, 0) };
        let value = match take {
            Take::All => whole,
            Take::Rows(keep) => whole.index_select(0, keep),
            Take::Cols(keep) => whole.index_select(1, keep),
        };
        if value.size() != target.size() {
            return Err(DistillError::Usage(shape_message(dst, &src.join(" + "), &value.size(), &target.size())));
        }
        copies.push((target.shallow_clone(), value));
    }
    let mut elements = 0u64;
    tch::no_grad(|| {
        for (target, value) in &mut copies {
            target.copy_(value);
            elements += target.numel() as u64;
        }
    });
    let copied: BTreeSet<&str> = plan.iter().map(|(dst, _, _)| dst.as_str()).collect();
    let mut kept: Vec<String> = vars.keys().filter(|n| !copied.contains(n.as_str())).cloned().collect();
    kept.sort();
    Ok(TeacherInit { prefix, teacher_layers, layer_map, tensors: plan.len(), elements, kept, mlp_neurons })
}

/// The `width` neurons of a feed-forward `fc1` [F, d], `fc2` [d, F] with the largest
/// `|fc1[n, :]| * |fc2[:, n]|` (L2 norms), as int64 indices [width] in ascending order.
fn strongest_neurons(fc1: &Tensor, fc2: &Tensor, width: i64) -> Tensor {
    let score = fc1.norm_scalaropt_dim(2, [1], false) * fc2.norm_scalaropt_dim(2, [0], false);
    let (_, keep) = score.topk(width, 0, true, true);
    keep.sort(0, false).0
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

/// Encoder layers of the teacher: one more than the largest `N` of `{prefix}encoder.layer.N.`.
fn layer_count(teacher: &[(String, Tensor)], prefix: &str) -> usize {
    let head = format!("{prefix}encoder.layer.");
    teacher
        .iter()
        .filter_map(|(n, _)| n.strip_prefix(&head)?.split('.').next()?.parse::<usize>().ok())
        .map(|j| j + 1)
        .max()
        .unwrap_or(0)
}

/// The one line for a teacher tensor whose shape is not the student's, naming the key to change.
fn shape_message(dst: &str, src: &str, teacher: &[i64], student: &[i64]) -> String {
    let (t, s) = (format!("{teacher:?}"), format!("{student:?}"));
    let fix = match dst {
        "embed.tokens.weight" => format!("set student.transformer.vocab = {} and d_model = {}", teacher[0], teacher[1]),
        "embed.positions.weight" => format!("set student.transformer.max_positions = {}", teacher[0]),
        "embed.token_types.weight" => format!("set student.transformer.token_types = {}", teacher[0]),
        d if d.ends_with("fc1.weight") || d.ends_with("fc1.bias") => {
            format!("set student.transformer.mlp_width = {} or less (fewer keeps the strongest neurons)", teacher[0])
        }
        _ => {
            format!("set student.transformer.d_model = {} (the teacher's width)", teacher.last().copied().unwrap_or(0))
        }
    };
    format!("{KEY}: teacher {src} is {t} but student {dst} is {s}: {fix}")
}
