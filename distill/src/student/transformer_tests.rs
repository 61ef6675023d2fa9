//! Tests of the transformer student: names and shapes against the estimator's list, the forward
//! against a hand-written reference, padding invariance, pooling, autocast, checkpointing, and
//! the traced TorchScript on other input shapes.
use std::collections::HashMap;

use estimator_wasm::schema::arch::{self, split};
use estimator_wasm::schema::{Config, Precision};
use tch::nn::VarStore;
use tch::{CModule, Device, Kind, Tensor};

use super::{l2_normalize, mean_pool};
use crate::inputs::data::ModelInput;
use crate::student::Student;

/// A 2-layer post-norm sentence encoder (BERT's layout) at toy sizes: vocab 40, d 8, 2 heads.
pub const TINY: &str = "[data]\ntokenizer = \"tokenizer.json\"\ninput_shape = [12]\nclasses = 8\n\
    [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
    [student.transformer]\nvocab = 40\nlayers = 2\nd_model = 8\nheads = 2\nmlp_width = 16\n\
    max_positions = 16\ntoken_types = 2\nnorm_position = \"post\"\nnorm_eps = 1e-12\n\
    head = \"embedding\"\nnormalize = true\n[kd]\nobjective = \"embedding_mse\"\n";

/// [`TINY`] with each `(from, to)` replaced.
pub fn spec(edits: &[(&str, &str)]) -> Config {
    let text = edits.iter().fold(TINY.to_string(), |t, (from, to)| {
        assert!(t.contains(from), "{from}");
        t.replace(from, to)
    });
    Config::from_toml_str(&text).unwrap()
}

/// The student of `spec` built from seed 5 (under the RNG lock, as other tests reseed).
pub fn build(spec: &Config) -> (VarStore, Student) {
    let _guard = crate::torch::test_rng::lock();
    tch::manual_seed(5);
    let vs = VarStore::new(Device::Cpu);
    let student = Student::new(&vs.root(), spec).unwrap();
    (vs, student)
}

