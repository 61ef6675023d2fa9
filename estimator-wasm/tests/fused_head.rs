//! A language model's head fused with its loss (`kd.fused_head`, distill's
//! `objective/fused_head.rs`) priced against the chunked loss it replaces, for SmolLM2-135M's
//! shape (the `examples/smollm2/student.toml` student: 4 layers of d = 576, a tied head over
//! V = 49,152 tokens, windows of S = 128, batch 8, chunks of 32 positions), fp32 on the CPU.
use estimator_wasm::{estimate, Cat, Config, Inputs, Moment, Plan};

const SMOLLM2: &str = "[data]\ntokenizer = \"t.json\"\ninput_shape = [128]\nclasses = 49152\n\
    [student]\nfamily = \"transformer\"\nactivation = \"silu\"\n[student.transformer]\nvocab = 49152\nlayers = 4\n\
    d_model = 576\nheads = 9\nkv_heads = 3\nmlp_width = 1536\nmlp = \"swiglu\"\nnorm = \"rms\"\nnorm_eps = 1e-5\n\
    rope_theta = 100000.0\nattention = \"flash\"\nbias = false\ntie_embeddings = true\nhead = \"lm\"\n\
    [kd]\nobjective = \"logits\"\ntemperature = 1.0\nalpha = 0.5\nloss_chunk = 32\n\
    [teacher]\npreset = \"smollm2-135m\"\n[train]\nbatch_size = 8\neval_batch_size = 8\n[estimate]\ntarget = \"cpu\"\n";

fn plan(extra: &str) -> Plan {
    let text = SMOLLM2.replace("loss_chunk = 32\n", &format!("loss_chunk = 32\n{extra}"));
    estimate(&Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}")), &Inputs::default()).unwrap()
}

fn at(plan: &Plan, m: Moment) -> &estimator_wasm::memory::MomentBytes {
    plan.moments.iter().find(|x| x.moment == m).unwrap()
}

/// Both steps peak while the loss is built. Fused, that moment lacks the chunk's student
/// logits (the predictions [S] int64 instead), the chunk's three saved fp32 [32, V] tensors (CE
/// log-probabilities, log_softmax(s/T), the teacher's probabilities: the chunked loss's graph)
/// and the head's saved input [S, d]; it holds the closed-form gradients [S, d] and [V, d]
/// fp32 instead. The chunk's transient tensors are five either way (forward KL). Exact bytes.
#[test]
fn the_fused_head_drops_the_peak_by_the_chunks_graph() {
    let (chunked, fused) = (plan(""), plan("fused_head = true\n"));
    let (b, s, v, d, c) = (8u64, 128u64, 49152u64, 576u64, 32u64);
    assert_eq!((chunked.peak_moment, fused.peak_moment), (Moment::Loss, Moment::Loss));
    let logits = b * c * v * 4 - b * s * 8;
    let saved = 3 * b * c * v * 4 - (b * s * d * 4 + v * d * 4) + b * s * d * 4;
    assert_eq!(chunked.totals.total - fused.totals.total, logits + saved);
    assert_eq!(chunked.totals.total - fused.totals.total, 88_072_192, "84.0 MiB");
    let (lc, lf) = (at(&chunked, Moment::Loss), at(&fused, Moment::Loss));
    assert_eq!(lc.categories.get(Cat::Logits) - lf.categories.get(Cat::Logits), logits);
    assert_eq!(lc.categories.get(Cat::LossTransient), 5 * b * c * v * 4);
    assert_eq!(lf.categories.get(Cat::LossTransient), 5 * b * c * v * 4);
    // the backward starts with the surrogate's gradients [V, d] and [S, d], no [c, V] one
    assert_eq!(at(&fused, Moment::Backward).categories.get(Cat::LossTransient), v * d * 4 + b * s * d * 4);
    // the forward's largest moment is no longer the head's [S, V] output
    assert_eq!(at(&fused, Moment::Forward).layer.as_deref(), Some("final_norm"));
    assert!(plan_whole().totals.total > chunked.totals.total + 1_000_000_000, "the whole loss's [S, V] tensors");
}

/// The same student with the whole loss (`loss_chunk = 0`).
fn plan_whole() -> Plan {
    let text = SMOLLM2.replace("loss_chunk = 32\n", "");
    estimate(&Config::from_toml_str(&text).unwrap(), &Inputs::default()).unwrap()
}
