//! Numerically degenerate but legitimate runs: a last batch of one sample under BatchNorm, a
//! student tensor that is NaN when training ends, and fp16 overflows that the loss scaler must
//! skip (and, when they never stop, report) rather than abort on.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use distill::config::{RunSettings, WrittenCfg};
use distill::host::progress::{Progress, Verbosity};
use distill::inputs::data::{permutation, Dataset, Examples, Images, Normalizer};
use distill::student::build::build_student;
use distill::train::metrics::MetricsLog;
use distill::train::trainer::{Checkpoints, RunEnd, SoftTargets, TrainInputs, Trainer};
use distill::DistillError;
use e2e::{digits_config, fixture, metrics_lines, serial, train};
use estimator_wasm::Config;
use tch::{Device, Kind, Tensor};

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
    assert!(report.student.test_accuracy.unwrap() > 0.8, "test accuracy {}", report.student.test_accuracy.unwrap());

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
        let (vs, _) = build_student(&spec, None, &cfg, Device::Cpu).unwrap();
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

static NO_STOP: AtomicBool = AtomicBool::new(false);

/// fp16 training of the digits MLP (with BatchNorm, labels only) on `x`, driven step by step.
struct Fp16Run {
    spec: Config,
    settings: RunSettings,
    /// The run's objective, built once from `[kd]`.
    objective: Box<dyn distill::train::objective::Objective>,
    cfg: PathBuf,
    train: Dataset,
    test: Dataset,
    dir: tempfile::TempDir,
}

impl Fp16Run {
    /// The digits training set with the samples `huge` set to 10^7 (10^7 / 8 - 1 after
    /// normalisation, beyond fp16's 65504: their logits are NaN under fp16 autocast).
    fn new(huge: &[i64]) -> Fp16Run {
        let dir = tempfile::tempdir().unwrap();
        let edits = [
            BN,
            ("alpha = 0.9", "alpha = 0.0"),
            ("epochs = 3", "epochs = 2"),
            ("seed = 0", "seed = 0\nprecision = \"fp16\""),
        ];
        let cfg = digits_config(dir.path(), &edits);
        let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        let train = Dataset::load(&fixture("digits-train.npz"), &spec.data, None).unwrap();
        let x = train.images().unwrap().raw().to_kind(Kind::Float);
        for &i in huge {
            let _ = x.get(i).fill_(1e7);
        }
        let test = Dataset::load(&fixture("digits-test.npz"), &spec.data, None).unwrap();
        let settings = WrittenCfg::from_spec(&cfg, spec.clone()).unwrap().unplanned(Device::Cpu).unwrap();
        let images = Examples::Images(Images::new(x, Normalizer::new(&spec.data, Device::Cpu)));
        let train = Dataset::new(train.path().to_path_buf(), images, train.labels().map(Tensor::shallow_clone));
        let objective = distill::train::objective::from_spec(&spec.kd);
        Fp16Run { spec, settings, objective, cfg, train, test, dir }
    }

    /// What the trainer reads: labels only (alpha = 0), on CPU.
    fn inputs(&self) -> TrainInputs<'_> {
        TrainInputs {
            settings: &self.settings,
            objective: self.objective.as_ref(),
            train: &self.train,
            test: &self.test,
            soft_targets: SoftTargets::None,
            teacher_test_preds: None,
            teacher_weights: None,
            strategy: &distill::data_parallel::Strategy::Single,
            sync_batch_norm: false,
        }
    }

    /// Runs `trainer` until `stop_after` steps (or the end).
    fn run(&self, trainer: &mut Trainer, stop_after: Option<u64>) -> distill::Result<RunEnd> {
        let progress = Progress::new(Verbosity::Quiet);
        let path = self.dir.path().join("metrics.jsonl");
        let (mut metrics, _) = MetricsLog::resume(&path, trainer.metrics_lines())?;
        let checkpoints =
            Checkpoints { dir: self.dir.path().join("checkpoints"), stop: &NO_STOP, stop_after, write: true };
        trainer.run(&progress, &mut metrics, "student", Some(&checkpoints))
    }
}

