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

#[cfg(test)]
mod tests {
    //! Tests of [`init_from_teacher`]: the name mapping on a synthetic BERT state, each refusal's
    //! message, and a student with a PyTorch BERT teacher's shape reproducing its output.
    use std::collections::HashMap;

    use estimator_wasm::schema::Precision;
    use tch::{Device, Kind, Tensor};

    use super::{init_from_teacher, TeacherInit};
    use crate::inputs::teacher::Teacher;
    use crate::student::transformer::tests::{batch, build, python, spec};

    /// Sizes of a synthetic BERT.
    struct Bert {
        prefix: &'static str,
        layers: usize,
        d: i64,
        width: i64,
    }

    /// A Hugging Face `BertModel` state (vocab 40, 16 positions, 2 token types) of random values.
    fn fake_bert(b: &Bert) -> Vec<(String, Tensor)> {
        let _guard = crate::torch::test_rng::lock();
        tch::manual_seed(17);
        let p = b.prefix;
        let r = |shape: &[i64]| Tensor::randn(shape, (Kind::Float, Device::Cpu));
        let mut v = vec![
            (format!("{p}embeddings.word_embeddings.weight"), r(&[40, b.d])),
            (format!("{p}embeddings.position_embeddings.weight"), r(&[16, b.d])),
            (format!("{p}embeddings.token_type_embeddings.weight"), r(&[2, b.d])),
            (format!("{p}embeddings.LayerNorm.weight"), r(&[b.d])),
            (format!("{p}embeddings.LayerNorm.bias"), r(&[b.d])),
        ];
        for j in 0..b.layers {
            let linear = |name: &str, out: i64, inp: i64| {
                let n = format!("{p}encoder.layer.{j}.{name}");
                [(format!("{n}.weight"), r(&[out, inp])), (format!("{n}.bias"), r(&[out]))]
            };
            let norm = |name: &str| {
                let n = format!("{p}encoder.layer.{j}.{name}.LayerNorm");
                [(format!("{n}.weight"), r(&[b.d])), (format!("{n}.bias"), r(&[b.d]))]
            };
            for name in ["query", "key", "value"] {
                v.extend(linear(&format!("attention.self.{name}"), b.d, b.d));
            }
            v.extend(linear("attention.output.dense", b.d, b.d));
            v.extend(norm("attention.output"));
            v.extend(linear("intermediate.dense", b.width, b.d));
            v.extend(linear("output.dense", b.d, b.width));
            v.extend(norm("output"));
        }
        v.push((format!("{p}pooler.dense.weight"), r(&[b.d, b.d])));
        v
    }

    const TINY_BERT: Bert = Bert { prefix: "bert.", layers: 3, d: 8, width: 16 };
    const INIT: (&str, &str) = ("[student]\n", "[student]\ninit_from_teacher = [1, 0]\n");

    #[test]
    fn copies_embeddings_and_the_chosen_teacher_layers() {
        let teacher = fake_bert(&TINY_BERT);
        let t: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let spec = spec(&[INIT, ("classes = 8", "classes = 6")]);
        let (vs, _) = build(&spec);
        let head_before = vs.variables()["head.weight"].copy();
        let got = init_from_teacher(&vs, &spec, &teacher).unwrap();
        // embeddings 3 + embed_norm 2, then 12 per layer; head 8 * 6 + 6 kept
        let per_layer = (3 * 72 + 64 + 8 + 16) + (128 + 16 + 128 + 8 + 16);
        let want = TeacherInit {
            prefix: "bert.".into(),
            teacher_layers: 3,
            layer_map: vec![(0, 1), (1, 0)],
            tensors: 5 + 2 * 12,
            elements: (58 * 8 + 16 + 2 * per_layer) as u64,
            kept: vec!["head.bias".into(), "head.weight".into()],
            mlp_neurons: None,
            head_fit: None,
        };
        assert_eq!(got, want);
        let vars = vs.variables();
        let layer = |j: usize, leaf: &str| t[format!("bert.encoder.layer.{j}.{leaf}").as_str()].shallow_clone();
        let qkv = Tensor::cat(&["query", "key", "value"].map(|p| layer(1, &format!("attention.self.{p}.weight"))), 0);
        assert!(vars["blk1_attn.qkv.weight"].equal(&qkv), "student layer 1 from teacher layer 1, rows q | k | v");
        assert!(vars["blk2_attn.qkv.bias"]
            .equal(&Tensor::cat(&["query", "key", "value"].map(|p| layer(0, &format!("attention.self.{p}.bias"))), 0)));
        for (student, teacher) in [
            ("blk2_attn.proj.weight", "attention.output.dense.weight"),
            ("blk2_attn.norm.bias", "attention.output.LayerNorm.bias"),
            ("blk2_mlp.fc1.weight", "intermediate.dense.weight"),
            ("blk2_mlp.fc2.bias", "output.dense.bias"),
            ("blk2_mlp.norm.weight", "output.LayerNorm.weight"),
        ] {
            assert!(vars[student].equal(&layer(0, teacher)), "{student}");
        }
        assert!(vars["embed.positions.weight"].equal(t["bert.embeddings.position_embeddings.weight"]));
        assert!(vars["embed_norm.weight"].equal(t["bert.embeddings.LayerNorm.weight"]));
        assert!(vars["head.weight"].equal(&head_before), "the projection has no teacher counterpart");
        assert!(vars["embed.tokens.weight"].requires_grad(), "still trainable");
    }