/// Token ids [rows, s] (deterministic, in [1, 40)) and a mask keeping `lengths[r]` tokens of
/// row `r`, padding ids set to 0.
pub fn batch(lengths: &[i64], s: i64) -> ModelInput {
    let rows = lengths.len() as i64;
    let ids = (Tensor::arange(rows * s, (Kind::Int64, Device::Cpu)) * 7 + 3).remainder(39) + 1;
    let ids = ids.reshape([rows, s]);
    let positions = Tensor::arange(s, (Kind::Int64, Device::Cpu)).unsqueeze(0);
    let mask = positions.lt_tensor(&Tensor::from_slice(lengths).unsqueeze(1)).to_kind(Kind::Int64);
    ModelInput { x: ids * &mask, mask: Some(mask) }
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Edits of [`TINY`] (see [`spec`]).
type Edits = &'static [(&'static str, &'static str)];

const VARIANTS: [Edits; 6] = [
    &[],
    &[("norm_position = \"post\"", "norm_position = \"pre\""), ("classes = 8", "classes = 6")],
    &[("head = \"embedding\"", "pooling = \"cls\"\nattention = \"flash\"\nhead = \"embedding\"")],
    &[
        ("head = \"embedding\"\nnormalize = true", "head = \"lm\"\ntie_embeddings = true"),
        ("classes = 8", "classes = 40"),
        ("objective = \"embedding_mse\"", "objective = \"logits\""),
    ],
    &[("head = \"embedding\"\nnormalize = true", "head = \"classifier\""), ("classes = 8", "classes = 3")],
    &[("norm_position = \"post\"", "norm = \"rms\"\nmlp = \"swiglu\"\nkv_heads = 1\nbias = false")],
];

#[test]
fn variables_are_named_and_shaped_as_the_estimator_lists_them() {
    for (k, edits) in VARIANTS.iter().enumerate() {
        let spec = spec(edits);
        let layers = arch::layers(&spec.student, &spec.data).unwrap();
        let (vs, student) = build(&spec);
        let mut want: Vec<(String, Vec<i64>)> = layers
            .iter()
            .flat_map(|l| {
                let shapes = l.op.param_shapes();
                shapes.into_iter().map(|(leaf, s)| (format!("{}.{leaf}", l.id), s.iter().map(|&d| d as i64).collect()))
            })
            .collect();
        want.sort();
        let mut got: Vec<(String, Vec<i64>)> = vs.variables().into_iter().map(|(n, t)| (n, t.size())).collect();
        got.sort();
        assert_eq!(got, want, "variant {k}");
        let numel: i64 = got.iter().map(|(_, s)| s.iter().product::<i64>()).sum();
        assert_eq!((student.params(), numel as u64), (arch::param_count(&layers), arch::param_count(&layers)));
        assert_eq!(student.block_count(), layers.len(), "variant {k}: one block per layer");
        assert_eq!(student.block_of("blk2_mlp.fc1.weight"), layers.iter().position(|l| l.id == "blk2_mlp"));
    }
    // vocab 40, 16 positions, 2 types at d 8; embed_norm 16; per layer attn 8*24+24 + 8*8+8 + 16,
    // mlp 8*16+16 + 16*8+8 + 16: hand count of TINY
    let per_layer = (8 * 24 + 24 + 64 + 8 + 16) + (128 + 16 + 128 + 8 + 16);
    assert_eq!(build(&spec(&[])).1.params(), (58 * 8 + 16 + 2 * per_layer) as u64);
}

/// The forward written out independently of the student's code: explicit LayerNorm, erf GELU,
/// a loop over heads with -inf masking, sum/count pooling.
fn reference(vars: &HashMap<String, Tensor>, spec: &Config, input: &ModelInput) -> Tensor {
    let t = spec.student.transformer.as_ref().unwrap();
    let (post, eps, heads) = (t.norm_position.name() == "post", t.norm_eps, t.heads as i64);
    let v = |n: &str| vars[n].shallow_clone();
    let ln = |x: &Tensor, id: &str| {
        let mu = x.mean_dim(-1, true, Kind::Float);
        let var = (x - &mu).square().mean_dim(-1, true, Kind::Float);
        (x - mu) / (var + eps).sqrt() * v(&format!("{id}.weight")) + v(&format!("{id}.bias"))
    };
    let lin = |x: &Tensor, id: &str| x.matmul(&v(&format!("{id}.weight")).tr()) + v(&format!("{id}.bias"));
    let (ids, mask) = (&input.x, input.mask.as_ref().unwrap());
    let (b, s) = (ids.size()[0], ids.size()[1]);
    let d = t.d_model as i64;
    let mut h = v("embed.tokens.weight").index_select(0, &ids.flatten(0, -1)).reshape([b, s, d])
        + v("embed.positions.weight").narrow(0, 0, s).unsqueeze(0)
        + v("embed.token_types.weight").get(0);
    if post {
        h = ln(&h, "embed_norm");
    }
    let dh = d / heads;
    for i in 1..=t.layers {
        let (attn, mlp) = (format!("blk{i}_attn"), format!("blk{i}_mlp"));
        let y = if post { h.shallow_clone() } else { ln(&h, &format!("{attn}.norm")) };
        let qkv = lin(&y, &format!("{attn}.qkv"));
        let outs: Vec<Tensor> = (0..heads)
            .map(|j| {
                let part = |k: i64| qkv.narrow(2, k * d + j * dh, dh);
                let scores = part(0).bmm(&part(1).transpose(1, 2)) / (dh as f64).sqrt();
                let scores = scores.masked_fill(&mask.eq(0).unsqueeze(1), f64::NEG_INFINITY);
                scores.softmax(-1, Kind::Float).bmm(&part(2))
            })
            .collect();
        let a = lin(&Tensor::cat(&outs, 2), &format!("{attn}.proj"));
        h = if post { ln(&(h + a), &format!("{attn}.norm")) } else { &h + a };
        let y = if post { h.shallow_clone() } else { ln(&h, &format!("{mlp}.norm")) };
        let u = lin(&y, &format!("{mlp}.fc1"));
        let f = lin(&(&u * 0.5 * ((&u / 2f64.sqrt()).erf() + 1.0)), &format!("{mlp}.fc2"));
        h = if post { ln(&(h + f), &format!("{mlp}.norm")) } else { &h + f };
    }
    if !post {
        h = ln(&h, "final_norm");
    }
    let m = mask.to_kind(Kind::Float).unsqueeze(-1);
    let mut e = (h * &m).sum_dim_intlist(1, false, None) / m.sum_dim_intlist(1, false, None);
    if vars.contains_key("head.weight") {
        e = lin(&e, "head");
    }
    &e / e.square().sum_dim_intlist(-1, true, None).sqrt()
}

#[test]
fn post_and_pre_norm_each_match_a_hand_written_reference_and_differ() {
    let input = batch(&[6, 3, 1], 6);
    let mut outs = Vec::new();
    for edits in [&[][..], &[("norm_position = \"post\"", "norm_position = \"pre\"")][..]] {
        let spec = spec(edits);
        let (vs, student) = build(&spec);
        let got = tch::no_grad(|| student.forward(&input, false));
        let want = tch::no_grad(|| reference(&vs.variables(), &spec, &input));
        assert_eq!(got.size(), [3, 8]);
        assert!(max_diff(&got, &want) < 1e-6, "{edits:?}: {}", max_diff(&got, &want));
        outs.push(got);
    }
    // same seed, same shapes, hence the same weights: only the norm position differs
    assert!(max_diff(&outs[0], &outs[1]) > 1e-2, "pre- and post-norm give the same output");
}

#[test]
fn a_sentence_embeds_the_same_alone_and_padded_in_a_batch() {
    for edits in VARIANTS.iter().take(3) {
        let (_, student) = build(&spec(edits));
        let padded = batch(&[9, 4, 2], 9);
        let alone = ModelInput {
            x: padded.x.narrow(0, 1, 1).narrow(1, 0, 4),
            mask: Some(Tensor::ones([1, 4], (Kind::Int64, Device::Cpu))),
        };
        let (a, b) = tch::no_grad(|| (student.forward(&alone, false), student.forward(&padded, false)));
        let diff = max_diff(&a, &b.narrow(0, 1, 1));
        assert!(diff < 1e-6, "{edits:?}: {diff}");
    }
}

#[test]
fn pooling_and_normalisation_by_hand() {
    // h [1, 3, 2]: tokens (1, 2), (3, 4), (100, 100) with the last one padding
    let h = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 100.0, 100.0]).reshape([1, 3, 2]);
    let mask = Tensor::from_slice(&[1i64, 1, 0]).reshape([1, 3]);
    let mean = Vec::<f32>::try_from(mean_pool(&h, Some(&mask)).flatten(0, -1)).unwrap();
    assert_eq!(mean, [2.0, 3.0]);
    let unit = Vec::<f32>::try_from(l2_normalize(&Tensor::from_slice(&[3.0f32, 4.0])).flatten(0, -1)).unwrap();
    assert_eq!(unit, [0.6, 0.8]);
    // CLS pooling: the pool block returns token 0 of the last hidden state
    let spec = spec(&[("head = \"embedding\"\nnormalize = true", "head = \"embedding\"\npooling = \"cls\"")]);
    let (_, student) = build(&spec);
    let input = batch(&[5, 3], 5);
    let Student::Transformer(t) = &student else { panic!("a transformer") };
    let pool = t.block_index("pool").unwrap();
    let hidden = tch::no_grad(|| student.forward_blocks(&input.x, 0..pool, input.mask.as_ref(), false));
    let out = tch::no_grad(|| student.forward(&input, false));
    assert!(out.equal(&hidden.select(1, 0)));
}

