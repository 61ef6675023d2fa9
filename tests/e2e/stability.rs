//! Numerically degenerate but legitimate runs: a last batch of one sample under BatchNorm, and a
//! student tensor that is NaN when training ends.

use distill::phase::build_student;
use std::path::Path;

use e2e::{digits_config, fixture, serial, train};
use estimator_wasm::Config;
use tch::{Device, Tensor};

const BN: (&str, &str) = ("hidden = [32]", "hidden = [32]\nnorm = \"batch\"");

/// Every tensor of an exported safetensors file holds only finite values.
fn all_finite(path: &Path) -> bool {
    Tensor::read_safetensors(path).unwrap().iter().all(|(_, t)| bool::try_from(t.isfinite().all()).unwrap())
}

#[test]
fn a_last_batch_of_one_sample_is_dropped_under_batch_norm() {
    // 1437 training samples in batches of 4 leave one: 359 steps, not 360, and no NaN statistics.
    let dir = tempfile::tempdir().unwrap();
    let edits = [BN, ("batch_size = 32", "batch_size = 4"), ("epochs = 3", "epochs = 1")];
    let report = train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &edits), dir.path(), false).unwrap();
    assert_eq!((report.student.steps, report.student.samples_dropped_per_epoch), (359, 1));
    assert!(all_finite(&dir.path().join("run/student.safetensors")));
    // Always predicting one class scores about 10% on digits; a trained student far more.
    assert!(report.student.test_accuracy > 0.8, "test accuracy {}", report.student.test_accuracy);

    // data.holdout = 0.1 splits 1437 into 1293 + 144, and 1293 = 4 * 323 + 1.
    let dir = tempfile::tempdir().unwrap();
    let test_line = format!("test = {:?}", fixture("digits-test.npz"));
    let holdout = [edits[0], edits[1], edits[2], (test_line.as_str(), "holdout = 0.1")];
    let report =
        train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &holdout), dir.path(), false).unwrap();
    assert_eq!((report.data.train_samples, report.student.steps), (1293, 323));
    assert!(all_finite(&dir.path().join("run/student.safetensors")));
}

#[test]
fn batch_size_one_under_batch_norm_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[BN, ("batch_size = 32", "batch_size = 1")]);
    let e = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap_err().to_string();
    assert!(e.starts_with("train.batch_size = 1, but layer fc1_norm (BatchNorm) needs at least 2 samples"), "{e}");
    assert!(!e.contains('\n') && !dir.path().join("run").exists() && !dir.path().join("run.partial").exists());
}

#[test]
fn a_student_with_a_nan_buffer_is_not_exported() {
    // student.init gives fc1_norm a NaN running variance: training uses batch statistics, so
    // the loss stays finite and the NaN survives every momentum update to the export.
    let dir = tempfile::tempdir().unwrap();
    let init = ("hidden = [32]", "hidden = [32]\nnorm = \"batch\"\ninit = \"init.safetensors\"");
    let cfg = digits_config(dir.path(), &[init, ("epochs = 3", "epochs = 1")]);
    let mut spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    spec.student.init = None;
    {
        let _guard = serial();
        let (vs, _) = build_student(&spec, &cfg, Device::Cpu).unwrap();
        let _ = vs.variables()["fc1_norm.running_var"].shallow_clone().fill_(f64::NAN);
        vs.save(dir.path().join("init.safetensors")).unwrap();
    }
    let e = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "student tensor fc1_norm.running_var holds 32 NaN/inf value(s) of 32 after training: not exported"
        ),
        "{e}"
    );
    assert!(!e.contains('\n') && !dir.path().join("run").exists());
    assert!(!dir.path().join("run.partial/student.safetensors").exists());
}