    fn refusal(edits: &[(&str, &str)], teacher: &[(String, Tensor)]) -> String {
        let spec = spec(edits);
        let (vs, _) = build(&spec);
        init_from_teacher(&vs, &spec, teacher).unwrap_err().to_string()
    }

    #[test]
    fn refusals_name_the_key_and_the_fix() {
        let bert = fake_bert(&TINY_BERT);
        let e = refusal(&[("[student]\n", "[student]\ninit_from_teacher = [0, 5]\n")], &bert);
        assert_eq!(
            e, "student.init_from_teacher[1] = 5, but the teacher has 3 layers (0-2): use indices below 3",
            "{e}"
        );
        let wide = fake_bert(&Bert { d: 12, ..TINY_BERT });
        let e = refusal(&[INIT], &wide);
        assert!(e.contains("embed.tokens.weight is [40, 8]") && e.contains("d_model = 12"), "{e}");
        let e = refusal(&[INIT], &fake_bert(&Bert { width: 12, ..TINY_BERT }));
        assert!(
            e.contains("intermediate.dense.weight is [12, 8]")
                && e.contains("set student.transformer.mlp_width = 12 or less"),
            "a feed-forward wider than the teacher's has nothing to copy: {e}"
        );
        let gone = "bert.encoder.layer.0.output.LayerNorm.bias";
        let missing: Vec<(String, Tensor)> =
            bert.iter().filter(|(n, _)| n != gone).map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
        let e = refusal(&[INIT], &missing);
        assert!(e.contains(&format!("the teacher has no parameter {gone}")) && e.contains("encoder.layer.N"), "{e}");
        let mlp = [("fc1.weight".to_string(), Tensor::zeros([4, 2], (Kind::Float, Device::Cpu)))];
        let e = refusal(&[INIT], &mlp);
        assert!(e.contains("needs a BERT-style transformer teacher") && e.contains("fc1.weight"), "{e}");
        let e = refusal(&[INIT, ("norm_position = \"post\"", "norm_position = \"pre\"")], &bert);
        assert!(e.contains("norm_position = \"post\""), "{e}");
        let e = refusal(&[INIT, ("token_types = 2", "token_types = 0")], &bert);
        assert!(e.contains("student.transformer.token_types = 0: set token_types = 2"), "{e}");
    }