#[test]
fn bf16_autocast_runs_finite_and_near_fp32() {
    let (_, student) = build(&spec(&[]));
    let input = batch(&[6, 3, 1], 6);
    let fp32 = tch::no_grad(|| student.forward(&input, false));
    let bf16 =
        crate::torch::shim::autocast(Device::Cpu, Precision::Bf16, || tch::no_grad(|| student.forward(&input, false)))
            .unwrap();
    assert!(bool::try_from(bf16.isfinite().all()).unwrap());
    let diff = max_diff(&fp32, &bf16.to_kind(Kind::Float));
    assert!(diff > 0.0 && diff < 0.05, "bf16 vs fp32 differ by {diff}");
}

/// One forward and backward of the student of `spec` (built from seed 5) on `step`: its blocks
/// in `k` segments (recomputed when `k > 1`), the loss of `objective`, in chunks of `chunk`
/// positions when set, or fused with the head when `spec` sets `kd.fused_head`; fp32 on the
/// CPU, dropout seed 9.
fn one_step(
    spec: &Config,
    objective: &dyn crate::train::objective::Objective,
    k: usize,
    chunk: Option<i64>,
    step: &crate::train::step::StepBatch,
) -> crate::train::step::Gradients {
    use crate::train::step::{forward_backward, param_segments, StepConfig};
    let (vs, student) = build(spec);
    let _guard = crate::torch::test_rng::lock();
    let named = crate::student::trainable(&vs);
    let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
    let params: Vec<&Tensor> = named.iter().map(|(_, t)| t).collect();
    let segments = split(student.block_count(), k);
    let fused = crate::train::fused_lm_loss::FusedLmLoss::of(spec, &student);
    let cfg = StepConfig {
        device: Device::Cpu,
        precision: Precision::Fp32,
        objective,
        seed: 9,
        segments: &segments,
        param_segment: &param_segments(&student, &names, &segments, None),
        recompute: k > 1,
        ddp: None,
        sync_batch_norm: None,
        loss_chunk: chunk,
        fused_head: fused.as_ref(),
        hidden: None,
    };
    forward_backward(&cfg, &student, &params, step, None, &|| None).unwrap()
}

