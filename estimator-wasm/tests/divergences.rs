//! The loss of a language model under each `kd.divergence`, as the plan prices it, against
//! PyTorch's own accounting of distill's loss ops on CPU (`fidelity/divergences.py`, re-run here
//! with the project's venv Python, torch 2.11; docs/memory-model.md section 7b). S = 64,
//! V = 1000, d = 32, batch 2, fp32 on CPU. Without the venv the measured check is skipped with a
//! message saying so (`DISTILL_REQUIRE_PYTORCH=1`, which `scripts/test` sets, makes that a
//! failure), as `tests/fidelity.rs` does.
use std::io::Write;
use std::path::Path;
use std::process::Command;

use estimator_wasm::{estimate, Cat, Config, Inputs, Moment, Plan};
use serde_json::Value;

const LM: &str =
    "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 1000\n[student]\nfamily = \"transformer\"\n\
    [student.transformer]\nvocab = 1000\nlayers = 1\nd_model = 32\nheads = 4\nrope_theta = 10000.0\n\
    tie_embeddings = true\nhead = \"lm\"\n[kd]\nobjective = \"logits\"\n[teacher]\nparams = 1000\n\
    cache_logits = false\n[train]\nbatch_size = 2\neval_batch_size = 2\n[estimate]\ntarget = \"cpu\"\n";
const ROWS: u64 = 2 * 64;
/// One fp32 [rows, V] tensor.
const UNIT: u64 = ROWS * 1000 * 4;

/// (the loss layer's saved bytes, the loss's transient bytes at the forward's end, at the
/// backward's start) of [`LM`] with `kd` lines added.
fn loss_bytes(kd: &str) -> (u64, u64, u64) {
    plan_loss(kd, "")
}

/// [`loss_bytes`] with `train` lines added.
fn plan_loss(kd: &str, train: &str) -> (u64, u64, u64) {
    let text = LM
        .replace("objective = \"logits\"\n", &format!("objective = \"logits\"\n{kd}"))
        .replace("[train]\n", &format!("[train]\n{train}"));
    let plan: Plan = estimate(&Config::from_toml_str(&text).unwrap(), &Inputs::default()).unwrap();
    let at = |m: Moment| plan.moments.iter().find(|x| x.moment == m).unwrap();
    // the backward's largest moment is its start (a layer's backward would hold no loss tensors)
    assert_eq!(at(Moment::Backward).layer, None, "{kd}");
    let saved = plan.layers.iter().find(|l| l.id == "loss").unwrap().saved_bytes;
    (
        saved,
        at(Moment::Loss).categories.get(Cat::LossTransient),
        at(Moment::Backward).categories.get(Cat::LossTransient),
    )
}

#[test]
fn each_divergence_prices_its_own_loss_tensors() {
    let unit = UNIT;
    let forward = loss_bytes("");
    // forward KL: saved CE's log-probs, log_softmax(s/T) and exp(log_softmax(t/T)), the labels
    // [rows] int64 and CE's 4-byte total weight; at the forward's end the two rows' copies and 3
    // more; at the backward's peak one gradient beside the saved set
    assert_eq!(forward, (3 * unit + ROWS * 8 + 4, 5 * unit, unit));
    assert_eq!(loss_bytes("divergence = \"forward_kl\"\n"), forward);
    // bf16 logits (autocast): their rows (half a unit) and the rows' fp32 copy, in place of the
    // fp32 rows, through the loss; the saved set and the gradients as with fp32
    assert_eq!(plan_loss("", "precision = \"bf16\"\n"), (forward.0, forward.1 + unit / 2, forward.2));
    let shifted = |d: (i64, i64, i64)| {
        let add = |a: u64, k: i64| (a as i64 + k * unit as i64) as u64;
        (add(forward.0, d.0), add(forward.1, d.1), add(forward.2, d.2))
    };
    // (saved, at the forward's peak, at the backward's peak) against forward KL's
    assert_eq!(loss_bytes("divergence = \"reverse_kl\"\n"), shifted((1, -1, 1)));
    assert_eq!(loss_bytes("divergence = \"jsd\"\n"), shifted((4, 0, 2)));
    assert_eq!(loss_bytes("divergence = \"jsd\"\nbeta = 0.9\n"), shifted((4, 0, 2)));
    assert_eq!(loss_bytes("divergence = \"tvd\"\n"), shifted((0, -1, 1)));
    // JSD's endpoints compute the two KLs
    assert_eq!(loss_bytes("divergence = \"jsd\"\nbeta = 0.0\n"), forward);
    assert_eq!(loss_bytes("divergence = \"jsd\"\nbeta = 1.0\n"), loss_bytes("divergence = \"reverse_kl\"\n"));
    // without a teacher term (alpha = 0) the divergence costs nothing: CE alone, the student's
    // rows copied, two gradients at the backward's peak
    let alone = |kd: &str| loss_bytes(&format!("alpha = 0.0\n{kd}"));
    assert_eq!(alone(""), (unit + ROWS * 8 + 4, unit, 2 * unit));
    assert_eq!(alone("divergence = \"jsd\"\n"), alone(""));
}