    /// A student feed-forward narrower than the teacher's takes the neurons with the largest
    /// |w_in| * |w_out|: teacher layer 0's input weights of neurons 1, 5, 9, 13 are scaled up
    /// tenfold (the strongest), its even neurons have zero output weights (the weakest). A student
    /// with mlp_width 4 of 16 holds exactly the teacher's rows, columns and biases of those four; one
    /// with 8 keeps the odd neurons and so computes what the full-width copy does.
    #[test]
    fn a_narrower_feed_forward_takes_the_strongest_neurons() {
        let mut teacher = fake_bert(&TINY_BERT);
        let stronger: Vec<i64> = (0..16).map(|n| if n % 4 == 1 { 10 } else { 1 }).collect();
        let odd: Vec<i64> = (0..16).map(|n| n % 2).collect();
        for (name, t) in teacher.iter_mut() {
            if name == "bert.encoder.layer.0.intermediate.dense.weight" {
                *t = &*t * Tensor::from_slice(&stronger).to_kind(Kind::Float).unsqueeze(1);
            } else if name == "bert.encoder.layer.0.output.dense.weight" {
                *t = &*t * Tensor::from_slice(&odd).to_kind(Kind::Float).unsqueeze(0);
            }
        }
        let by_name: HashMap<&str, &Tensor> = teacher.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let spec =
            spec(&[("[student]\n", "[student]\ninit_from_teacher = [0, 2]\n"), ("mlp_width = 16", "mlp_width = 4")]);
        let (vs, _) = build(&spec);
        let got = init_from_teacher(&vs, &spec, &teacher).unwrap();
        assert_eq!(got.mlp_neurons, Some((4, 16)));
        assert!(got.summary().contains("feed-forward neurons: the strongest 4 of 16 per layer"), "{}", got.summary());
        let vars = vs.variables();
        let layer0 = |leaf: &str| by_name[format!("bert.encoder.layer.0.{leaf}").as_str()].shallow_clone();
        let keep = Tensor::from_slice(&[1i64, 5, 9, 13]);
        assert!(vars["blk1_mlp.fc1.weight"].equal(&layer0("intermediate.dense.weight").index_select(0, &keep)));
        assert!(vars["blk1_mlp.fc1.bias"].equal(&layer0("intermediate.dense.bias").index_select(0, &keep)));
        assert!(vars["blk1_mlp.fc2.weight"].equal(&layer0("output.dense.weight").index_select(1, &keep)));
        assert!(vars["blk1_mlp.fc2.bias"].equal(&layer0("output.dense.bias")), "the output bias is whole");
        assert_eq!(vars["blk2_mlp.fc1.weight"].size(), [4, 8], "teacher layer 2 chooses its own four");

        // the dropped neurons wrote nothing, so the narrow student computes what the full-width one
        // copied from the same teacher layers does
        let full_spec = crate::student::transformer::tests::spec(&[
            ("[student]\n", "[student]\ninit_from_teacher = [0]\n"),
            ("layers = 2", "layers = 1"),
        ]);
        let narrow_spec = crate::student::transformer::tests::spec(&[
            ("[student]\n", "[student]\ninit_from_teacher = [0]\n"),
            ("layers = 2", "layers = 1"),
            ("mlp_width = 16", "mlp_width = 8"),
        ]);
        let (full_vs, full) = build(&full_spec);
        let (narrow_vs, narrow) = build(&narrow_spec);
        init_from_teacher(&full_vs, &full_spec, &teacher).unwrap();
        init_from_teacher(&narrow_vs, &narrow_spec, &teacher).unwrap();
        let input = batch(&[6, 3, 5], 6);
        let (a, b) = tch::no_grad(|| (full.forward(&input, false), narrow.forward(&input, false)));
        let diff = (&a - &b).abs().max().double_value(&[]);
        assert!(diff < 1e-6 && a.abs().max().double_value(&[]) > 0.1, "full vs narrow: {diff}");
    }

    /// A 2-layer BERT written with PyTorch modules under Hugging Face's names (random weights,
    /// LayerNorms too), mean-pooled and L2-normalised as all-MiniLM-L6-v2, traced to `path`.
    const PYTORCH_BERT: &str = r#"
import math, sys, torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
V, P, D, H, W, L = 40, 16, 8, 2, 16, 2
def ln(): return nn.LayerNorm(D, eps=1e-12)
class M(nn.Module):
    def __init__(self, **kids):
        super().__init__()
        for k, v in kids.items(): setattr(self, k, v)
def layer():
    self_ = M(query=nn.Linear(D, D), key=nn.Linear(D, D), value=nn.Linear(D, D))
    attention = M(output=M(dense=nn.Linear(D, D), LayerNorm=ln()))
    attention.add_module("self", self_)
    return M(attention=attention, intermediate=M(dense=nn.Linear(D, W)), output=M(dense=nn.Linear(W, D), LayerNorm=ln()))
class Teacher(nn.Module):
    def __init__(self):
        super().__init__()
        emb = M(word_embeddings=nn.Embedding(V, D), position_embeddings=nn.Embedding(P, D),
                token_type_embeddings=nn.Embedding(2, D), LayerNorm=ln())
        self.bert = M(embeddings=emb, encoder=M(layer=nn.ModuleList([layer() for _ in range(L)])))
        for p in self.parameters(): nn.init.normal_(p, 0.0, 0.5)
    def forward(self, ids, mask):
        e = self.bert.embeddings
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        h = e.LayerNorm(e.word_embeddings(ids) + e.position_embeddings(pos) + e.token_type_embeddings(torch.zeros_like(ids)))
        bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for blk in self.bert.encoder.layer:
            a = blk.attention
            split = lambda x: x.view(x.shape[0], x.shape[1], H, D // H).transpose(1, 2)
            q, k, v = split(getattr(a, "self").query(h)), split(getattr(a, "self").key(h)), split(getattr(a, "self").value(h))
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H) + bias, -1)
            o = (p @ v).transpose(1, 2).reshape(h.shape)
            h = a.output.LayerNorm(a.output.dense(o) + h)
            h = blk.output.LayerNorm(blk.output.dense(F.gelu(blk.intermediate.dense(h))) + h)
        m = mask.unsqueeze(-1).float()
        return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=-1)