#[test]
fn checkpointed_gradients_equal_full_backprop() {
    use crate::train::step::StepBatch;
    // dropout everywhere, so that the recomputed segments must replay the same masks
    let spec = spec(&[
        ("activation = \"gelu\"", "activation = \"gelu\"\ndropout = 0.2"),
        ("head = \"embedding\"", "attention_dropout = 0.1\nhead = \"embedding\""),
    ]);
    let input = batch(&[6, 3, 1], 6);
    let soft = Tensor::linspace(-1.0, 1.0, 24, (Kind::Float, Device::Cpu)).reshape([3, 8]);
    let step = StepBatch { input: &input, labels: None, soft: Some(&soft), step: 3, weight: 1.0, teacher_hidden: &[] };
    let objective = crate::train::objective::LogitKd::forward_kl(1.0, 1.0);
    let grads = |k: usize| one_step(&spec, &objective, k, None, &step).grads;
    let full = grads(1);
    assert!(full.iter().all(Tensor::defined));
    for k in [2, 3, 5] {
        let g = grads(k);
        let diff = g.iter().zip(&full).map(|(a, b)| max_diff(a, b)).fold(0.0, f64::max);
        assert!(diff < 1e-6, "{k} segments: gradients differ by {diff}");
    }
}

/// [`TINY`] as a Llama-style language model: rotary positions, grouped-query causal
/// attention, RMSNorm, SwiGLU, a tied head over the 40-token vocabulary.
const LANGUAGE_MODEL: [(&str, &str); 4] = [
    ("classes = 8", "classes = 40"),
    (
        "max_positions = 16\ntoken_types = 2\nnorm_position = \"post\"",
        "kv_heads = 1\nrope_theta = 100.0\nmlp = \"swiglu\"\nnorm = \"rms\"",
    ),
    ("head = \"embedding\"\nnormalize = true", "head = \"lm\"\ntie_embeddings = true\nattention = \"flash\""),
    ("objective = \"embedding_mse\"", "objective = \"logits\""),
];

