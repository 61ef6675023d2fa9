//! Compression on real data (digits): exact resume, mixed precision, pruning (magnitude and
//! structured) and gradient checkpointing, checked against hand-computed or measured values.
use std::path::Path;

use distill::host::progress::Verbosity;
use e2e::{digits_config, fixture, metrics_lines, python, run_stopped, serial, train};
use tch::Tensor;

/// The figures of each metrics line of the run in `dir` that an exact resume must reproduce.
fn metrics(dir: &Path) -> Vec<String> {
    metrics_lines(&dir.join("metrics.jsonl"))
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} {} {} {}",
                v["step"], v["loss"], v["kd"], v["ce"], v["accuracy"], v["test_accuracy"], v["loss_scale"]
            )
        })
        .collect()
}

const RESUME_EDITS: [(&str, &str); 3] = [
    ("hidden = [32]", "hidden = [32]\ndropout = 0.2"),
    ("seed = 0", "seed = 0\nsave_every = 20\nprecision = \"fp16\""),
    ("log_every = 10", "log_every = 10\n[prune]\nsparsity = 0.5\nevery_steps = 10"),
];

#[test]
fn interrupted_and_resumed_run_equals_an_unbroken_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &RESUME_EDITS);
    let unbroken = train(&fixture("teacher-scripted.pt"), &cfg, &dir.path().join("a"), false).unwrap();

    let out = dir.path().join("b/run");
    let err = run_stopped(&fixture("teacher-scripted.pt"), &cfg, &out, 57);
    assert!(err.is_interrupt(), "{err}");
    assert!(err.to_string().contains("continue with `distill --resume"), "{err}");
    assert!(!out.exists() && out.with_file_name("run.partial").join("checkpoints").is_dir());
    let resumed = {
        let _guard = serial();
        distill::resume(&out, None, None, Verbosity::Quiet, None, &distill::data_parallel::Launch::single()).unwrap()
    };
    // Bit for bit on CPU: every logged loss, KD and CE part, accuracy and loss scale.
    assert_eq!(metrics(&dir.path().join("a/run")), metrics(&out));
    assert_eq!(unbroken.student.test_accuracy.unwrap(), resumed.student.test_accuracy.unwrap());
    assert_eq!(unbroken.student.final_loss_scale, resumed.student.final_loss_scale);
    let sorted = |p: std::path::PathBuf| {
        let mut v = Tensor::read_safetensors(p).unwrap();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (a, b) = (sorted(dir.path().join("a/run/student.safetensors")), sorted(out.join("student.safetensors")));
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert!(ta.equal(tb), "{na} differs after resume");
    }
}

#[test]
fn magnitude_pruning_reaches_the_exact_sparsity_globally_and_per_layer() {
    for scope in ["global", "layer"] {
        let dir = tempfile::tempdir().unwrap();
        let prune = format!(
            "log_every = 10\n[prune]\nsparsity = 0.8\nscope = \"{scope}\"\nevery_steps = 5\nend_epoch = 2.0\nl1 = 1e-5"
        );
        let cfg = digits_config(dir.path(), &[("log_every = 10", &prune)]);
        let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
        let p = report.student.prune.as_ref().unwrap();
        // Zeros counted in the exported file. fc1.weight 32x64 = 2048, head.weight 10x32 = 320:
        // global keeps round(0.8 * 2368) = 1894 zeros anywhere; per layer round(0.8 * 2048) =
        // 1638 and round(0.8 * 320) = 256, also 1894 in all.
        let saved = Tensor::read_safetensors(dir.path().join("run/student.safetensors")).unwrap();
        let zeros = |name: &str| {
            let t = &saved.iter().find(|(n, _)| n == name).unwrap().1;
            t.numel() as i64 - t.count_nonzero(None::<i64>).int64_value(&[])
        };
        let (fc1, head) = (zeros("fc1.weight"), zeros("head.weight"));
        match scope {
            "global" => assert_eq!(fc1 + head, 1894),
            _ => assert_eq!((fc1, head), (1638, 256)),
        }
        assert!((p.weight_sparsity - 1894.0 / 2368.0).abs() < 1e-12, "{}", p.weight_sparsity);
        // report.json's per-layer table, in name order on every run (VarStore is a HashMap).
        let layers: Vec<(&str, u64, u64)> = p.layers.iter().map(|l| (l.name.as_str(), l.dense, l.nonzero)).collect();
        match scope {
            "global" => {
                assert_eq!((layers[0].0, layers[1].0, layers[0].2 + layers[1].2), ("fc1.weight", "head.weight", 474))
            }
            _ => assert_eq!(layers, [("fc1.weight", 2048, 410), ("head.weight", 320, 64)]),
        }
        assert_eq!(p.scope, scope);
        assert!(p.csr_bytes < p.dense_file_bytes, "CSR skips the zeros: {} vs {}", p.csr_bytes, p.dense_file_bytes);
        assert!(report.student.test_accuracy.unwrap() > 0.85, "{scope}: {}", report.student.test_accuracy.unwrap());
        // The epoch lines give the sparsity the weights hold (their zeros counted): events every
        // 5 steps up to end_epoch = 2 (step 90); after epoch 1 (step 45, an event) the cubic
        // gives 0.8 - 0.8 * (1 - 45/90)^3 = 0.7, round(0.7 * 2368) = 1658 zeros (per layer
        // 1434 + 224); 1894 from epoch 2 on.
        let epochs: Vec<f64> = metrics_lines(&dir.path().join("run/metrics.jsonl"))
            .into_iter()
            .filter(|v| v["kind"] == "epoch")
            .map(|v| v["sparsity"].as_f64().unwrap())
            .collect();
        assert_eq!(epochs.len(), 3);
        assert_eq!(epochs, [1658.0 / 2368.0, 1894.0 / 2368.0, 1894.0 / 2368.0]);
    }
}

