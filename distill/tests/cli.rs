//! The `distill` binary on bad input: each case must exit with code 2, print exactly one error
//! line naming the file (or key) and the fix, never panic, and leave no output folder behind.
use std::path::{Path, PathBuf};
use std::process::Command;

use tch::{Kind, Tensor};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// A temp folder holding a copy of the digits fixtures and a cfg.toml that points at them.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        for f in ["digits-train.npz", "digits-test.npz", "teacher-scripted.pt", "digits-student.toml"] {
            std::fs::copy(fixtures().join(f), dir.path().join(f)).unwrap();
        }
        Case { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces `from` by `to` in the cfg.toml.
    fn edit_config(&self, from: &str, to: &str) {
        let cfg = self.path("digits-student.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(text.contains(from), "fixture config lacks {from:?}");
        std::fs::write(&cfg, text.replacen(from, to, 1)).unwrap();
    }

    /// Runs distill with the case's teacher/config (overridable) and returns (code, stderr).
    fn run(&self, teacher: &str, config: &str) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["--teacher", self.path(teacher).to_str().unwrap()])
            .args(["--student", self.path(config).to_str().unwrap()])
            .args(["--out", self.path("run").to_str().unwrap(), "--device", "cpu", "--quiet"])
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Asserts a clean failure whose one line contains every `needle`.
    fn fails_with(&self, teacher: &str, config: &str, needles: &[&str]) {
        let (code, stderr) = self.run(teacher, config);
        assert_eq!(code, 2, "exit code; stderr: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "exactly one error line, got: {stderr}");
        assert!(lines[0].starts_with("error: "), "{stderr}");
        for needle in needles {
            assert!(lines[0].contains(needle), "expected {needle:?} in: {stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!self.path("run").exists() && !self.path("run.partial").exists(), "no output folder may remain");
    }

    fn write_npz(&self, name: &str, x: &Tensor, y: &Tensor) {
        Tensor::write_npz(&[("x", x), ("y", y)], self.path(name)).unwrap();
    }
}

/// Runs `script` with the project's Python (the `.venv` that scripts/setup makes), in `dir`.
fn python(dir: &Path, script: &str) {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup first", py.display());
    // a file, not `-c`: torch.jit.script reads the source of the classes it compiles
    std::fs::write(dir.join("make.py"), script).unwrap();
    let out = Command::new(&py).arg("make.py").current_dir(dir).output().unwrap();
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Scripts into `dir/name` a teacher whose forward is `logits = base(x)['logits']` (the fixture
/// teacher) followed by the Python line `body`, which returns the output.
fn wrapped_teacher(dir: &Path, name: &str, body: &str) {
    python(
        dir,
        &format!(
            "import torch
class T(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.jit.load('teacher-scripted.pt')
    def forward(self, x):
        logits = self.base(x)['logits']
        {body}
torch.jit.script(T().eval()).save('{name}')"
        ),
    );
}

/// The digits train inputs [1437, 1, 8, 8] (uint8, 0..16) and labels.
fn digits_train() -> (Tensor, Tensor) {
    let arrays = Tensor::read_npz(fixtures().join("digits-train.npz")).unwrap();
    let get = |name: &str| arrays.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    (get("x"), get("y"))
}

const TEACHER: &str = "teacher-scripted.pt";
const CFG: &str = "digits-student.toml";

#[test]
fn missing_teacher_file() {
    Case::new().fails_with("nope.pt", CFG, &["nope.pt", "cannot read the teacher", "--teacher"]);
}

#[test]
fn corrupt_teacher_file() {
    let case = Case::new();
    std::fs::write(case.path("bad.pt"), b"this is not a zip archive").unwrap();
    case.fails_with("bad.pt", CFG, &["bad.pt", "not a TorchScript file", "torch.jit.script"]);
}

#[test]
fn missing_config_file() {
    Case::new().fails_with(TEACHER, "absent.toml", &["absent.toml", "cannot read the student config"]);
}

#[test]
fn corrupt_config_file() {
    let case = Case::new();
    std::fs::write(case.path("broken.toml"), "[data\ninput_shape = ").unwrap();
    case.fails_with(TEACHER, "broken.toml", &["broken.toml", "line 1"]);
}

#[test]
fn unknown_key_names_line_and_column() {
    let case = Case::new();
    case.edit_config("hidden = [32]", "hiden = [32]");
    case.fails_with(TEACHER, CFG, &[CFG, "line 16, column 1", "unknown field `hiden`"]);
}

#[test]
fn out_of_range_value_names_the_key() {
    let case = Case::new();
    case.edit_config("alpha = 0.9", "alpha = 1.9");
    case.fails_with(TEACHER, CFG, &[CFG, "kd.alpha", "[0, 1]"]);
}

#[test]
fn precisions_only_the_estimator_prices_are_refused() {
    let case = Case::new();
    case.edit_config("[teacher]", "[teacher]\nprecision = \"bf16_master\"");
    case.fails_with(TEACHER, CFG, &[CFG, "teacher.precision", "for `distill plan`"]);
}

#[test]
fn missing_data_file() {
    let case = Case::new();
    std::fs::remove_file(case.path("digits-test.npz")).unwrap();
    case.fails_with(TEACHER, CFG, &["digits-test.npz", "cannot open as .npz"]);
}

#[test]
fn corrupt_data_file() {
    let case = Case::new();
    std::fs::write(case.path("digits-train.npz"), vec![7u8; 300]).unwrap();
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "numpy.savez"]);
}

#[test]
fn data_without_labels() {
    let case = Case::new();
    Tensor::write_npz(
        &[("x", Tensor::zeros([4, 1, 8, 8], (Kind::Uint8, tch::Device::Cpu)))],
        case.path("digits-train.npz"),
    )
    .unwrap();
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "no array named y"]);
}

#[test]
fn float_labels_are_rejected() {
    let case = Case::new();
    let x = Tensor::zeros([4, 1, 8, 8], (Kind::Uint8, tch::Device::Cpu));
    case.write_npz("digits-train.npz", &x, &Tensor::zeros([4], (Kind::Float, tch::Device::Cpu)));
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "labels must be integer class ids"]);
}