/// A language model's training batch: 3 full rows of 7 tokens ([`batch`]), each labelled with
/// its next token (the last position, with none, -100: not scored), and fixed teacher logits
/// [3, 7, 40] in [-2, 2].
struct NextTokenBatch {
    input: ModelInput,
    labels: Tensor,
    soft: Tensor,
}

impl NextTokenBatch {
    fn new() -> NextTokenBatch {
        let input = batch(&[7, 7, 7], 7);
        let unlabelled = Tensor::full([3, 1], -100, (Kind::Int64, Device::Cpu));
        let labels = Tensor::cat(&[input.x.narrow(1, 1, 6), unlabelled], 1);
        let soft = (Tensor::arange(3 * 7 * 40, (Kind::Float, Device::Cpu)).reshape([3, 7, 40]) * 0.37).sin() * 2.0;
        NextTokenBatch { input, labels, soft }
    }

    /// The batch as training step 3 at weight 0.5.
    fn step(&self) -> crate::train::step::StepBatch<'_> {
        crate::train::step::StepBatch {
            input: &self.input,
            labels: Some(&self.labels),
            soft: Some(&self.soft),
            step: 3,
            weight: 0.5,
            teacher_hidden: &[],
        }
    }
}

/// A language model's loss in chunks of positions (`kd.loss_chunk`) gives the loss and the
/// gradients of the whole sequence at once, also with checkpointed segments, fp16 loss scaling
/// aside (fp32 here), under every divergence; the last position of each row has no next token.
#[test]
fn a_chunked_token_loss_equals_the_whole_one() {
    use crate::train::objective::Divergence;
    let spec = spec(&LANGUAGE_MODEL);
    let lm = NextTokenBatch::new();
    let step = lm.step();
    for divergence in [Divergence::ForwardKl, Divergence::ReverseKl, Divergence::Jsd { beta: 0.3 }, Divergence::Tvd] {
        let objective = crate::train::objective::LogitKd { temperature: 2.0, alpha: 0.7, divergence };
        let run = |chunk: Option<i64>, k: usize| {
            let out = one_step(&spec, &objective, k, chunk, &step);
            (out.loss.values(), out.grads, out.predictions)
        };
        let (loss, full, preds) = run(None, 1);
        assert!(full.iter().all(Tensor::defined) && loss.kd > 1e-3, "{divergence:?}: {loss:?}");
        assert_eq!(preds.size(), [3, 7]);
        for (chunk, k) in [(Some(3), 1), (Some(2), 1), (Some(4), 3)] {
            let (l, g, p) = run(chunk, k);
            assert!(
                (l.loss - loss.loss).abs() < 1e-6 && (l.kd - loss.kd).abs() < 1e-6 && (l.ce - loss.ce).abs() < 1e-6,
                "{divergence:?}, {chunk:?}: {l:?} vs {loss:?}"
            );
            let diff = g.iter().zip(&full).map(|(a, b)| max_diff(a, b)).fold(0.0, f64::max);
            assert!(diff < 1e-6, "{divergence:?}, chunks of {chunk:?}, {k} segments: gradients differ by {diff}");
            assert_eq!(Vec::<Vec<i64>>::try_from(&p).unwrap(), Vec::<Vec<i64>>::try_from(&preds).unwrap());
        }
    }
}

