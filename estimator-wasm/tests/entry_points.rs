//! Every entry point (the cfg.toml, the Rust API's `Inputs` and arguments; the explorer's form in
//! tests/explorer.rs) checks a value the same way, and every name is looked up by one rule
//! (`estimator_wasm::schema::names`).
use estimator_wasm::schema::arch;
use estimator_wasm::schema::limits::MAX_LAYER_LIST;
use estimator_wasm::schema::{Activation, Precision, Target};
use estimator_wasm::{estimate, gpu, max_batch, Config, EstimateError, Gpu, Inputs, SpecError, TeacherModel};

const BASE: &str = "[data]\ninput_shape = [16]\nclasses = 4\n[student]\nfamily = \"mlp\"\nhidden = [8]\n";

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("{BASE}{extra}")).unwrap()
}

fn toml_error(extra: &str) -> EstimateError {
    EstimateError::Spec(Config::from_toml_str(&format!("{BASE}{extra}")).unwrap_err())
}

#[test]
fn the_api_refuses_what_the_toml_refuses_with_the_same_error() {
    let c = config("[teacher]\nparams = 10\n");
    // a teacher of 0 parameters
    let zero = TeacherModel { params: 0, buffers: 0, layers: None };
    let e = estimate(&c, &Inputs { teacher: Some(zero), ..Inputs::default() }).unwrap_err();
    assert_eq!(e, toml_error("[teacher]\nparams = 0\n"));
    assert_eq!(e.to_string(), "teacher.params: is 0; must be between 1 and 1125899906842624");
    // a teacher too large to price: 2^60 parameters of 4 bytes overflow 64 bits
    let huge = TeacherModel { params: 1 << 60, buffers: 0, layers: None };
    let e = estimate(&c, &Inputs { teacher: Some(huge), ..Inputs::default() }).unwrap_err();
    assert_eq!(e, toml_error(&format!("[teacher]\nparams = {}\n", 1u64 << 60)));
    assert_eq!(e.to_string(), "teacher.params: is 1152921504606846976; must be between 1 and 1125899906842624");
    // a teacher's layer list longer than any valid architecture expands into
    let layer = arch::layers(&c.student, &c.data).unwrap().remove(0);
    let layers = Some(vec![layer; MAX_LAYER_LIST + 1]);
    let long = TeacherModel { params: 10, buffers: 0, layers };
    let e = estimate(&c, &Inputs { teacher: Some(long), ..Inputs::default() }).unwrap_err();
    assert_eq!(e.to_string(), "teacher: has 8201 layers; at most 8200");
    // a micro-batch of 0 or past 2^40
    for b in [0, (1 << 40) + 1] {
        let e = estimate(&c, &Inputs { batch: Some(b), ..Inputs::default() }).unwrap_err();
        assert_eq!(e, toml_error(&format!("[teacher]\nparams = 10\n[train]\nbatch_size = {b}\n")));
    }
    // a safety margin out of [0, 1)
    let e = max_batch(&c, &Inputs::default(), gpu("T4").unwrap(), 1.5).unwrap_err();
    assert_eq!(e, toml_error("[teacher]\nparams = 10\n[estimate]\nsafety_margin = 1.5\n"));
}

#[test]
fn a_cpu_config_is_not_fitted_to_a_gpu_without_a_word() {
    let cpu = config("[teacher]\nparams = 10\n[estimate]\ntarget = \"cpu\"\n");
    let e = max_batch(&cpu, &Inputs::default(), gpu("T4").unwrap(), 0.05).unwrap_err();
    let message = "\"cpu\" prices a run on the CPU, but T4 is a GPU: set target = \"cuda\"";
    assert_eq!(e, EstimateError::Invalid { key: "estimate.target".into(), message: message.into() });
    // the CPU's own memory (a device without CUDA context, as distill passes it) is fitted:
    // the answer is the largest batch whose CPU total stays within 95% of 1 GiB
    let ram = Gpu { name: "cpu", memory: 1 << 30, cuda_context: 0, cublas_workspace: 0, bf16: true, mig_of: None };
    let b = max_batch(&cpu, &Inputs::default(), &ram, 0.05).unwrap().unwrap();
    let total = |b: u64| estimate(&cpu, &Inputs { batch: Some(b), ..Inputs::default() }).unwrap().totals.total;
    let budget = (1u64 << 30) - ((1u64 << 30) as f64 * 0.05).ceil() as u64;
    assert!(total(b) <= budget && total(b + 1) > budget, "{b}");
    // and a GPU name with target = "cuda" is priced on that GPU
    let cuda = config("[teacher]\nparams = 10\n[estimate]\ngpu = \"T4\"\n");
    assert_eq!(cuda.estimate.target, Target::Cuda);
    assert!(max_batch(&cuda, &Inputs::default(), gpu("T4").unwrap(), 0.05).unwrap().is_some());
}

#[test]
fn names_are_matched_loosely_and_stored_exactly() {
    let c = Config::from_toml_str(
        "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"mlp\"\nactivation = \" Leaky-ReLU\"\n\
         [teacher]\npreset = \"Fashion MNIST CNN\"\n[train]\nprecision = \"BF16\"\n[estimate]\ngpu = \"T4 \"\n",
    )
    .unwrap();
    assert_eq!(c.student.activation, Activation::LeakyRelu);
    assert_eq!(c.train.precision, Precision::Bf16);
    assert_eq!(c.teacher.preset.as_deref(), Some("fashion-mnist-cnn"));
    assert_eq!(c.estimate.gpu.as_deref(), Some("T4"));
    let text = c.to_toml_string();
    for exact in
        ["activation = \"leaky_relu\"", "preset = \"fashion-mnist-cnn\"", "precision = \"bf16\"", "gpu = \"T4\""]
    {
        assert!(text.contains(exact), "{exact} in\n{text}");
    }
    assert_eq!(estimate(&c, &Inputs::default()).unwrap().fit.unwrap().gpu.name, "T4");
    // the explorer's form reads the same names: tests/explorer.rs
    // a name that matches nothing lists the exact ones
    let e = Config::from_toml_str(&format!("{BASE}activation = \"relu6\"\n")).unwrap_err();
    let reason = "unknown variant `relu6`, expected one of `relu`, `gelu`, `silu`, `tanh`, `sigmoid`, `leaky_relu` \
                  for key `student.activation`";
    assert_eq!(e, SpecError::Parse { place: Some((7, 14)), reason: reason.into() });
}