#[test]
fn labels_of_any_int_dtype_are_accepted_but_range_is_checked() {
    let case = Case::new();
    let x = Tensor::zeros([4, 1, 8, 8], (Kind::Uint8, tch::Device::Cpu));
    let y = Tensor::from_slice(&[0i16, 3, 12, 1]);
    case.write_npz("digits-train.npz", &x, &y);
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "labels y span 0..=12", "data.classes = 10"]);
}

#[test]
fn input_shape_mismatch() {
    let case = Case::new();
    let x = Tensor::zeros([4, 1, 7, 7], (Kind::Uint8, tch::Device::Cpu));
    case.write_npz("digits-train.npz", &x, &Tensor::from_slice(&[0i64, 1, 2, 3]));
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "[4, 1, 7, 7]", "data.input_shape = [1, 8, 8]"]);
}

#[test]
fn label_count_mismatch() {
    let case = Case::new();
    let x = Tensor::zeros([4, 1, 8, 8], (Kind::Uint8, tch::Device::Cpu));
    case.write_npz("digits-train.npz", &x, &Tensor::from_slice(&[0i64, 1, 2]));
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "y has shape [3]", "4 samples"]);
}

#[test]
fn teacher_classes_differ_from_config() {
    let case = Case::new();
    case.edit_config("classes = 10", "classes = 12");
    case.fails_with(TEACHER, CFG, &[TEACHER, "data.classes = 12", "the teacher has 10 classes"]);
}

#[test]
fn a_teacher_returning_class_indices_is_told_to_return_logits() {
    let case = Case::new();
    wrapped_teacher(case.dir.path(), "argmax.pt", "return logits.argmax(1)");
    case.edit_config("output = \"logits\"", "");
    case.fails_with(
        "argmax.pt",
        CFG,
        &["argmax.pt", "a 1-D tensor of shape [8]", "expected logits [N, classes] = [8, 10]"],
    );
}

#[test]
fn teacher_output_selector_must_exist() {
    let case = Case::new();
    case.edit_config("output = \"logits\"", "output = \"scores\"");
    case.fails_with(TEACHER, CFG, &[TEACHER, "teacher.output = \"scores\"", "\"logits\""]);
}

#[test]
fn teacher_rejects_the_input_shape() {
    // The scripted teacher is a CNN for [N, 1, 8, 8]; feeding flattened [N, 64] vectors fails in
    // its first convolution, which must read as a teacher error naming the input shape.
    let case = Case::new();
    case.edit_config("input_shape = [1, 8, 8]", "input_shape = [64]");
    case.fails_with(TEACHER, CFG, &[TEACHER, "forward failed on input [8, 64]"]);
}