/// The head fused with the loss (`kd.fused_head`) gives the loss, gradients and predictions of
/// the unfused step: tied, untied with a bias, and factorised heads, with checkpointed segments,
/// temperature 2 and a step weight of 0.5; the last position of each row has no next token.
#[test]
fn a_fused_head_step_equals_the_unfused_one() {
    let lm = NextTokenBatch::new();
    let step = lm.step();
    let kd = "objective = \"logits\"\ntemperature = 2.0\ndivergence = \"jsd\"\nbeta = 0.3";
    let heads = [
        ("tie_embeddings = true", "tie_embeddings = true"),
        ("tie_embeddings = true", "bias = true"),
        ("tie_embeddings = true", "head_rank = 3"),
    ];
    for head in heads {
        let mut edits = LANGUAGE_MODEL.to_vec();
        edits[2].1 = edits[2].1.replace(head.0, head.1).leak();
        edits[3].1 = kd;
        let unfused = spec(&edits);
        let objective = crate::train::objective::from_spec(&unfused.kd);
        let want = one_step(&unfused, objective.as_ref(), 1, None, &step);
        assert!(want.loss.values().kd > 1e-3);
        for (chunk, k) in [(3, 1), (7, 3), (2, 2)] {
            edits[3].1 = format!("{kd}\nloss_chunk = {chunk}\nfused_head = true").leak();
            let fused = spec(&edits);
            let got = one_step(&fused, objective.as_ref(), k, None, &step);
            let (l, w) = (got.loss.values(), want.loss.values());
            let close = (l.loss - w.loss).abs() < 1e-6 && (l.kd - w.kd).abs() < 1e-6 && (l.ce - w.ce).abs() < 1e-6;
            assert!(close, "{head:?}, chunks of {chunk}, {k} segments: {l:?} vs {w:?}");
            let diff = got.grads.iter().zip(&want.grads).map(|(a, b)| max_diff(a, b)).fold(0.0, f64::max);
            assert!(diff < 1e-6, "{head:?}, chunks of {chunk}, {k} segments: gradients differ by {diff}");
            assert!(got.predictions.equal(&want.predictions), "{head:?}, chunks of {chunk}");
        }
    }
}

/// `student.pt` traced on a [2, 7] input runs a [5, 11] one with padding as the Rust forward
/// does; and in PyTorch (`torch.jit.load`) too.
#[test]
fn traced_student_runs_other_shapes() {
    let _rng = crate::torch::test_rng::lock();
    for edits in [
        &[][..],
        &[
            ("norm_position = \"post\"", "norm_position = \"pre\""),
            ("head = \"embedding\"", "attention = \"flash\"\nhead = \"embedding\""),
        ][..],
        &LANGUAGE_MODEL[..],
        &[
            LANGUAGE_MODEL[0],
            LANGUAGE_MODEL[1],
            LANGUAGE_MODEL[2],
            LANGUAGE_MODEL[3],
            ("attention = \"flash\"", "attention = \"math\""),
        ][..],
        &[("max_positions = 16\ntoken_types = 2\nnorm_position = \"post\"", "rope_theta = 100.0")][..],
    ] {
        let spec = spec(edits);
        let (vs, student) = build(&spec);
        let dir = tempfile::tempdir().unwrap();
        let (st, pt) = (dir.path().join("student.safetensors"), dir.path().join("student.pt"));
        crate::export::save_student(&spec, &vs, &student, &batch(&[7, 4], 7), &st, &pt).unwrap();
        let module = CModule::load(&pt).unwrap();
        // a language model's batches are full windows (causal attention reads no padding)
        let lm = spec.student.is_language_model();
        let input = if lm { batch(&[11; 5], 11) } else { batch(&[11, 5, 1, 8, 3], 11) };
        let traced = tch::no_grad(|| module.forward_ts(&input.tensors())).unwrap();
        let rust = tch::no_grad(|| student.forward(&input, false));
        assert_eq!(traced.size(), if lm { vec![5, 11, 40] } else { vec![5, 8] });
        assert!(max_diff(&traced, &rust) < 1e-5, "{edits:?}: {}", max_diff(&traced, &rust));
        if let Some(py) = python_forward(&pt, &input) {
            assert!(max_diff(&py, &rust) < 1e-5, "{edits:?} in PyTorch: {}", max_diff(&py, &rust));
        }
    }
}

