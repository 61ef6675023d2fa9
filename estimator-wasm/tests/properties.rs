//! Property tests over random configurations: no panic, typed errors on absurd sizes,
//! monotone in the batch, and a verified largest batch.
//!
//! A generated config the schema refuses (or one the estimator cannot compile) is rejected
//! with `prop_assume!`, never passed silently, and each test fails when more than a quarter of
//! its cases are rejected (`max_global_rejects`): the properties hold on configs that exist.
use estimator_wasm::memory::batch::search;
use estimator_wasm::schema::limits::MAX_SIZE;
use estimator_wasm::{estimate, gpu, Config, EstimateError, Inputs, MemoryModel};
use proptest::prelude::*;

/// A size that is usually small and sometimes absurd: up to the schema's largest size.
fn size(small: u64) -> impl Strategy<Value = u64> {
    prop_oneof![8 => 1..=small, 1 => 1..=MAX_SIZE, 1 => Just(MAX_SIZE)]
}

/// `cases` cases, of which at most a quarter may be rejected.
fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, max_global_rejects: cases / 4, ..ProptestConfig::default() }
}

fn student() -> impl Strategy<Value = String> {
    let act = prop::sample::select(vec!["relu", "gelu", "silu", "tanh", "sigmoid", "leaky_relu"]);
    // At least 3 layers (2 hidden), so `run()`'s pipeline degree (1-3) is never refused.
    let mlp = (size(2048), prop::collection::vec(size(1024), 2..4), act.clone(), 0..3usize, any::<bool>()).prop_map(
        |(d, hidden, act, norm, drop)| {
            let hidden: Vec<String> = hidden.iter().map(u64::to_string).collect();
            format!(
                "[data]\ninput_shape = [{d}]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [{}]\nactivation = \"{act}\"\n\
                 norm = \"{}\"\ndropout = {}\n",
                hidden.join(", "),
                ["none", "batch", "layer"][norm],
                if drop { 0.1 } else { 0.0 }
            )
        },
    );
    let cnn = (1..4u64, 2..40u64, prop::collection::vec(1..48u64, 1..4), 0..3usize, any::<bool>(), act.clone())
        .prop_map(|(c, hw, channels, pool, bn, act)| {
            let channels: Vec<String> = channels.iter().map(u64::to_string).collect();
            format!(
                "[data]\ninput_shape = [{c}, {hw}, {hw}]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [{}]\n\
                 hidden = [16]\npool = \"{}\"\nnorm = \"{}\"\nactivation = \"{act}\"\n",
                channels.join(", "),
                ["max", "avg", "none"][pool],
                if bn { "batch" } else { "none" }
            )
        });
    // An even head count and at least 3 layers: `run()`'s tensor (1-2) and pipeline (1-3)
    // degrees always divide it, so the transformer configs are not refused for them.
    let heads = (1..5u64).prop_map(|k| 2 * k);
    let transformer = (1..300u64, 2..5000u64, 3..6u64, heads, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())
        .prop_map(|(s, vocab, layers, heads, flash, swiglu, rms, lm)| {
            format!(
                "[data]\ninput_shape = [{s}]\nclasses = {}\n[student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
                 dropout = 0.1\n[student.transformer]\nvocab = {vocab}\nlayers = {layers}\nd_model = {}\nheads = {heads}\n\
                 attention = \"{}\"\nattention_dropout = 0.1\nmlp = \"{}\"\nnorm = \"{}\"\nhead = \"{}\"\n",
                if lm { vocab } else { 7 },
                16 * heads,
                if flash { "flash" } else { "math" },
                if swiglu { "swiglu" } else { "standard" },
                if rms { "rms" } else { "layer" },
                if lm { "lm" } else { "classifier" }
            )
        });
    prop_oneof![mlp, cnn, transformer]
}

