//! Both kinds of TorchScript teacher distil into a working student, and the report, metrics
//! and exports describe the run truthfully: its figures are checked against PyTorch's reading
//! of the files (never against the computation that produced them).
use std::path::Path;

use e2e::{digits_config, fixture, metrics_lines, python, train};

/// PyTorch's view of a finished digits run: the teacher's parameter count (`sum(p.numel())` of
/// the TorchScript module) and test accuracy, and for each exported student (`student.pt`
/// run on the test set normalised as the cfg says; parameters counted from the shapes in the
/// safetensors header, running statistics excluded) its parameters, test accuracy and top-1
/// agreement with the teacher.
fn measured(teacher: &Path, run: &Path, students: &[&str]) -> serde_json::Value {
    let script = "import sys, json, struct, numpy as np, torch
teacher, run, test = sys.argv[1:4]
d = np.load(test)
x = (torch.from_numpy(d['x']).float() * 0.0625 - 0.5) / 0.5
y = torch.from_numpy(d['y'])
def logits(out):
    return out['logits'] if isinstance(out, dict) else out[0] if isinstance(out, tuple) else out
t = torch.jit.load(teacher).eval()
with torch.no_grad():
    tp = logits(t(x)).argmax(1)
res = {'teacher_params': sum(p.numel() for p in t.parameters()),
       'teacher_acc': (tp == y).double().mean().item(), 'students': {}}
for name in sys.argv[4:]:
    s = torch.jit.load(f'{run}/{name}student.pt').eval()
    with torch.no_grad():
        sp = s(input=x).argmax(1)
    with open(f'{run}/{name}student.safetensors', 'rb') as f:
        header = json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))
    params = sum(int(np.prod(v['shape'])) for k, v in header.items() if k != '__metadata__' and 'running_' not in k)
    res['students'][name] = {'params': params, 'acc': (sp == y).double().mean().item(),
                             'agreement': (sp == tp).double().mean().item()}
print(json.dumps(res))";
    let test = fixture("digits-test.npz");
    let mut args = vec![teacher.to_str().unwrap(), run.to_str().unwrap(), test.to_str().unwrap()];
    args.extend(students);
    serde_json::from_str(&python(script, &args)).unwrap()
}

/// `a` and `b` are the same fraction of the 360 test samples.
fn same_count(a: f64, b: &serde_json::Value) {
    let b = b.as_f64().unwrap();
    assert!((a - b).abs() < 0.5 / 360.0, "{a} vs {b} (PyTorch)");
}

#[test]
fn scripted_teacher_with_dict_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), true).unwrap();
    let run = dir.path().join("run");

    assert!(report.teacher.test_accuracy.unwrap() > 0.97, "{}", report.teacher.test_accuracy.unwrap());
    assert!(report.student.test_accuracy.unwrap() > 0.9, "{}", report.student.test_accuracy.unwrap());
    assert!(report.student.agreement.unwrap() > 0.9);
    // Every figure as PyTorch measures it on the files: parameters (the student's by hand too:
    // 64*32+32 + 32*10+10), the ratio, and the accuracies of the exported students, which the
    // report takes from the last epoch's evaluation.
    let torch = measured(&fixture("teacher-scripted.pt"), &run, &["", "baseline/"]);
    assert_eq!(report.teacher.params, torch["teacher_params"].as_u64().unwrap());
    assert_eq!(report.teacher.params, 16 * 9 + 16 + 2 * 16 + 256 * 10 + 10);
    same_count(report.teacher.test_accuracy.unwrap(), &torch["teacher_acc"]);
    let (student, base) = (&torch["students"][""], &torch["students"]["baseline/"]);
    assert_eq!(report.student.params, student["params"].as_u64().unwrap());
    assert_eq!(report.student.params, 2080 + 330);
    let ratio = torch["teacher_params"].as_f64().unwrap() / student["params"].as_f64().unwrap();
    assert!((report.compression_ratio - ratio).abs() < 1e-12, "{} vs {ratio}", report.compression_ratio);
    same_count(report.student.test_accuracy.unwrap(), &student["acc"]);
    same_count(report.student.agreement.unwrap(), &student["agreement"]);
    assert_eq!((report.data.train_samples, report.data.test_samples), (1437, 360));

    // 1437 samples in batches of 32 -> 45 steps per epoch, 135 in all; a step line every 10
    // steps plus the last one, and one line per epoch.
    let lines = metrics_lines(&run.join("metrics.jsonl"));
    let steps: Vec<u64> = lines.iter().filter(|l| l["kind"] == "step").map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=13).map(|i| i * 10).chain([135]).collect::<Vec<_>>());
    assert_eq!(lines.iter().filter(|l| l["kind"] == "epoch").count(), 3);
    assert_eq!(report.student.steps, 135);
    assert_eq!(report.student.temperature, Some(4.0), "a logit loss reports its temperature");

    // The alpha = 0 baseline trains the same student on labels alone; the KD gain is the
    // difference of the exported students' accuracies as PyTorch measures them.
    let baseline = report.baseline.as_ref().unwrap();
    assert_eq!(baseline.alpha, 0.0);
    assert_eq!(baseline.final_losses.kd, 0.0);
    assert_eq!(baseline.params, base["params"].as_u64().unwrap());
    same_count(baseline.test_accuracy.unwrap(), &base["acc"]);
    let gain = 100.0 * (student["acc"].as_f64().unwrap() - base["acc"].as_f64().unwrap());
    assert!((report.kd_gain_points.unwrap() - gain).abs() < 1e-4, "{:?} vs {gain}", report.kd_gain_points);
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
    let torch = measured(&fixture("teacher-traced.pt"), &dir.path().join("run"), &[""]);
    assert_eq!(report.teacher.params, torch["teacher_params"].as_u64().unwrap());
    assert_eq!(report.teacher.params, 64 * 128 + 128 + 128 * 10 + 10);
    assert!(report.teacher.test_accuracy.unwrap() > 0.97, "{}", report.teacher.test_accuracy.unwrap());
    same_count(report.teacher.test_accuracy.unwrap(), &torch["teacher_acc"]);
    assert!(report.student.test_accuracy.unwrap() > 0.9, "{}", report.student.test_accuracy.unwrap());
    same_count(report.student.test_accuracy.unwrap(), &torch["students"][""]["acc"]);
    assert!(report.baseline.is_none());
    // CNN student: conv1 (no bias under BN) 36 + bn 8 + fc1 (4*4*4 -> 32) 2080 + its BN 64 + head 330.
    assert_eq!(report.student.params, torch["students"][""]["params"].as_u64().unwrap());
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
    assert!(
        (cached.student.final_losses.loss - live.student.final_losses.loss).abs()
            < 1e-3 * cached.student.final_losses.loss
    );
    assert!((cached.student.test_accuracy.unwrap() - live.student.test_accuracy.unwrap()).abs() <= 1.0 / 360.0);
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