/// Every variable of the trainer's student (weights and BatchNorm buffers), copied.
fn snapshot(trainer: &Trainer) -> Vec<(String, Tensor)> {
    let mut vars: Vec<(String, Tensor)> = trainer.vs().variables().into_iter().map(|(n, t)| (n, t.copy())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

fn assert_unchanged(before: &[(String, Tensor)], trainer: &Trainer) {
    for ((name, a), (_, b)) in before.iter().zip(snapshot(trainer)) {
        assert!(a.equal(&b), "{name} changed in a skipped step");
    }
}

#[test]
fn fp16_overflow_skips_the_step_backs_off_and_training_goes_on() {
    // One huge sample, at position 100 of epoch 0's order: step 4 (samples 96..128) overflows.
    let bad = permutation(1437, 0, 0)[100];
    let run = Fp16Run::new(&[bad]);
    let _guard = serial();
    let inputs = run.inputs();
    let (vs, student) = build_student(&run.spec, None, &run.cfg, Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&inputs, vs, student).unwrap();
    assert!(matches!(run.run(&mut trainer, Some(3)).unwrap(), RunEnd::Stopped { step: 3 }));
    assert_eq!(trainer.loss_scale(), Some(65536.0));
    let before = snapshot(&trainer);
    assert!(matches!(run.run(&mut trainer, Some(4)).unwrap(), RunEnd::Stopped { step: 4 }));
    // Skipped: weights and BatchNorm statistics as they were, the scale halved exactly.
    assert_unchanged(&before, &trainer);
    assert_eq!(trainer.loss_scale(), Some(32768.0));
    // The next step trains again at that scale.
    assert!(matches!(run.run(&mut trainer, Some(5)).unwrap(), RunEnd::Stopped { step: 5 }));
    assert!(!before.iter().zip(snapshot(&trainer)).all(|((_, a), (_, b))| a.equal(&b)));
    assert_eq!(trainer.loss_scale(), Some(32768.0));
    // To the end: 2 epochs of 45 steps, the bad sample's batch skipped once per epoch, and the
    // logged means leave the skipped NaN losses out.
    let RunEnd::Finished(outcome) = run.run(&mut trainer, None).unwrap() else { panic!("finished") };
    assert_eq!((outcome.steps, outcome.skipped_steps, outcome.final_scale), (90, 2, Some(16384.0)));
    assert!(outcome.losses.loss.is_finite() && outcome.losses.ce.is_finite(), "loss {}", outcome.losses.loss);
    for v in metrics_lines(&run.dir.path().join("metrics.jsonl")) {
        assert!(["loss", "kd", "ce"].iter().all(|k| v[k].as_f64().is_some_and(f64::is_finite)), "{v}");
    }
}

#[test]
fn fp16_stops_after_17_skips_in_a_row_with_one_line() {
    let run = Fp16Run::new(&(0..1437).collect::<Vec<i64>>());
    let _guard = serial();
    let inputs = run.inputs();
    let (vs, student) = build_student(&run.spec, None, &run.cfg, Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&inputs, vs, student).unwrap();
    let before = snapshot(&trainer);
    let e = run.run(&mut trainer, None).map(|_| ()).unwrap_err();
    assert!(matches!(e, DistillError::Overflow { skipped: 17, step: 17, epoch: 1, .. }), "{e}");
    // 17 halvings from 2^16: 2^-1.
    let text = e.to_string();
    assert!(text.starts_with("fp16: 17 steps in a row skipped for a non-finite loss or gradients (the last at step 17, epoch 1, loss NaN; loss scale backed off to 0.5)"), "{text}");
    assert!(!text.contains('\n'));
    assert_eq!(trainer.loss_scale(), Some(0.5));
    assert_unchanged(&before, &trainer);
}
