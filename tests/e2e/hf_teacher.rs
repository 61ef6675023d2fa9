//! Hugging Face model folders as teachers (`tests/fixtures/hf/`, made by
//! `make_hf_fixtures.py`): the native decoders of a llama (fp32, tied), a qwen2 (bf16 in three
//! shards, q/k/v biases, untied) and a mistral (fp16, head_dim 16, sliding window 8, llama3
//! rotary scaling) compute the logits `transformers` recorded, over a right-padded batch; a run
//! distils a student from the llama folder.
use distill::inputs::data::ModelInput;
use distill::inputs::teacher::Teacher;
use std::path::Path;

use e2e::{fixture, lm_config, metrics_lines, train};
use estimator_wasm::schema::Precision;
use tch::{Device, Kind, Tensor};

/// `expected.safetensors`: the probe batch and each model's logits by name.
fn expected() -> Vec<(String, Tensor)> {
    Tensor::read_safetensors(fixture("hf/expected.safetensors")).unwrap()
}

fn get(expected: &[(String, Tensor)], name: &str) -> Tensor {
    expected.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1.shallow_clone()
}

/// Every position of every line, the padded ones included, within 1e-4 of transformers' fp32
/// logits; the parameter counts are the models'.
#[test]
fn each_model_folder_computes_the_logits_transformers_recorded() {
    let expected = expected();
    let input = ModelInput { x: get(&expected, "input_ids"), mask: Some(get(&expected, "attention_mask")) };
    for (name, params) in [("llama", 34_976), ("qwen2", 48_416), ("mistral", 55_456)] {
        let teacher = Teacher::load(&fixture(&format!("hf/{name}")), None, Precision::Fp32, Device::Cpu).unwrap();
        assert_eq!(teacher.params, params, "{name}");
        let got = teacher.output(&input).unwrap();
        let want = get(&expected, &format!("{name}.logits"));
        assert_eq!(got.size(), want.size(), "{name}");
        let diff = (&got - &want).abs().max().double_value(&[]);
        assert!(diff < 1e-4, "{name}: logits differ from transformers' by {diff}");
        // not a vacuous match: the logits span units
        assert!(want.abs().max().double_value(&[]) > 1.0, "{name}");
    }
}

/// In its file's 16-bit dtype (teacher.precision = "bf16" for the bf16 qwen2 checkpoint) the
/// teacher runs without a cast of its weights and stays within bf16 rounding of fp32.
#[test]
fn a_16_bit_checkpoint_runs_in_its_own_precision() {
    let expected = expected();
    let input = ModelInput { x: get(&expected, "input_ids"), mask: Some(get(&expected, "attention_mask")) };
    let teacher = Teacher::load(&fixture("hf/qwen2"), None, Precision::Bf16, Device::Cpu).unwrap();
    let weights = teacher.named_parameters().unwrap();
    assert!(weights.iter().all(|(_, t)| t.kind() == Kind::BFloat16));
    let got = teacher.output(&input).unwrap();
    assert_eq!(got.kind(), Kind::Float);
    let want = get(&expected, "qwen2.logits");
    let diff = (&got - &want).abs().max().double_value(&[]);
    assert!(diff > 0.0 && diff < 0.1, "bf16 against fp32: {diff}");
}

/// A cfg whose `[teacher] hf` names the llama folder, without `data.tokenizer` and without
/// `--teacher`: the run takes the folder's teacher and tokenizer, its teacher measures the
/// perplexity Python measured for the same weights as TorchScript (`lm/expected.json`), the
/// student starts from its second layer (Hugging Face names) and learns from it.
#[test]
fn a_student_distils_from_a_model_folder_named_in_the_cfg() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = format!("tokenizer = {:?}\n", fixture("lm").join("tokenizer.json"));
    let teacher_table = format!("[teacher]\nhf = {:?}\n\n[kd]", fixture("hf/llama"));
    let cfg = lm_config(dir.path(), &[(&tokenizer, ""), ("[kd]", &teacher_table)]);
    let report = train(Path::new(""), &cfg, dir.path(), false).unwrap();
    assert_eq!(
        (report.teacher.params, report.teacher.path.ends_with("hf/llama")),
        (34_976, true),
        "{}",
        report.teacher.path
    );
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("lm/expected.json")).unwrap()).unwrap();
    let python_teacher = expected["test_perplexity"].as_f64().unwrap();
    let teacher = report.teacher.test_perplexity.unwrap();
    assert!(
        (teacher - python_teacher).abs() < 1e-3 * python_teacher,
        "teacher {teacher} against Python's {python_teacher}"
    );
    let epochs: Vec<f64> = metrics_lines(&dir.path().join("run/metrics.jsonl"))
        .iter()
        .filter(|l| l["kind"] == "epoch")
        .map(|l| l["perplexity"].as_f64().unwrap())
        .collect();
    let student = report.student.test_perplexity.unwrap();
    assert!(epochs.len() == 2 && epochs[1] < epochs[0], "perplexity by epoch {epochs:?}");
    assert!(student > teacher && student < 100.0, "student {student}, teacher {teacher} (vocabulary 512)");
}