fn run() -> impl Strategy<Value = String> {
    let precision = prop::sample::select(vec!["fp32", "fp16", "bf16", "pure_bf16", "bf16_master"]);
    let ckpt = prop::sample::select(vec!["\"none\"", "\"sqrt\"", "2", "5"]);
    let gpus = prop::sample::select(vec!["", "gpu = \"T4\"\n", "gpu = \"H200\"\n", "gpu = \"A100-40GB-MIG-1g.5gb\"\n"]);
    (precision, ckpt, gpus, 1..=8u64, 0..=3u64, 1..=2u64, 1..=3u64, any::<bool>(), size(10_000_000), any::<bool>(), 0..3u32)
        .prop_map(|(precision, ckpt, gpu, dp, zero, tp, pp, cpu, teacher, sgd, alpha)| {
            format!(
                "[teacher]\nparams = {teacher}\ncache_logits = {}\n[kd]\nalpha = {}\n[train]\nprecision = \"{precision}\"\n\
                 optimizer = \"{}\"\n[estimate]\n{gpu}target = \"{}\"\ndata_parallel = {dp}\nzero_stage = {zero}\n\
                 tensor_parallel = {tp}\npipeline_stages = {pp}\n#checkpointing = {ckpt}\n",
                teacher % 2 == 0,
                [0.0, 0.5, 1.0][alpha as usize],
                if sgd { "sgd" } else { "adamw" },
                if cpu { "cpu" } else { "cuda" },
            )
        })
}

/// Appends `checkpointing` to the `[student]` table of `student`.
fn config_text(student: &str, run: &str) -> String {
    let ckpt = run.lines().find_map(|l| l.strip_prefix("#checkpointing = ")).unwrap_or("\"none\"");
    let student = student.replacen("[student]\n", &format!("[student]\ncheckpointing = {ckpt}\n"), 1);
    format!("{student}{run}")
}

proptest! {
    #![proptest_config(cases(200))]

    /// Any configuration and any batch: a plan or a typed error, never a panic; totals are
    /// consistent and the fit agrees with them.
    #[test]
    fn never_panics_and_errors_are_typed(student in student(), run in run(), batch in size(4096)) {
        let text = config_text(&student, &run);
        let config = Config::from_toml_str(&text);
        prop_assume!(config.is_ok(), "refused: {:?}", config);
        let config = config.unwrap();
        let inputs = Inputs { batch: Some(batch), ..Inputs::default() };
        match estimate(&config, &inputs) {
            Ok(plan) => {
                let t = plan.totals;
                prop_assert!(t.requested <= t.allocated && t.allocated <= t.reserved.max(t.allocated));
                prop_assert_eq!(t.total, t.reserved + t.fragmentation + t.cuda_context + t.nccl);
                prop_assert!(plan.moments.iter().all(|p| p.reserved <= t.reserved));
                prop_assert!(plan.peak.iter().map(|(_, v)| v).sum::<u64>() <= t.allocated);
                if let Some(fit) = plan.fit {
                    prop_assert_eq!(fit.fits, t.total <= fit.capacity);
                }
                prop_assert!(serde_json::to_string(&plan).is_ok());
            }
            Err(EstimateError::Overflow { .. } | EstimateError::Invalid { .. } | EstimateError::Spec(_)) => {}
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }

    /// More samples never need less memory.
    #[test]
    fn monotone_in_the_batch(student in student(), run in run(), a in 1..5000u64, b in 1..5000u64) {
        let model = Config::from_toml_str(&config_text(&student, &run)).map_err(EstimateError::from)
            .and_then(|c| MemoryModel::new(&c, &Inputs::default()));
        prop_assume!(model.is_ok(), "refused: {:?}", model.err());
        let model = model.unwrap();
        let (lo, hi) = (a.min(b), a.max(b));
        if let (Ok(x), Ok(y)) = (model.totals(lo), model.totals(hi)) {
            // the device total is monotone (the peak moment may change, so its split may not)
            prop_assert!(x.total <= y.total, "{} at {lo} > {} at {hi}", x.total, y.total);
        }
    }
}

proptest! {
    #![proptest_config(cases(48))]

    /// The batch search returns b with b fitting and b + 1 not, below the closed form.
    #[test]
    fn the_largest_batch_is_verified(student in student(), run in run(), margin in 0.0..0.3f64) {
        let text = config_text(&student, &run).replace("target = \"cpu\"", "target = \"cuda\"");
        let model = Config::from_toml_str(&text).map_err(EstimateError::from)
            .and_then(|c| MemoryModel::new(&c, &Inputs::default()));
        prop_assume!(model.is_ok(), "refused: {:?}", model.err());
        let model = model.unwrap();
        let a100 = gpu("A100-40GB").unwrap();
        let found = search(&model, a100, margin).unwrap();
        let fits = |b: u64| model.totals(b).is_ok_and(|t| t.total <= found.budget);
        match found.batch {
            Some(b) => {
                prop_assert!(b <= found.closed_form);
                prop_assert!(fits(b), "{b} does not fit");
                prop_assert!(!fits(b + 1), "{} fits too", b + 1);
            }
            None => prop_assert!(!fits(1)),
        }
    }
}
