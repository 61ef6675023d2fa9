//! The exported student: PyTorch's `torch.jit.load` reads `student.pt` and gives the outputs
//! that the Rust student computes from `student.safetensors`.
use e2e::{digits_config, fixture, python, train};
use estimator_wasm::Config;
use tch::{nn::VarStore, Device, Tensor};

#[test]
fn torchscript_in_python_equals_the_rust_student() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(
        dir.path(),
        &[
            ("family = \"mlp\"", "family = \"cnn\"\nchannels = [4, 8]\nnorm = \"batch\""),
            ("hidden = [32]", "hidden = [16]\ndropout = 0.1"),
        ],
    );
    train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    let run = dir.path().join("run");

    // Rebuild the student in Rust from the safetensors export and run it in eval mode.
    let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    let mut vs = VarStore::new(Device::Cpu);
    let student = distill::student::Student::new(&vs.root(), &spec).unwrap();
    vs.load(run.join("student.safetensors")).unwrap();
    let x = Tensor::linspace(-2.0, 2.0, 16 * 64, (tch::Kind::Float, Device::Cpu)).reshape([16, 1, 8, 8]);
    let rust = tch::no_grad(|| student.forward(&x, false));
    let inputs = dir.path().join("inputs.npy");
    let expected = dir.path().join("expected.npy");
    x.write_npy(&inputs).unwrap();
    rust.write_npy(&expected).unwrap();

    let script = "import sys, numpy as np, torch
m = torch.jit.load(sys.argv[1])
x = torch.from_numpy(np.load(sys.argv[2]))
want = torch.from_numpy(np.load(sys.argv[3]))
with torch.no_grad():
    got = m(x)
print(tuple(got.shape), float((got - want).abs().max()))";
    let out = python(
        script,
        &[run.join("student.pt").to_str().unwrap(), inputs.to_str().unwrap(), expected.to_str().unwrap()],
    );
    let (shape, diff) = out.trim().rsplit_once(' ').unwrap();
    assert_eq!(shape, "(16, 10)", "{out}");
    let diff: f64 = diff.parse().unwrap();
    assert!(diff < 1e-5, "max |python - rust| = {diff}");
}

#[test]
fn safetensors_names_are_the_layer_ids() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[("family = \"mlp\"", "family = \"cnn\"\nchannels = [4]\nnorm = \"batch\"")]);
    train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
    let tensors = Tensor::read_safetensors(dir.path().join("run/student.safetensors")).unwrap();
    let mut names: Vec<(String, Vec<i64>)> = tensors.into_iter().map(|(n, t)| (n, t.size())).collect();
    names.sort();
    let expected: Vec<(String, Vec<i64>)> = [
        ("conv1.weight", vec![4, 1, 3, 3]),
        ("conv1_bn.bias", vec![4]),
        ("conv1_bn.running_mean", vec![4]),
        ("conv1_bn.running_var", vec![4]),
        ("conv1_bn.weight", vec![4]),
        ("fc1.bias", vec![32]),
        ("fc1.weight", vec![32, 64]),
        ("fc1_norm.bias", vec![32]),
        ("fc1_norm.running_mean", vec![32]),
        ("fc1_norm.running_var", vec![32]),
        ("fc1_norm.weight", vec![32]),
        ("head.bias", vec![10]),
        ("head.weight", vec![10, 32]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(names, expected);
}