/// On the CPU a teacher's convolution weights are restrided channels-last when it loads (its
/// convolutions and pooling then run in libtorch's faster kernels), and it computes what the
/// file computes as saved: the scripted CNN fixture's logits equal the module's own within 1e-5.
#[test]
fn a_cpu_teacher_runs_channels_last_with_the_files_values() {
    use distill::inputs::data::ModelInput;
    use distill::inputs::teacher::Teacher;
    use estimator_wasm::schema::{OutputSelector, Precision};
    use tch::{Device, IValue, Kind, Tensor};

    let path = fixture("teacher-scripted.pt");
    let teacher =
        Teacher::load(&path, Some(OutputSelector::Key("logits".into())), Precision::Fp32, Device::Cpu).unwrap();
    let weights: Vec<(String, Tensor)> =
        teacher.named_parameters().unwrap().into_iter().filter(|(_, t)| t.dim() == 4).collect();
    assert_eq!(weights.len(), 1);
    // conv [16, 1, 3, 3]: channels-last strides, the one input channel's included
    assert_eq!(weights[0].1.stride(), [9, 1, 3, 1], "{}", weights[0].0);

    tch::manual_seed(0);
    let x = Tensor::rand([32, 1, 8, 8], (Kind::Float, Device::Cpu));
    let got = teacher.output(&ModelInput::new(x.shallow_clone())).unwrap();
    let mut plain = tch::CModule::load(&path).unwrap();
    plain.set_eval();
    let IValue::GenericDict(out) = tch::no_grad(|| plain.forward_is(&[IValue::Tensor(x)])).unwrap() else {
        panic!("the fixture returns a dict")
    };
    let want = out
        .into_iter()
        .find_map(|(k, v)| match (k, v) {
            (IValue::String(k), IValue::Tensor(t)) if k == "logits" => Some(t),
            _ => None,
        })
        .unwrap();
    assert_eq!(got.size(), [32, 10]);
    let diff = (&got - &want).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "{diff}");
}

/// A teacher whose forward views a convolution weight (weight standardisation, as BiT's
/// ResNets: `w.view(out, -1)`), which channels-last strides refuse, still runs on the CPU: the
/// first forward that fails puts the file's strides back and runs again, with the module's own
/// values.
#[test]
fn a_teacher_that_views_its_weights_runs_with_the_files_strides() {
    use distill::inputs::data::ModelInput;
    use distill::inputs::teacher::Teacher;
    use estimator_wasm::schema::Precision;
    use tch::{Device, IValue, Kind, Tensor};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("standardised.pt");
    let script = "import sys, torch
import torch.nn.functional as F
class T(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)
    def forward(self, x):
        w = self.conv.weight.view(4, -1)
        w = ((w - w.mean(1, keepdim=True)) / (w.std(1, keepdim=True) + 1e-5)).view(self.conv.weight.shape)
        return self.fc(F.relu(F.conv2d(x, w, self.conv.bias)).flatten(1))
torch.manual_seed(0)
torch.jit.trace(T().eval(), torch.rand(1, 2, 6, 6)).save(sys.argv[1])";
    python(script, &[path.to_str().unwrap()]);

    let teacher = Teacher::load(&path, None, Precision::Fp32, Device::Cpu).unwrap();
    tch::manual_seed(0);
    let x = Tensor::rand([5, 2, 6, 6], (Kind::Float, Device::Cpu));
    let got = teacher.output(&ModelInput::new(x.shallow_clone())).unwrap();
    let again = teacher.output(&ModelInput::new(x.shallow_clone())).unwrap();
    let plain = tch::CModule::load(&path).unwrap();
    let IValue::Tensor(want) = tch::no_grad(|| plain.forward_is(&[IValue::Tensor(x)])).unwrap() else {
        panic!("the module returns a tensor")
    };
    assert_eq!(got.size(), [5, 3]);
    assert!((&got - &want).abs().max().double_value(&[]) < 1e-5);
    assert_eq!((&again - &got).abs().max().double_value(&[]), 0.0);
}