#[test]
fn unusable_device_names_the_flag() {
    let case = Case::new();
    for (device, needle) in
        [("tpu", "--device tpu: use auto, cpu, cuda or cuda:N"), ("cuda:7", "--device cuda:7: libtorch sees")]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
            .args(["--student", case.path(CFG).to_str().unwrap(), "--device", device, "--quiet"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}

#[test]
fn existing_output_needs_overwrite_and_survives_a_failed_run() {
    let case = Case::new();
    std::fs::create_dir(case.path("run")).unwrap();
    std::fs::write(case.path("run/report.json"), "earlier").unwrap();
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--overwrite"), "{stderr}");
    // With --overwrite but a failing run, the earlier result stays.
    case.edit_config("lr = 0.01", "lr = 1e30");
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
        .args(["--student", case.path(CFG).to_str().unwrap()])
        .args(["--out", case.path("run").to_str().unwrap(), "--overwrite", "--device", "cpu", "--quiet"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("loss became") && stderr.contains("at step"), "{stderr}");
    assert_eq!(std::fs::read_to_string(case.path("run/report.json")).unwrap(), "earlier");
    assert!(!case.path("run.partial").exists());
}

#[test]
fn diverging_loss_stops_with_step_and_value() {
    let case = Case::new();
    case.edit_config("lr = 0.01", "lr = 1e30");
    case.fails_with(TEACHER, CFG, &["loss became", "at step 2 (epoch 1)", "lower train.lr"]);
}

/// Strips the timing fields, which differ between runs, from metrics.jsonl lines.
fn losses(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split(",\"samples_per_s\"").next().unwrap().to_string())
        .collect()
}

#[test]
fn ctrl_c_checkpoints_and_resume_finishes_the_same_run() {
    let case = Case::new();
    case.edit_config("epochs = 3", "epochs = 20");
    case.edit_config("hidden = [32]", "hidden = [32]\ndropout = 0.1");
    let bin = env!("CARGO_BIN_EXE_distill");
    let common = |out: &str| {
        let mut c = Command::new(bin);
        c.args(["--teacher", case.path(TEACHER).to_str().unwrap(), "--student", case.path(CFG).to_str().unwrap()])
            .args(["--out", case.path(out).to_str().unwrap(), "--device", "cpu", "--quiet"]);
        c
    };
    let child = common("run").stderr(std::process::Stdio::piped()).spawn().unwrap();
    let metrics = case.path("run.partial/metrics.jsonl");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&metrics).map(|t| t.lines().count()).unwrap_or(0) < 5 {
        assert!(start.elapsed().as_secs() < 120, "the run never got going");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("continue with `distill --resume"), "{stderr}");
    assert!(!case.path("run").exists());
    assert!(case.path("run.partial/checkpoints").read_dir().unwrap().count() >= 1);

    // the teacher moved since: resume says so and keeps the run; --teacher points at it
    std::fs::rename(case.path(TEACHER), case.path("moved.pt")).unwrap();
    let resume = |extra: &[&str]| {
        Command::new(bin)
            .args(["--resume", case.path("run").to_str().unwrap(), "--quiet"])
            .args(extra)
            .output()
            .unwrap()
    };
    let lost = resume(&[]);
    let stderr = String::from_utf8_lossy(&lost.stderr);
    assert_eq!(lost.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass --teacher"), "{stderr}");
    assert!(case.path("run.partial/run.json").is_file());
    let resumed = resume(&["--teacher", case.path("moved.pt").to_str().unwrap()]);
    std::fs::rename(case.path("moved.pt"), case.path(TEACHER)).unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("test accuracy"));
    assert!(!case.path("run.partial").exists());
    let unbroken = common("unbroken").output().unwrap();
    assert!(unbroken.status.success());
    assert_eq!(losses(&case.path("run/metrics.jsonl")), losses(&case.path("unbroken/metrics.jsonl")));
    let again = resume(&[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("that run has finished"));
}

#[test]
fn resume_without_an_interrupted_run_says_so() {
    let case = Case::new();
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .args(["--resume", case.path("nothing").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no interrupted run there"), "{stderr}");
}

#[test]
fn plan_prints_the_breakdown_and_the_largest_batch_per_gpu() {
    let case = Case::new();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["plan", "--student", case.path(CFG).to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--gpu", "T4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in
        ["student 2410 parameters, teacher 2762", "T4: 15.0 GiB -> fits", "largest micro-batch per GPU", "H200", "fc1 "]
    {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
    // JSON keeps exact bytes; the teacher count comes from the TorchScript file.
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--json", "--batch", "64"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["plan"]["params"]["teacher"], 2762);
    assert_eq!(plan["plan"]["params"]["student"], 2410);
    assert_eq!(plan["plan"]["batch"], 64);
    assert!(plan["max_batch"].as_array().unwrap().len() >= 8);
    // Without a teacher file the cfg must say how big the teacher is.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(CFG) && stderr.contains("pass --teacher"), "{stderr}");
    let out = run(&["--gpu", "TPU-v9"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: --gpu TPU-v9: unknown GPU") && stderr.lines().count() == 1, "{stderr}");
    // --set overrides reach the plan (they were once parsed and ignored)
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--set", "train.precision=bf16"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("precision bf16 autocast"));
}

#[test]
fn teacher_traced_in_training_mode_is_refused() {
    // eval() cannot undo a trace: dropout stays on (outputs change from call to call) and batch
    // norm keeps normalising with batch statistics (a sample's output depends on its batch).
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
from torch import nn
torch.manual_seed(0)
x = torch.randn(4, 1, 8, 8)
drop = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10)).train()
torch.jit.trace(drop, x, check_trace=False).save('drop.pt')
bn = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)).train()
torch.jit.trace(bn, x, check_trace=False).save('bn.pt')",
    );
    case.edit_config("output = \"logits\"", "");
    let fix = "re-export it in eval mode: call model.eval() before torch.jit.trace(model, example)";
    case.fails_with("drop.pt", CFG, &["drop.pt", "different logits for the same input on two calls", fix]);
    case.fails_with(
        "bn.pt",
        CFG,
        &["bn.pt", "change with the other samples in its batch", "a batch of 4 and of 8", fix],
    );
}

#[test]
fn teacher_nan_on_a_later_train_row_is_blamed_on_the_teacher_with_the_row() {
    // The teacher returns NaN for inputs whose first pixel is above 20 (normalised); only train
    // row 100 has one (pixel 200 -> (200 / 16 - 0.5) / 0.5 = 24), so the probe batch is clean.
    let case = Case::new();
    let nan_above_20 = "return torch.where(x.flatten(1)[:, :1] > 20, torch.full_like(logits, float('nan')), logits)";
    wrapped_teacher(case.dir.path(), "nan.pt", nan_above_20);
    let (x, y) = digits_train();
    let _ = x.get(100).get(0).get(0).get(0).fill_(200i64);
    case.write_npz("digits-train.npz", &x, &y);
    case.edit_config("output = \"logits\"", "");
    let needles = ["nan.pt", "returns NaN logits for row 100 of", "digits-train.npz", "the fault is in the teacher"];
    case.fails_with("nan.pt", CFG, &needles);
    // the same when the teacher runs on every batch instead of once into a cache
    case.edit_config("[teacher]", "[teacher]\ncache_logits = false");
    case.fails_with("nan.pt", CFG, &needles);
    // and, both ways, when data.holdout splits the file: the file's row, not the split's
    case.edit_config("test = \"digits-test.npz\"", "holdout = 0.25");
    case.fails_with("nan.pt", CFG, &needles);
    case.edit_config("cache_logits = false", "");
    case.fails_with("nan.pt", CFG, &needles);
}

#[test]
fn fp16_teacher_overflow_is_blamed_on_its_precision() {
    // Logits of about 1e5 are finite in fp32 but beyond fp16's 65504.
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
fc = torch.nn.Linear(64, 10)
with torch.no_grad():
    fc.weight.fill_(4000.0)
    fc.bias.zero_()
torch.jit.trace(torch.nn.Sequential(torch.nn.Flatten(), fc).eval(), torch.zeros(2, 1, 8, 8)).save('big.pt')",
    );
    case.edit_config("output = \"logits\"", "precision = \"fp16\"");
    case.fails_with(
        "big.pt",
        CFG,
        &["big.pt", "with teacher.precision = \"fp16\"", "in fp32 they are finite", "set teacher.precision = \"fp32\""],
    );
}

#[test]
fn a_16_bit_teacher_without_a_16_bit_kernel_is_blamed_on_its_precision() {
    // linalg.inv has no fp16 kernel: the forward fails for the precision, not the input shape
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
class T(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)
        self.m = torch.nn.Parameter(torch.eye(10) * 2)
    def forward(self, x):
        return self.fc(x.flatten(1)) @ torch.linalg.inv(self.m)
torch.jit.script(T().eval()).save('inv.pt')",
    );
    case.edit_config("output = \"logits\"", "precision = \"fp16\"");
    case.fails_with(
        "inv.pt",
        CFG,
        &[
            "inv.pt: forward fails with teacher.precision = \"fp16\" but works in fp32",
            "(RuntimeError: linalg.inv: Low precision dtypes not supported. Got Half)",
            "set teacher.precision = \"fp32\"",
        ],
    );
}

#[test]
fn nan_pixels_name_the_file_and_the_row() {
    let case = Case::new();
    let (x, y) = digits_train();
    let x = x.to_kind(Kind::Float);
    let _ = x.get(5).get(0).get(3).get(4).fill_(f64::NAN);
    let _ = x.get(9).get(0).get(0).get(0).fill_(f64::INFINITY);
    case.write_npz("digits-train.npz", &x, &y);
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "x row 5 holds NaN (2 row(s) in all hold NaN or inf)"]);
}