#[test]
fn structured_pruning_shrinks_the_student_to_the_same_function() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(
        dir.path(),
        &[
            ("family = \"mlp\"", "family = \"cnn\"\nchannels = [8, 16]\nnorm = \"batch\"\npool = \"none\""),
            ("epochs = 3", "epochs = 4"),
            ("log_every = 10", "log_every = 10\n[prune]\nmethod = \"structured\"\nsparsity = 0.5\nevery_steps = 10"),
        ],
    );
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    let p = report.student.prune.as_ref().unwrap();
    let s = p.shrunk.as_ref().unwrap();
    assert_eq!((s.channels.clone(), s.hidden.clone()), (vec![4, 8], vec![16]));
    // conv1 4*1*9 + bn 8, conv2 8*4*9 + bn 16, fc1 (8*8*8 -> 16) + bn 32, head 16*10+10,
    // counted in the exported file (BatchNorm running statistics are not parameters).
    let hand = 36 + 8 + 288 + 16 + 512 * 16 + 16 + 32 + 170;
    let saved = Tensor::read_safetensors(dir.path().join("run/student.safetensors")).unwrap();
    let counted: usize = saved.iter().filter(|(n, _)| !n.contains("running_")).map(|(_, t)| t.numel()).sum();
    assert_eq!(counted, hand);
    assert_eq!((report.student.params, s.params), (hand as u64, hand as u64));
    assert!(s.max_abs_diff < 1e-5, "shrunk vs masked logits differ by {}", s.max_abs_diff);
    assert!(
        s.safetensors_bytes as f64 <= 0.55 * p.dense_file_bytes as f64,
        "{} vs {}",
        s.safetensors_bytes,
        p.dense_file_bytes
    );
    let dense_ts = std::fs::metadata(dir.path().join("run/dense/student.pt")).unwrap().len();
    assert!(s.torchscript_bytes < dense_ts);
    assert!(report.student.test_accuracy.unwrap() > 0.85, "{}", report.student.test_accuracy.unwrap());

    // PyTorch runs both TorchScript files and gets the same logits.
    let script = "import sys, torch
torch.manual_seed(0)
x = torch.randn(32, 1, 8, 8)
small, dense = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
with torch.no_grad():
    print(float((small(x) - dense(x)).abs().max()))";
    let run = dir.path().join("run");
    let out =
        python(script, &[run.join("student.pt").to_str().unwrap(), run.join("dense/student.pt").to_str().unwrap()]);
    let diff: f64 = out.trim().parse().unwrap();
    assert!(diff < 1e-5, "python: {out}");
    // The shrunk cfg rebuilds the same architecture.
    let shrunk_cfg =
        estimator_wasm::Config::from_toml_str(&std::fs::read_to_string(run.join("student.toml")).unwrap()).unwrap();
    assert_eq!(shrunk_cfg.student.channels, vec![4, 8]);
    assert!(shrunk_cfg.prune.is_none(), "the shrunk cfg must not prune again");
}

