//! What copying a teacher's weights into a student is made of, whatever the teacher's naming
//! (BERT: [`super::teacher_init`], Llama: [`super::llama_init`]): a plan of copies
//! ([`Transfer`]: a student variable, the teacher tensors it takes, which part of them),
//! applied all or none ([`apply_plan`]), the strongest-neuron rule of a narrower feed-forward,
//! and what was copied ([`TeacherInit`]).
use std::collections::{BTreeSet, HashMap};

use tch::nn::VarStore;
use tch::{Kind, Tensor};

use crate::host::error::{DistillError, Result};

/// What [`super::init_from_teacher`] copied, for the run's report.
#[derive(Debug, Clone, PartialEq)]
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
    /// The factorised head fitted to the teacher's (`student.transformer.head_rank`).
    pub head_fit: Option<super::head_fit::HeadFit>,
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
        let head = match &self.head_fit {
            Some(fit) => format!(
                "; head: rank {} fitted on {} tokens, keeping {:.1}% of the variance of the teacher head's logits",
                fit.rank,
                fit.tokens,
                100.0 * fit.kept
            ),
            None => String::new(),
        };
        format!(
            "student: initialised from the teacher ({} tensors, {} values): embeddings and layers {} of its {}{neurons}{head}{kept}",
            self.tensors,
            self.elements,
            layers.join(" "),
            self.teacher_layers
        )
    }
}

pub const KEY: &str = "student.init_from_teacher";

/// Which part of the teacher's tensor(s) a student variable takes.
pub enum Take {
    /// All of it (several tensors concatenated on dim 0, for `qkv`).
    All,
    /// The rows listed (int64 [F']): `fc1` of a narrower feed-forward.
    Rows(Tensor),
    /// The columns listed (int64 [F']): `fc2` of a narrower feed-forward.
    Cols(Tensor),
}

/// One copy of a plan: the student variable, the teacher tensors (concatenated on dim 0) and
/// which part of them it takes.
pub type Transfer = (String, Vec<String>, Take);

/// Copies each `(student variable, teacher tensors, part)` of `plan` from `by_name` into the
/// variables of `vs`, all or none, under `no_grad`; returns (variables filled, their elements,
/// the student variables left as initialised, sorted). `names` describes the teacher names the
/// plan expects, for the message when one is missing.
///
/// # Errors
/// [`DistillError::Usage`]: a teacher tensor missing, a student variable missing, a shape that
/// differs.
pub fn apply_plan(
    vs: &VarStore,
    by_name: &HashMap<&str, &Tensor>,
    plan: &[Transfer],
    names: &str,
) -> Result<(usize, u64, Vec<String>)> {
    let missing: Vec<&String> =
        plan.iter().flat_map(|(_, src, _)| src).filter(|n| !by_name.contains_key(n.as_str())).collect();
    if let Some(first) = missing.first() {
        let more = if missing.len() > 1 { format!(" and {} more", missing.len() - 1) } else { String::new() };
        return Err(DistillError::Usage(format!(
            "{KEY}: the teacher has no parameter {first}{more} (expected {names}): export the teacher with those names or remove {KEY}"
        )));
    }
    let vars = vs.variables();
    let mut copies = Vec::with_capacity(plan.len());
    for (dst, src, take) in plan {
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
    Ok((plan.len(), elements, kept))
}

/// The `width` neurons of a feed-forward `fc1` [F, d], `fc2` [d, F] with the largest
/// `|fc1[n, :]| * |fc2[:, n]|` (L2 norms), as int64 indices [width] in ascending order.
pub fn strongest_neurons(fc1: &Tensor, fc2: &Tensor, width: i64) -> Tensor {
    // the norms in fp32 whatever the teacher's kind (a 16-bit teacher's weights widen exactly)
    let norm = |t: &Tensor, dim: i64| t.to_kind(Kind::Float).norm_scalaropt_dim(2, [dim], false);
    let score = norm(fc1, 1) * norm(fc2, 0);
    let (_, keep) = score.topk(width, 0, true, true);
    keep.sort(0, false).0
}

/// The one line for a teacher tensor whose shape is not the student's, naming the key to change.
pub fn shape_message(dst: &str, src: &str, teacher: &[i64], student: &[i64]) -> String {
    let (t, s) = (format!("{teacher:?}"), format!("{student:?}"));
    let fix = match dst {
        "embed.tokens.weight" | "head.weight" if teacher.first() != student.first() => {
            crate::inputs::vocab_check::vocab_table_fix(src, teacher, student)
        }
        "embed.tokens.weight" => format!("set student.transformer.d_model = {} (the teacher's width)", teacher[1]),
        "embed.positions.weight" => format!("set student.transformer.max_positions = {}", teacher[0]),
        "embed.token_types.weight" => format!("set student.transformer.token_types = {}", teacher[0]),
        d if d.ends_with("fc1.weight") || d.ends_with("fc1.bias") => {
            // SwiGLU's fc1 is the teacher's gate and up rows
            let width = if src.contains("gate_proj") { teacher[0] / 2 } else { teacher[0] };
            format!("set student.transformer.mlp_width = {width} or less (fewer keeps the strongest neurons)")
        }
        d if d.ends_with("qkv.weight") && teacher.get(1) == student.get(1) => {
            let kv_rows = (teacher[0] - teacher[1]) / 2;
            format!(
                "the teacher's keys and values have {kv_rows} rows each: set student.transformer.kv_heads so that kv_heads * d_model / heads = {kv_rows}"
            )
        }
        _ => {
            format!("set student.transformer.d_model = {} (the teacher's width)", teacher.last().copied().unwrap_or(0))
        }
    };
    format!("{KEY}: teacher {src} is {t} but student {dst} is {s}: {fix}")
}

/// Layers of a teacher whose layer parameters are named `{head}N.` (`encoder.layer.`,
/// `layers.`): one more than the largest `N`, 0 for none.
pub fn layer_count(teacher: &[(String, Tensor)], head: &str) -> usize {
    teacher
        .iter()
        .filter_map(|(n, _)| n.strip_prefix(head)?.split('.').next()?.parse::<usize>().ok())
        .map(|j| j + 1)
        .max()
        .unwrap_or(0)
}
