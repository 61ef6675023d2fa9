//! The checks every test of a student written as a Hugging Face folder (`run/hf`) makes, whatever
//! its architecture (`hf_student.rs`: Llama, BERT; `explorer_folder.rs`: GPT-2): the report's
//! `student.hf`, config.json's keys, the tensors' names and shapes as libtorch reads the
//! safetensors file, distill reading the folder back to `student.pt`'s outputs, and
//! transformers loading it (`tests/hf_student_check.py`, the check independent of distill).
use std::path::Path;

use distill::export::section::HfExport;
use distill::inputs::data::ModelInput;
use distill::inputs::teacher::Teacher;
use distill::report::Report;
use e2e::{fixture, root};
use estimator_wasm::schema::Precision;
use serde_json::Value;
use tch::{CModule, Device, IValue, Kind, Tensor};

/// The JSON file at `path`.
pub(crate) fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts that `report` says the student was written to `run/hf` as `architecture`.
pub(crate) fn assert_written_as(report: &Report, architecture: &str) {
    let want = HfExport { folder: Some("hf".into()), architecture: Some(architecture.into()), not_written: None };
    assert_eq!(report.student.hf, want);
}

/// Asserts that `hf/config.json` holds each `(key, value)` of `want` (other keys are not looked at).
pub(crate) fn assert_config(hf: &Path, want: &[(&str, Value)]) {
    let config = read_json(&hf.join("config.json"));
    for (key, value) in want {
        assert_eq!(&config[key], value, "config.json {key}");
    }
}

/// The `(name, shape)` of every tensor of the safetensors `file` (libtorch's reader), sorted by name.
pub(crate) fn tensor_shapes(file: &Path) -> Vec<(String, Vec<i64>)> {
    let mut shapes: Vec<(String, Vec<i64>)> =
        Tensor::read_safetensors(file).unwrap().into_iter().map(|(n, t)| (n, t.size())).collect();
    shapes.sort();
    shapes
}

/// A probe batch of `hf/expected.safetensors`: its tensors `{prefix}input_ids` and
/// `{prefix}attention_mask` (`""`: the language models' 3 rows of 12, 9 and 5 tokens,
/// right-padded; `"bert."`: the text fixture's probe lines).
pub(crate) fn probe(prefix: &str) -> ModelInput {
    let expected = Tensor::read_safetensors(fixture("hf/expected.safetensors")).unwrap();
    let get = |name: &str| {
        let name = format!("{prefix}{name}");
        expected.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no {name}")).1.shallow_clone()
    };
    ModelInput { x: get("input_ids"), mask: Some(get("attention_mask")) }
}

/// The outputs on `input` of `run/hf` loaded as a teacher (distill's own reader of the
/// architecture's folders), asserted to have `params` parameters, and of `run/student.pt` (the
/// traced student, called with the ids and the mask): `(folder's, student.pt's)`.
pub(crate) fn folder_and_student_pt(run: &Path, params: u64, input: &ModelInput) -> (Tensor, Tensor) {
    let folder = Teacher::load(&run.join("hf"), None, Precision::Fp32, Device::Cpu).unwrap();
    assert_eq!(folder.params, params);
    let got = folder.output(input).unwrap();
    let module = CModule::load(run.join("student.pt")).unwrap();
    let mask = input.mask.as_ref().unwrap();
    let traced = tch::no_grad(|| {
        module.forward_is(&[IValue::from(input.x.shallow_clone()), IValue::from(mask.shallow_clone())])
    });
    let IValue::Tensor(want) = traced.unwrap() else { panic!("student.pt returns one tensor") };
    (got, want)
}

/// Loads a language model's `run/hf` as a teacher, asserts it has `params` parameters and that
/// its logits on the probe batch are `run/student.pt`'s within 1e-4 on every real token (and not
/// vacuously: some logit above 1); returns the largest difference.
pub(crate) fn reads_back_as_student_pt(run: &Path, params: u64) -> f64 {
    let input = probe("");
    let (got, want) = folder_and_student_pt(run, params, &input);
    let real = input.mask.as_ref().unwrap().unsqueeze(-1).to_kind(Kind::Float);
    let diff = ((&got - &want).abs() * &real).max().double_value(&[]);
    assert!(diff < 1e-4, "the folder's logits differ from student.pt's by {diff}");
    println!("distill's reading of the folder: max |logits - student.pt| = {diff}");
    assert!(want.abs().max().double_value(&[]) > 1.0, "vacuous: logits below 1");
    diff
}

/// Runs `tests/hf_student_check.py` on `run`: its words (`diff D ...`) after asserting
/// `D < 1e-4`, or `None` when it was skipped (no `transformers`), its reason printed; a skip
/// fails when `DISTILL_REQUIRE_PYTORCH` is set (`scripts/test`, after `scripts/setup` installed
/// transformers).
pub(crate) fn transformers_check(run: &Path) -> Option<Vec<String>> {
    let py = root().join(".venv/bin/python");
    let out = std::process::Command::new(&py).arg(root().join("tests/hf_student_check.py")).arg(run).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "hf_student_check.py failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    if let Some(reason) = stdout.trim().strip_prefix("skipped: ") {
        assert!(std::env::var_os("DISTILL_REQUIRE_PYTORCH").is_none(), "transformers check skipped: {reason}");
        println!("transformers check skipped: {reason}");
        return None;
    }
    println!("transformers: {}", stdout.trim());
    let words: Vec<String> = stdout.split_whitespace().map(String::from).collect();
    let diff: f64 = words[1].parse().unwrap();
    assert!(diff < 1e-4, "transformers' outputs differ from student.pt's by {diff}");
    Some(words)
}