/// The project's venv Python, or `None` (after saying why) when it is missing and
/// `DISTILL_REQUIRE_PYTORCH` is not set.
pub fn python() -> Option<std::path::PathBuf> {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let missing = format!("{} is missing (run scripts/setup): PyTorch cross-check skipped", python.display());
    assert!(std::env::var_os("DISTILL_REQUIRE_PYTORCH").is_none(), "{missing}");
    eprintln!("SKIPPED: {missing}");
    None
}

/// `torch.jit.load(pt)(ids, mask)` in the venv's PyTorch, for the model input `input`.
fn python_forward(pt: &std::path::Path, input: &ModelInput) -> Option<Tensor> {
    let python = python()?;
    let rows = |t: &Tensor| serde_json::to_string(&Vec::<Vec<i64>>::try_from(t).unwrap()).unwrap();
    let script = "import json, sys, torch\nm = torch.jit.load(sys.argv[1])\n\
        ids, mask = (torch.tensor(json.loads(a)) for a in sys.argv[2:4])\n\
        out = m(ids, mask)\n\
        print(json.dumps({'shape': list(out.shape), 'values': out.flatten().tolist()}))";
    let out = std::process::Command::new(python)
        .args(["-c", script, pt.to_str().unwrap(), &rows(&input.x), &rows(input.mask.as_ref().unwrap())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shape: Vec<i64> = serde_json::from_value(out["shape"].clone()).unwrap();
    let values: Vec<f32> = serde_json::from_value(out["values"].clone()).unwrap();
    Some(Tensor::from_slice(&values).reshape(shape))
}

/// Every head trains: Adam on an MSE to a fixed target cuts the loss fourfold in 20
/// steps, with dropout on; the LM head gives per-token logits over the vocabulary.
#[test]
fn every_head_trains() {
    let heads: [(Edits, [i64; 3]); 3] = [
        (&[("activation = \"gelu\"", "activation = \"gelu\"\ndropout = 0.1")], [3, 8, 0]),
        (
            &[("head = \"embedding\"\nnormalize = true", "head = \"classifier\""), ("classes = 8", "classes = 3")],
            [3, 3, 0],
        ),
        (
            &[
                ("head = \"embedding\"\nnormalize = true", "head = \"lm\"\ntie_embeddings = true"),
                ("classes = 8", "classes = 40"),
                ("objective = \"embedding_mse\"", "objective = \"logits\""),
            ],
            [3, 6, 40],
        ),
    ];
    for (edits, shape) in heads {
        let (vs, student) = build(&spec(edits));
        let _guard = crate::torch::test_rng::lock();
        let input = batch(&[6, 3, 1], 6);
        let dims: Vec<i64> = shape.iter().copied().filter(|&d| d > 0).collect();
        // rows of mixed signs, near zero mean: within reach of a post-norm student
        let n: i64 = dims.iter().product();
        let target = (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 1.7).sin().reshape(&dims[..]);
        // the embedding head's outputs are unit vectors: so is its target
        let target = if shape[1] == 8 { l2_normalize(&target) } else { target };
        let mut adam = tch::nn::OptimizerConfig::build(tch::nn::Adam::default(), &vs, 0.01).unwrap();
        let loss = |train: bool| (student.forward(&input, train) - &target).square().mean(Kind::Float);
        let first = tch::no_grad(|| loss(false)).double_value(&[]);
        for _ in 0..20 {
            adam.backward_step(&loss(true));
        }
        let last = tch::no_grad(|| loss(false)).double_value(&[]);
        assert!(last < 0.25 * first, "{edits:?}: loss {first} -> {last}");
    }
}