#[test]
fn train_and_test_inputs_on_different_scales_are_refused() {
    // float train inputs 0..16 against a uint8 test file 0..255
    let case = Case::new();
    let (x, y) = digits_train();
    case.write_npz("digits-train.npz", &x.to_kind(Kind::Float), &y);
    let test = Tensor::read_npz(fixtures().join("digits-test.npz")).unwrap();
    let get = |name: &str| test.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    let x255 = (get("x").to_kind(Kind::Float) * 16.0).clamp(0.0, 255.0).to_kind(Kind::Uint8);
    case.write_npz("digits-test.npz", &x255, &get("y"));
    case.fails_with(
        TEACHER,
        CFG,
        &[
            "digits-test.npz: its inputs x span [0.0000, 255.0000]",
            "train file",
            "digits-train.npz",
            "[0.0000, 16.0000]",
        ],
    );
}

#[test]
fn a_teacher_at_chance_level_is_reported_with_a_hint() {
    // data.scale = 1/255 on 0..16 digits squeezes every input to about -1: the teacher (98.9%
    // with scale 1/16) gets 42 of 360 right, below the most frequent class's 47.
    let case = Case::new();
    case.edit_config("scale = 0.0625", "scale = 0.00392156862745098");
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: the teacher's test accuracy 0.1167 is at chance level"), "{stderr}");
    assert!(stderr.contains("check that data.scale/mean/std"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("run/report.json")).unwrap()).unwrap();
    // accuracy is a mean in f32; the chance level a ratio of counts in f64
    assert_eq!(report["teacher"]["test_accuracy"].as_f64().unwrap() as f32, 42.0 / 360.0);
    assert_eq!(report["teacher"]["chance_accuracy"].as_f64().unwrap(), 47.0 / 360.0);
    assert!(report["teacher"]["warning"].as_str().unwrap().contains("at chance level"));
    // the right scale: no warning
    case.edit_config("scale = 0.00392156862745098", "scale = 0.0625");
    std::fs::remove_dir_all(case.path("run")).unwrap();
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("chance"), "{stderr}");
}