/// PyTorch's figures for [`LM`]'s loss with the student's logits in `logits` ("fp32", "bf16"),
/// or `None` (after saying why) when the venv is missing and `DISTILL_REQUIRE_PYTORCH` is not set.
fn measure(logits: &str) -> Option<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../.venv/bin/python");
    if !python.exists() {
        let missing = format!(
            "{} is missing: the check needs the project's Python with torch; run scripts/setup",
            python.display()
        );
        assert!(std::env::var_os("DISTILL_REQUIRE_PYTORCH").is_none(), "{missing}");
        let _ = writeln!(std::io::stderr(), "SKIPPED the plan against PyTorch's loss: {missing}");
        return None;
    }
    let out = Command::new(&python)
        .arg(root.join("fidelity/divergences.py"))
        .args(["--batch", "2", "--seq", "64", "--vocab", "1000", "--logits", logits])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; run scripts/setup", python.display()));
    assert!(out.status.success(), "fidelity/divergences.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).expect("divergences.py prints JSON"))
}

/// The plan's loss against the bytes PyTorch allocated for it, case by case, with fp32 logits
/// and with bf16 ones (autocast; the plan adds their rows and the rows' fp32 copy). Saved:
/// exact, but for the predicting rows' int64 indices (rows x 8 bytes) that the student's
/// `index_select` keeps and the plan leaves out. The peaks: live bytes less the saved set,
/// within 2 x rows x 8 + 64 bytes (0.4% of one [rows, V] fp32 tensor), since the int64 labels
/// and indices and the 0-dim scalars are freed each at its own time.
#[test]
fn the_plan_prices_the_loss_pytorch_allocates() {
    for (logits, train) in [("fp32", ""), ("bf16", "precision = \"bf16\"\n")] {
        let Some(measured) = measure(logits) else { return };
        assert_eq!(measured["unit"], UNIT);
        let cases = measured["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 8);
        let tolerance = 2 * ROWS * 8 + 64;
        for case in cases {
            let name = case["divergence"].as_str().unwrap();
            let kd = match (name, case["beta"].as_f64()) {
                ("none", _) => "alpha = 0.0\n".to_string(),
                (d, None) => format!("divergence = \"{d}\"\n"),
                (d, Some(beta)) => format!("divergence = \"{d}\"\nbeta = {beta:?}\n"),
            };
            let (saved, at_loss, at_backward) = plan_loss(&kd, train);
            let bytes = |key: &str| case[key].as_u64().unwrap();
            let m_saved = bytes("saved");
            let kd = format!("{logits} logits, {}", kd.trim_end());
            assert_eq!(saved + ROWS * 8, m_saved, "{kd}: saved");
            let near = |plan: u64, peak: u64, what: &str| {
                let live = peak - m_saved;
                assert!(
                    plan.abs_diff(live) <= tolerance,
                    "{kd}: {what}: plan {plan} B, PyTorch {live} B besides the saved set"
                );
            };
            near(at_loss, bytes("forward_peak"), "the forward's peak");
            near(at_backward, bytes("backward_peak"), "the backward's peak");
        }
    }
}