#[test]
fn bf16_and_fp16_train_on_real_data() {
    let mut accuracy = Vec::new();
    for precision in ["fp32", "bf16", "fp16"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = digits_config(dir.path(), &[("seed = 0", &format!("seed = 0\nprecision = \"{precision}\""))]);
        let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
        assert_eq!(report.student.precision, precision);
        // Loss scaling runs for fp16 only (its effect: fp16_loss_scaling_skips_and_backs_off...).
        assert_eq!(report.student.final_loss_scale.is_some(), precision == "fp16");
        accuracy.push(report.student.test_accuracy.unwrap());
    }
    assert!(accuracy.iter().all(|&a| a > 0.9), "{accuracy:?}");
    assert!((accuracy[1] - accuracy[0]).abs() <= 0.03 && (accuracy[2] - accuracy[0]).abs() <= 0.03, "{accuracy:?}");
}

#[test]
fn fp16_loss_scaling_skips_and_backs_off_on_a_forced_overflow() {
    // Inputs 8x larger (data.scale = 0.5, so they span -1..15): at the initial scale 2^16 the
    // first steps' fp16 gradients overflow, so the scaler must skip those steps and halve the
    // scale until the gradients fit.
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        digits_config(dir.path(), &[("scale = 0.0625", "scale = 0.5"), ("seed = 0", "seed = 0\nprecision = \"fp16\"")]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    let s = &report.student;
    assert!(s.skipped_steps >= 3, "{} skipped", s.skipped_steps);
    // 135 steps, far from the 2000 clean ones that double the scale: each skip halved it.
    assert_eq!(s.final_loss_scale, Some(65536.0 / 2f64.powi(s.skipped_steps as i32)));
    // The optimiser's own count of applied updates (its bias correction), in the last
    // checkpoint: every step but the skipped ones.
    let run = dir.path().join("run");
    let mut steps: Vec<_> = std::fs::read_dir(run.join("checkpoints")).unwrap().map(|e| e.unwrap().path()).collect();
    steps.retain(|p| p.join("state.json").is_file());
    steps.sort();
    let last = steps.pop().unwrap();
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(last.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["optimizer_step"].as_u64(), Some(135 - s.skipped_steps));
    // Already below 2^16 at the first logged step (10).
    let first = &metrics_lines(&run.join("metrics.jsonl"))[0];
    assert!(first["loss_scale"].as_f64().unwrap() < 65536.0, "{first}");
    assert!(s.test_accuracy.unwrap() > 0.85, "{}", s.test_accuracy.unwrap());
}

#[test]
fn teacher_in_half_precision_gives_the_same_predictions() {
    let dir = tempfile::tempdir().unwrap();
    let fp32 = train(
        &fixture("teacher-traced.pt"),
        &digits_config(dir.path(), &[("output = \"logits\"", "output = 0")]),
        dir.path(),
        false,
    )
    .unwrap();
    for precision in ["bf16", "fp16"] {
        let edit = format!("output = 0\nprecision = \"{precision}\"");
        let cfg = digits_config(dir.path(), &[("output = \"logits\"", &edit)]);
        let half = train(&fixture("teacher-traced.pt"), &cfg, dir.path(), false).unwrap();
        assert!(
            (half.teacher.test_accuracy.unwrap() - fp32.teacher.test_accuracy.unwrap()).abs() <= 2.0 / 360.0,
            "{precision}"
        );
        assert_eq!(half.student.teacher_precision, precision);
        assert!(half.student.test_accuracy.unwrap() > 0.9);
    }
}

#[test]
fn gradient_checkpointing_trains_the_same_student() {
    let dir = tempfile::tempdir().unwrap();
    let cnn = "family = \"cnn\"\nchannels = [4, 8]\nnorm = \"batch\"";
    let plain = train(
        &fixture("teacher-scripted.pt"),
        &digits_config(dir.path(), &[("family = \"mlp\"", cnn)]),
        &dir.path().join("a"),
        false,
    )
    .unwrap();
    let with_ckpt = format!("{cnn}\ncheckpointing = \"sqrt\"");
    let ckpt = train(
        &fixture("teacher-scripted.pt"),
        &digits_config(dir.path(), &[("family = \"mlp\"", &with_ckpt)]),
        &dir.path().join("b"),
        false,
    )
    .unwrap();
    assert!(ckpt.student.checkpointing_segments > 1);
    assert_eq!(plain.student.checkpointing_segments, 1);
    let (a, b) = (metrics(&dir.path().join("a/run")), metrics(&dir.path().join("b/run")));
    let loss = |l: &String| l.split(' ').nth(1).unwrap().parse::<f64>().unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert!((loss(x) - loss(y)).abs() < 1e-4 * loss(x).abs().max(1.0), "{x} vs {y}");
    }
    assert!((plain.student.test_accuracy.unwrap() - ckpt.student.test_accuracy.unwrap()).abs() <= 1.0 / 360.0);
}
