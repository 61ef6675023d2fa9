//! The exported student: PyTorch's `torch.jit.load` reads `student.pt` and gives the outputs
//! that the Rust student computes from `student.safetensors`.
use distill::inputs::data::ModelInput;
use e2e::{digits_config, fixture, load_student, python, train};
use estimator_wasm::Config;
use tch::{Device, Tensor};

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
    let student = load_student(&spec, &run.join("student.safetensors"));
    let x = Tensor::linspace(-2.0, 2.0, 16 * 64, (tch::Kind::Float, Device::Cpu)).reshape([16, 1, 8, 8]);
    let rust = tch::no_grad(|| student.forward(&ModelInput::new(x.shallow_clone()), false));
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

/// The digits test set, normalised as the cfg says, and its labels.
fn test_set(spec: &Config) -> (Tensor, Tensor) {
    let test = distill::inputs::data::Dataset::load(&fixture("digits-test.npz"), &spec.data, None).unwrap();
    let all = test.chunks(test.len()).next().unwrap();
    (all.input.x, all.labels.unwrap())
}

/// Logits of `x` through the student of `spec` rebuilt in Rust from a safetensors file (no
/// unit masks: what a user who loads the file gets).
fn from_safetensors(spec: &Config, file: &std::path::Path, x: &Tensor) -> Tensor {
    let student = load_student(spec, file);
    tch::no_grad(|| student.forward(&ModelInput::new(x.shallow_clone()), false))
}

/// Logits of `x` through a TorchScript file, loaded with libtorch as `torch.jit.load` does.
fn from_torchscript(file: &std::path::Path, x: &Tensor) -> Tensor {
    let module = tch::CModule::load(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    tch::no_grad(|| module.forward_ts(&[x]).unwrap())
}

#[test]
fn every_exported_form_computes_the_trained_function() {
    // Structured pruning under each activation and norm that allows it (a removed unit's
    // activation emits f(0): 0.5 for sigmoid); LayerNorm refuses structured pruning, so it runs
    // magnitude pruning. A CNN with two conv blocks and a hidden layer covers conv -> conv,
    // conv -> flatten -> linear and linear -> head after a pruned unit, with (norm = "none") and
    // without (norm = "batch") conv biases.
    for activation in ["relu", "gelu", "silu", "tanh", "sigmoid", "leaky_relu"] {
        for norm in ["none", "batch", "layer"] {
            let dir = tempfile::tempdir().unwrap();
            let (student, method) = match norm {
                "layer" => (format!("family = \"mlp\"\nnorm = \"layer\"\nactivation = \"{activation}\""), "magnitude"),
                _ => (
                    format!("family = \"cnn\"\nchannels = [4, 8]\nnorm = \"{norm}\"\nactivation = \"{activation}\""),
                    "structured",
                ),
            };
            let prune = format!("log_every = 10\n[prune]\nmethod = \"{method}\"\nsparsity = 0.5\nevery_steps = 3");
            let cfg = digits_config(
                dir.path(),
                &[
                    ("family = \"mlp\"", &student),
                    ("hidden = [32]", "hidden = [16]"),
                    ("epochs = 3", "epochs = 1"),
                    ("batch_size = 32", "batch_size = 128"),
                    ("log_every = 10", &prune),
                ],
            );
            let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), false).unwrap();
            let run = dir.path().join("run");
            let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
            let (x, y) = test_set(&spec);
            let mut forms = vec![("student.pt", from_torchscript(&run.join("student.pt"), &x))];
            if method == "structured" {
                let shrunk =
                    Config::from_toml_str(&std::fs::read_to_string(run.join("student.toml")).unwrap()).unwrap();
                assert_eq!((shrunk.student.channels.clone(), shrunk.student.hidden.clone()), (vec![2, 4], vec![8]));
                forms.push((
                    "student.safetensors + student.toml",
                    from_safetensors(&shrunk, &run.join("student.safetensors"), &x),
                ));
                forms.push((
                    "dense/student.safetensors",
                    from_safetensors(&spec, &run.join("dense/student.safetensors"), &x),
                ));
                forms.push(("dense/student.pt", from_torchscript(&run.join("dense/student.pt"), &x)));
            } else {
                forms.push(("student.safetensors", from_safetensors(&spec, &run.join("student.safetensors"), &x)));
            }
            let case = format!("{activation}, norm = {norm}, {method}");
            let reference = &forms[0].1;
            for (name, logits) in &forms {
                let diff = (logits - reference).abs().max().double_value(&[]);
                assert!(diff < 1e-5, "{case}: {name} differs from student.pt by {diff}");
                // The trained student's accuracy, measured in training on the same test set.
                let correct = logits.argmax(-1, false).eq_tensor(&y).sum(tch::Kind::Int64).int64_value(&[]);
                let accuracy = correct as f64 / 360.0;
                assert!(
                    (accuracy - report.student.test_accuracy.unwrap()).abs() < 1e-6,
                    "{case}: {name} {accuracy} vs {}",
                    report.student.test_accuracy.unwrap()
                );
            }
        }
    }
}

#[test]
fn exports_load_on_a_cpu_only_machine() {
    // Every tensor of both TorchScript files (parameters, buffers and the constants a trace
    // bakes in) must be on the CPU, loaded without map_location, and no op may name a CUDA
    // device. On a machine with CUDA the student trains there, which is the case that matters;
    // without one this still checks the files' contents.
    let device = if tch::Cuda::is_available() { "cuda" } else { "cpu" };
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(
        dir.path(),
        &[
            ("family = \"mlp\"", "family = \"cnn\"\nchannels = [4]\nnorm = \"batch\""),
            ("epochs = 3", "epochs = 1"),
            ("log_every = 10", "log_every = 10\n[prune]\nmethod = \"structured\"\nsparsity = 0.5\nevery_steps = 10"),
        ],
    );
    let opts = e2e::options(&fixture("teacher-scripted.pt"), &cfg, &dir.path().join("run"));
    let report = e2e::run(&distill::TrainOptions { device: device.into(), ..opts }).unwrap();
    assert!(report.device.starts_with(device), "{}", report.device);
    let script = "import sys, torch
for f in sys.argv[1:]:
    m = torch.jit.load(f)
    tensors = list(m.parameters()) + list(m.buffers()) + [
        n.output().toIValue() for n in m.inlined_graph.nodes()
        if n.kind() == 'prim::Constant' and n.output().type().kind() == 'TensorType']
    print(len(tensors), sorted({str(t.device) for t in tensors}), 'cuda' in m.code)";
    let run = dir.path().join("run");
    let out =
        python(script, &[run.join("student.pt").to_str().unwrap(), run.join("dense/student.pt").to_str().unwrap()]);
    // conv1.weight, conv1_bn and fc1_norm (weight, bias, running mean and variance each),
    // fc1 and head (weight, bias): 13 tensors, plus the dense student's unit masks of conv1
    // and fc1.
    assert_eq!(out, "13 ['cpu'] False\n15 ['cpu'] False\n", "{device}");
    // The safetensors files hold no device; both load into a CPU student (checked by
    // every_exported_form_computes_the_trained_function).
}