#[test]
fn resume_falls_back_to_the_newest_checkpoint_that_loads() {
    let case = Case::new();
    case.edit_config("seed = 0", "seed = 0\nsave_every = 10");
    let bin = env!("CARGO_BIN_EXE_distill");
    let train = |out: &str, extra: &[&str]| {
        Command::new(bin)
            .args(["--teacher", case.path(TEACHER).to_str().unwrap(), "--student", case.path(CFG).to_str().unwrap()])
            .args(["--out", case.path(out).to_str().unwrap(), "--device", "cpu", "--quiet"])
            .args(extra)
            .output()
            .unwrap()
    };
    let resume = |extra: &[&str]| {
        Command::new(bin)
            .args(["--resume", case.path("run").to_str().unwrap(), "--quiet"])
            .args(extra)
            .output()
            .unwrap()
    };
    let stopped = train("run", &["--stop-after-steps", "30"]);
    assert_eq!(stopped.status.code(), Some(130), "{}", String::from_utf8_lossy(&stopped.stderr));
    let ckpts = case.path("run.partial/checkpoints");
    let step = |n: u64| ckpts.join(format!("step-{n:09}"));
    assert!(step(20).is_dir() && step(30).is_dir());

    // a --stop-after-steps the run has already passed would never stop it: refused
    let early = resume(&["--stop-after-steps", "20"]);
    let stderr = String::from_utf8_lossy(&early.stderr);
    assert_eq!(early.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--stop-after-steps 20: student already stands at step 30"), "{stderr}");

    // a power loss left the newest checkpoint empty and a half-written one beside it
    std::fs::write(step(30).join("tensors.safetensors"), b"").unwrap();
    std::fs::write(step(30).join("state.json"), b"").unwrap();
    std::fs::create_dir(ckpts.join("step-000000040.tmp")).unwrap();
    let resumed = resume(&[]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("step-000000030 (unreadable checkpoint"), "{stderr}");
    assert!(stderr.contains(&format!("resuming from the newest that does, {}", step(20).display())), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(case.path("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");

    // the run ends exactly as an unbroken one: same losses, same weights
    let unbroken = train("unbroken", &[]);
    assert!(unbroken.status.success());
    assert_eq!(losses(&case.path("run/metrics.jsonl")), losses(&case.path("unbroken/metrics.jsonl")));
    let weights = |run: &str| std::fs::read(case.path(run).join("student.safetensors")).unwrap();
    assert_eq!(weights("run"), weights("unbroken"));
}

/// Runs the distill binary with `args` (CPU, quiet).
fn distill(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_distill")).args(args).args(["--quiet"]).output().unwrap()
}

/// Starts a run of the case into `out` and stops it after `steps` optimiser steps.
fn stopped_run(case: &Case, out: &str, steps: &str) {
    let (teacher, cfg, out) = (case.path(TEACHER), case.path(CFG), case.path(out));
    let args = ["--teacher", teacher.to_str().unwrap(), "--student", cfg.to_str().unwrap()];
    let stopped = distill(
        &[&args[..], &["--out", out.to_str().unwrap(), "--device", "cpu", "--stop-after-steps", steps]].concat(),
    );
    assert_eq!(stopped.status.code(), Some(130), "{}", String::from_utf8_lossy(&stopped.stderr));
}

/// (exit code, stderr) of `distill --resume <case>/<out> extra...`.
fn resume_run(case: &Case, out: &str, extra: &[&str]) -> (i32, String) {
    let out = distill(&[&["--resume", case.path(out).to_str().unwrap()][..], extra].concat());
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn resume_refuses_a_changed_teacher_or_data_file_but_follows_a_moved_one() {
    let case = Case::new();
    stopped_run(&case, "run", "10");
    // another teacher (the traced one: other bytes) copied over the run's teacher
    std::fs::rename(case.path(TEACHER), case.path("own.pt")).unwrap();
    std::fs::copy(fixtures().join("teacher-traced.pt"), case.path(TEACHER)).unwrap();
    let (code, stderr) = resume_run(&case, "run", &[]);
    assert_eq!(code, 2, "{stderr}");
    let teacher = std::path::absolute(case.path(TEACHER)).unwrap();
    let own = std::fs::metadata(case.path("own.pt")).unwrap().len();
    assert!(
        stderr.contains(&format!("teacher {} is not the file the run started with ({own} bytes", teacher.display())),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // the train rows reversed: same size, other content
    let (x, y) = digits_train();
    case.write_npz("digits-train.npz", &x.flip([0]), &y.flip([0]));
    let (code, stderr) = resume_run(&case, "run", &["--teacher", case.path("own.pt").to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("data.train {} is not the file", case.path("digits-train.npz").display())),
        "{stderr}"
    );
    assert!(stderr.contains("put the run's own file back"), "{stderr}");
    assert!(case.path("run.partial/run.json").is_file(), "the run stays resumable");
    // the own files back (the teacher moved): the run finishes (named by its .partial folder)
    std::fs::copy(fixtures().join("digits-train.npz"), case.path("digits-train.npz")).unwrap();
    let (code, stderr) = resume_run(&case, "run.partial", &["--teacher", case.path("own.pt").to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(case.path("run/report.json").is_file() && !case.path("run.partial").exists());
}

#[test]
fn resume_refuses_a_changed_student_init() {
    // The baseline phase starts from student.init after the KD phase: a changed init would
    // give it other starting weights than the run began with.
    let case = Case::new();
    case.edit_config("hidden = [32]", "hidden = [32]\ninit = \"init.safetensors\"");
    let init = case.path("init.safetensors");
    let save_init = |scale: f64| {
        let text = std::fs::read_to_string(case.path(CFG)).unwrap().replace("init = \"init.safetensors\"", "");
        let spec = estimator_wasm::Config::from_toml_str(&text).unwrap();
        let (vs, _) = distill::student_run::build_student(&spec, &case.path(CFG), tch::Device::Cpu).unwrap();
        let _ = tch::no_grad(|| vs.variables()["fc1.weight"].shallow_clone().g_mul_scalar_(scale));
        vs.save(&init).unwrap();
    };
    save_init(1.0);
    stopped_run(&case, "run", "10");
    save_init(2.0);
    let (code, stderr) = resume_run(&case, "run", &[]);
    assert_eq!(code, 2, "{stderr}");
    let needle =
        format!("student.init {} is not the file the run started with", case.path("init.safetensors").display());
    assert!(stderr.contains(&needle), "{stderr}");
    assert!(stderr.contains("put the run's own file back"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn resume_repairs_a_cut_metrics_log_and_says_what_was_lost() {
    let case = Case::new();
    stopped_run(&case, "run", "50");
    let metrics = case.path("run.partial/metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let counted = text.lines().count();
    let whole = text[..300].matches('\n').count();
    assert!(whole < counted && !text[..300].ends_with('\n'), "the cut must fall inside a line");
    std::fs::write(&metrics, &text[..300]).unwrap();
    let (code, stderr) = resume_run(&case, "run", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("holds {whole} whole line(s) of the {counted} up to step 50 (cut or removed since)")),
        "{stderr}"
    );
    // every line is JSON again; the lost lines are missing and nothing else
    let unbroken = distill(&[
        "--teacher",
        case.path(TEACHER).to_str().unwrap(),
        "--student",
        case.path(CFG).to_str().unwrap(),
        "--out",
        case.path("unbroken").to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    assert!(unbroken.status.success());
    let lines = |run: &str| std::fs::read_to_string(case.path(run).join("metrics.jsonl")).unwrap();
    let resumed = lines("run");
    for line in resumed.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert_eq!(resumed.lines().count(), lines("unbroken").lines().count() - (counted - whole));

    // the log removed: all of it is lost, and said so
    stopped_run(&case, "gone", "50");
    std::fs::remove_file(case.path("gone.partial/metrics.jsonl")).unwrap();
    let (code, stderr) = resume_run(&case, "gone", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(&format!("holds 0 whole line(s) of the {counted} up to step 50")), "{stderr}");
}

#[test]
fn resume_without_checkpoints_says_it_starts_from_step_0() {
    let case = Case::new();
    for (out, remove) in [("emptied", false), ("deleted", true)] {
        stopped_run(&case, out, "10");
        let ckpts = case.path(&format!("{out}.partial/checkpoints"));
        for entry in std::fs::read_dir(&ckpts).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
        if remove {
            std::fs::remove_dir(&ckpts).unwrap();
        }
        let (code, stderr) = resume_run(&case, out, &[]);
        assert_eq!(code, 0, "{stderr}");
        let abs = std::path::absolute(&ckpts).unwrap();
        assert_eq!(stderr, format!("warning: student: no checkpoint in {}; starting from step 0\n", abs.display()));
    }
}

#[test]
fn resume_checks_where_the_run_will_finish_before_training() {
    let case = Case::new();
    stopped_run(&case, "v", "20");
    std::fs::create_dir(case.path("v")).unwrap();
    std::fs::write(case.path("v/mine.txt"), "mine").unwrap();
    let (code, stderr) = resume_run(&case, "v", &[]);
    assert_eq!(code, 2, "{stderr}");
    let v = case.path("v");
    assert_eq!(
        stderr,
        format!("error: --resume {0}: {0} exists and is not a finished distill run (no report.json), so the resumed run could not take its name: move it away, then resume again\n", v.display())
    );
    assert_eq!(std::fs::read_to_string(case.path("v/mine.txt")).unwrap(), "mine");
    assert!(case.path("v.partial/run.json").is_file(), "still resumable");
    std::fs::rename(case.path("v"), case.path("mine")).unwrap();
    let (code, stderr) = resume_run(&case, "v", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(case.path("v/report.json").is_file() && !case.path("v/run.json").exists());
}
