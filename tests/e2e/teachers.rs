//! Both kinds of TorchScript teacher distil into a working student, and the report, metrics
//! and exports describe the run truthfully.
use e2e::{digits_config, fixture, train};
use estimator_wasm::{arch, Config};

fn read_jsonl(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn scripted_teacher_with_dict_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), true).unwrap();
    let run = dir.path().join("run");

    assert!(report.teacher.test_accuracy > 0.97, "{}", report.teacher.test_accuracy);
    assert!(report.student.test_accuracy > 0.9, "{}", report.student.test_accuracy);
    assert!(report.student.agreement.unwrap() > 0.9);
    // Parameter counts: the teacher's from its TorchScript attributes, the student's from the
    // spec (64*32+32 + 32*10+10), and the ratio between them.
    assert_eq!(report.teacher.params, 16 * 9 + 16 + 2 * 16 + 256 * 10 + 10);
    let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    assert_eq!(report.student.params, arch::param_count(&arch::layers(&spec.student, &spec.data).unwrap()));
    assert_eq!(report.student.params, 2080 + 330);
    assert!((report.compression_ratio - report.teacher.params as f64 / 2410.0).abs() < 1e-12);
    assert_eq!((report.data.train_samples, report.data.test_samples), (1437, 360));

    // 1437 samples in batches of 32 -> 45 steps per epoch, 135 in all; a step line every 10
    // steps plus the last one, and one line per epoch.
    let lines = read_jsonl(&run.join("metrics.jsonl"));
    let steps: Vec<u64> = lines.iter().filter(|l| l["kind"] == "step").map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=13).map(|i| i * 10).chain([135]).collect::<Vec<_>>());
    assert_eq!(lines.iter().filter(|l| l["kind"] == "epoch").count(), 3);
    assert_eq!(report.student.steps, 135);
    let last_epoch = lines.iter().rev().find(|l| l["kind"] == "epoch").unwrap();
    assert!((last_epoch["test_accuracy"].as_f64().unwrap() - report.student.test_accuracy).abs() < 1e-12);

    // The alpha = 0 baseline trains the same student on labels alone.
    let baseline = report.baseline.as_ref().unwrap();
    assert_eq!(baseline.alpha, 0.0);
    assert_eq!(baseline.final_kd, 0.0);
    assert_eq!(baseline.params, report.student.params);
    // KD gain from the two exported students, run by libtorch on the test set here.
    let (x, y) = {
        let test = distill::data::Dataset::load(&fixture("digits-test.npz"), &spec.data).unwrap();
        (distill::data::Normalizer::new(&spec.data, tch::Device::Cpu).apply(&test.x), test.y)
    };
    let correct = |file: &str| {
        let m = tch::CModule::load(run.join(file)).unwrap();
        let logits = tch::no_grad(|| m.forward_ts(&[&x]).unwrap());
        logits.argmax(-1, false).eq_tensor(&y).sum(tch::Kind::Int64).int64_value(&[])
    };
    let gain = 100.0 * (correct("student.pt") - correct("baseline/student.pt")) as f64 / 360.0;
    assert!((report.kd_gain_points.unwrap() - gain).abs() < 1e-6, "{:?} vs {gain}", report.kd_gain_points);
    for file in ["report.json", "config.toml", "student.safetensors", "student.pt", "baseline/student.pt"] {
        assert!(run.join(file).is_file(), "{file} missing");
    }
    assert_eq!(report.student.safetensors_bytes, std::fs::metadata(run.join("student.safetensors")).unwrap().len());
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(saved["student"]["params"], 2410);
}

#[test]
fn traced_teacher_with_tuple_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(
        dir.path(),
        &[
            ("output = \"logits\"", "output = 0"),
            ("family = \"mlp\"", "family = \"cnn\"\nchannels = [4]\nnorm = \"batch\""),
        ],
    );
    let report = train(&fixture("teacher-traced.pt"), &cfg, dir.path(), false).unwrap();
    assert_eq!(report.teacher.params, 64 * 128 + 128 + 128 * 10 + 10);
    assert!(report.teacher.test_accuracy > 0.97, "{}", report.teacher.test_accuracy);
    assert!(report.student.test_accuracy > 0.9, "{}", report.student.test_accuracy);
    assert!(report.baseline.is_none());
    // CNN student: conv1 (no bias under BN) 36 + bn 8 + fc1 (4*4*4 -> 32) 2080 + its BN 64 + head 330.
    assert_eq!(report.student.params, 36 + 8 + 64 * 32 + 32 + 64 + 330);
}

#[test]
fn live_teacher_matches_cached_soft_targets() {
    // Caching the teacher's train logits is an optimisation, not a change of method: the run
    // with the teacher evaluated on every batch ends at the same accuracy (and nearly the same
    // loss: only batch-size-dependent float rounding of the teacher differs).
    let dir = tempfile::tempdir().unwrap();
    let cached = train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &[]), dir.path(), false).unwrap();
    let cfg = digits_config(dir.path(), &[("output = \"logits\"", "output = \"logits\"\ncache_logits = false")]);
    let live = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    assert!((cached.student.final_loss - live.student.final_loss).abs() < 1e-3 * cached.student.final_loss);
    assert!((cached.student.test_accuracy - live.student.test_accuracy).abs() <= 1.0 / 360.0);
}

#[test]
fn a_student_distilled_from_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &[]), dir.path(), false).unwrap();
    // Teacher = the exported student, and the student warm-started from the same weights.
    let run = dir.path().join("run");
    let exported = dir.path().join("student-as-teacher.pt");
    std::fs::copy(run.join("student.pt"), &exported).unwrap();
    let init = format!("hidden = [32]\ninit = {:?}", run.join("student.safetensors"));
    let cfg = digits_config(dir.path(), &[("output = \"logits\"", ""), ("hidden = [32]", &init)]);
    let err = train(&exported, &cfg, &dir.path().join("again"), false).unwrap_err().to_string();
    assert!(err.contains("the teacher and the student are identical"), "{err}");
}