ids = torch.randint(1, V, (3, 6)); mask = torch.ones(3, 6, dtype=torch.long)
torch.jit.trace(Teacher().eval(), (ids, mask)).save(sys.argv[1])
"#;

    /// THE check of the init: a student of the teacher's full shape, initialised from all its layers
    /// in order, computes the teacher's sentence embeddings (padded batch) to 1e-5.
    #[test]
    fn a_full_size_student_initialised_from_a_pytorch_bert_reproduces_it() {
        let Some(python) = python() else { return };
        let dir = tempfile::tempdir().unwrap();
        let pt = dir.path().join("teacher.pt");
        let out = std::process::Command::new(python).args(["-c", PYTORCH_BERT, pt.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let teacher = Teacher::load(&pt, None, Precision::Fp32, Device::Cpu).unwrap();
        let spec = spec(&[("[student]\n", "[student]\ninit_from_teacher = [0, 1]\n")]);
        let (vs, student) = build(&spec);
        let got = init_from_teacher(&vs, &spec, &teacher.named_parameters().unwrap()).unwrap();
        assert_eq!((got.prefix.as_str(), got.teacher_layers, got.tensors, got.kept.len()), ("bert.", 2, 29, 0));
        let input = batch(&[6, 3, 1, 5], 6);
        let want = teacher.output(&input).unwrap();
        let have = tch::no_grad(|| student.forward(&input, false));
        let diff = (&have - &want).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "student and teacher differ by {diff}");
        assert!(want.abs().max().double_value(&[]) > 0.1, "a non-trivial embedding");
    }

    /// THE check against the shared fixture (`tests/fixtures/text`, made by
    /// `make_text_fixtures.py`): its 2-layer BERT teacher, copied into a student of its full shape
    /// (the fixture student's cfg with `layers = 2`, `init_from_teacher = [0, 1]`), gives the
    /// teacher's TorchScript output and Python's stored embeddings of the fixture's sentences
    /// (padded into one batch) to 1e-5.
    #[test]
    fn the_fixture_teacher_is_reproduced_by_a_student_of_its_shape() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/text");
        let text = std::fs::read_to_string(dir.join("text-student.toml")).unwrap();
        let text = text
            .replace("layers = 1\n", "layers = 2\n")
            .replace("[student]\n", "[student]\ninit_from_teacher = [0, 1]\n");
        let spec = estimator_wasm::schema::Config::from_toml_str(&text).unwrap();
        let teacher = Teacher::load(&dir.join("text-teacher.pt"), None, Precision::Fp32, Device::Cpu).unwrap();
        let (vs, student) = build(&spec);
        let init = init_from_teacher(&vs, &spec, &teacher.named_parameters().unwrap()).unwrap();
        assert_eq!((init.teacher_layers, init.tensors, init.kept.len()), (2, 29, 0));

        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
        let rows: Vec<Vec<i64>> = serde_json::from_value(expected["ids"].clone()).unwrap();
        let s = rows.iter().map(Vec::len).max().unwrap();
        let pad = |row: &Vec<i64>, fill: fn(i64) -> i64| -> Vec<i64> {
            (0..s).map(|i| row.get(i).map_or(0, |&id| fill(id))).collect()
        };
        let flat = |f: fn(i64) -> i64| Tensor::from_slice(&rows.iter().flat_map(|r| pad(r, f)).collect::<Vec<_>>());
        let input = crate::inputs::data::ModelInput {
            x: flat(|id| id).reshape([rows.len() as i64, s as i64]),
            mask: Some(flat(|_| 1).reshape([rows.len() as i64, s as i64])),
        };
        let want: Vec<Vec<f32>> = serde_json::from_value(expected["embeddings"].clone()).unwrap();
        let want = Tensor::from_slice(&want.concat()).reshape([rows.len() as i64, -1]);
        let have = tch::no_grad(|| student.forward(&input, false));
        let of_teacher = teacher.output(&input).unwrap();
        let diff = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
        assert_eq!(have.size(), [3, 32]);
        assert!(diff(&have, &of_teacher) < 1e-5, "student vs the teacher's TorchScript: {}", diff(&have, &of_teacher));
        assert!(diff(&have, &want) < 1e-5, "student vs expected.json: {}", diff(&have, &want));
    }
}
