//! Students out as a Hugging Face folder: a Llama-shaped student distilled from the
//! llama fixture folder is written as `run/hf/` (config.json, Llama's names and shapes in
//! model.safetensors, the folder's tokenizer and special ids); distill reads that folder back
//! as a teacher computing what `student.pt` computes; and `transformers` loads it and agrees
//! with `student.pt` (`tests/hf_student_check.py`, skipped with its reason without
//! `transformers`). Likewise a BERT-style sentence encoder, as `BertModel` and
//! sentence-transformers' modules, which distill also reads back as a teacher. (The GPT-2-shaped
//! student, `GPT2LMHeadModel`, is checked where the explorer's GPT-2 scenario trains it:
//! `explorer_folder.rs`.)
use std::path::Path;

use distill::export::section::HfExport;
use distill::inputs::data::ModelInput;
use distill::inputs::teacher::Teacher;
use e2e::{fixture, lm_config, root, text_config, train};
use estimator_wasm::schema::Precision;
use serde_json::{json, Value};
use tch::{CModule, Device, IValue, Kind, Tensor};

pub(crate) fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The probe batch of `hf/expected.safetensors`: 3 rows of 12, 9 and 5 tokens, right-padded.
fn probe() -> ModelInput {
    let expected = Tensor::read_safetensors(fixture("hf/expected.safetensors")).unwrap();
    let get = |name: &str| expected.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    ModelInput { x: get("input_ids"), mask: Some(get("attention_mask")) }
}

#[test]
fn a_llama_student_is_written_as_a_model_folder_that_computes_its_logits() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = format!("tokenizer = {:?}\n", fixture("lm").join("tokenizer.json"));
    let teacher_table = format!("[teacher]\nhf = {:?}\n\n[kd]", fixture("hf/llama"));
    let cfg = lm_config(dir.path(), &[(&tokenizer, ""), ("[kd]", &teacher_table)]);
    let report = train(Path::new(""), &cfg, dir.path(), false).unwrap();
    let run = dir.path().join("run");
    let hf = run.join("hf");
    let want = HfExport { folder: Some("hf".into()), architecture: Some("LlamaForCausalLM".into()), not_written: None };
    assert_eq!(report.student.hf, want);
    assert_eq!(
        read_json(&run.join("report.json"))["student"]["hf"],
        json!({"folder": "hf", "architecture": "LlamaForCausalLM"})
    );
    assert!(
        !run.join("hf.tmp").exists() && run.join("student.pt").is_file() && run.join("student.safetensors").is_file()
    );

    // the fixture student: vocab 512, d 32, 1 layer, 4 heads, 2 kv heads, SwiGLU 64, tied
    let config = read_json(&hf.join("config.json"));
    for (key, value) in [
        ("architectures", json!(["LlamaForCausalLM"])),
        ("model_type", json!("llama")),
        ("vocab_size", json!(512)),
        ("hidden_size", json!(32)),
        ("intermediate_size", json!(64)),
        ("num_hidden_layers", json!(1)),
        ("num_attention_heads", json!(4)),
        ("num_key_value_heads", json!(2)),
        ("head_dim", json!(8)),
        ("rope_theta", json!(10000.0)),
        ("rms_norm_eps", json!(1e-5)),
        ("tie_word_embeddings", json!(true)),
        ("max_position_embeddings", json!(64)),
        ("bos_token_id", json!(0)),
    ] {
        assert_eq!(config[key], value, "config.json {key}");
    }
    let mut shapes: Vec<(String, Vec<i64>)> = Tensor::read_safetensors(hf.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.size()))
        .collect();
    shapes.sort();
    let l = "model.layers.0";
    let want: Vec<(String, Vec<i64>)> = [
        ("model.embed_tokens.weight".to_string(), vec![512, 32]),
        (format!("{l}.input_layernorm.weight"), vec![32]),
        (format!("{l}.mlp.down_proj.weight"), vec![32, 64]),
        (format!("{l}.mlp.gate_proj.weight"), vec![64, 32]),
        (format!("{l}.mlp.up_proj.weight"), vec![64, 32]),
        (format!("{l}.post_attention_layernorm.weight"), vec![32]),
        (format!("{l}.self_attn.k_proj.weight"), vec![16, 32]),
        (format!("{l}.self_attn.o_proj.weight"), vec![32, 32]),
        (format!("{l}.self_attn.q_proj.weight"), vec![32, 32]),
        (format!("{l}.self_attn.v_proj.weight"), vec![16, 32]),
        ("model.norm.weight".to_string(), vec![32]),
    ]
    .into_iter()
    .collect();
    assert_eq!(shapes, want);
    let header = std::fs::read(hf.join("model.safetensors")).unwrap();
    let len = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&header[8..8 + len]).unwrap();
    assert_eq!(header["__metadata__"], json!({"format": "pt"}));
    // the teacher folder's tokenizer and special ids
    let copied = std::fs::read(hf.join("tokenizer.json")).unwrap();
    assert_eq!(copied, std::fs::read(fixture("hf/llama/tokenizer.json")).unwrap());
    let ids = json!({"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0});
    assert_eq!(read_json(&hf.join("generation_config.json")), ids);
    assert_eq!(read_json(&hf.join("tokenizer_config.json")), json!({"tokenizer_class": "PreTrainedTokenizerFast"}));

    // distill reads the folder back as a teacher computing student.pt's logits, and
    // transformers' AutoModelForCausalLM agrees with student.pt (when installed)
    reads_back_as_student_pt(&run, report.student.params);
    if let Some(words) = transformers_check(&run) {
        assert_eq!((words[3].as_str(), words[5].as_str()), ("26", "4"), "{words:?}");
    }
}

/// Loads `run/hf` as a teacher (distill's own reader of the architecture's folders), asserts it
/// has `params` parameters and that its logits on the probe batch are `run/student.pt`'s within
/// 1e-4 on every real token (and not vacuously: some logit above 1); returns the largest
/// difference.
pub(crate) fn reads_back_as_student_pt(run: &Path, params: u64) -> f64 {
    let input = probe();
    let folder = Teacher::load(&run.join("hf"), None, Precision::Fp32, Device::Cpu).unwrap();
    assert_eq!(folder.params, params);
    let got = folder.output(&input).unwrap();
    let module = CModule::load(run.join("student.pt")).unwrap();
    let mask = input.mask.as_ref().unwrap();
    let traced = tch::no_grad(|| {
        module.forward_is(&[IValue::from(input.x.shallow_clone()), IValue::from(mask.shallow_clone())])
    });
    let IValue::Tensor(want) = traced.unwrap() else { panic!("student.pt returns one tensor") };
    let real = mask.unsqueeze(-1).to_kind(Kind::Float);
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

/// The text fixture's sentence encoder narrowed to width 16 (so a projection `head` to the
/// teacher's 32 follows the mean pooling and precedes the normalisation) is written as a
/// `BertModel` with sentence-transformers' modules, which transformers runs to student.pt's
/// embeddings.
#[test]
fn a_bert_student_is_written_with_its_sentence_transformers_modules() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = text_config(dir.path(), &[("d_model = 32", "d_model = 16")]);
    let report = train(&fixture("text/text-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let (run, hf) = (dir.path().join("run"), dir.path().join("run/hf"));
    let want = HfExport { folder: Some("hf".into()), architecture: Some("BertModel".into()), not_written: None };
    assert_eq!(report.student.hf, want);
    let config = read_json(&hf.join("config.json"));
    for (key, value) in [
        ("architectures", json!(["BertModel"])),
        ("model_type", json!("bert")),
        ("vocab_size", json!(1000)),
        ("hidden_size", json!(16)),
        ("num_hidden_layers", json!(1)),
        ("num_attention_heads", json!(4)),
        ("intermediate_size", json!(64)),
        ("hidden_act", json!("gelu")),
        ("max_position_embeddings", json!(64)),
        ("type_vocab_size", json!(2)),
        ("layer_norm_eps", json!(1e-12)),
    ] {
        assert_eq!(config[key], value, "config.json {key}");
    }
    let shapes = |file: &Path| {
        let mut s: Vec<(String, Vec<i64>)> =
            Tensor::read_safetensors(file).unwrap().into_iter().map(|(n, t)| (n, t.size())).collect();
        s.sort();
        s
    };
    let model = shapes(&hf.join("model.safetensors"));
    assert_eq!(model.len(), 5 + 16, "{model:?}");
    let l = "encoder.layer.0";
    for (name, shape) in [
        ("embeddings.word_embeddings.weight".to_string(), vec![1000, 16]),
        ("embeddings.position_embeddings.weight".to_string(), vec![64, 16]),
        ("embeddings.token_type_embeddings.weight".to_string(), vec![2, 16]),
        ("embeddings.LayerNorm.bias".to_string(), vec![16]),
        (format!("{l}.attention.self.query.weight"), vec![16, 16]),
        (format!("{l}.attention.self.value.bias"), vec![16]),
        (format!("{l}.attention.output.LayerNorm.weight"), vec![16]),
        (format!("{l}.intermediate.dense.weight"), vec![64, 16]),
        (format!("{l}.output.dense.weight"), vec![16, 64]),
        (format!("{l}.output.LayerNorm.bias"), vec![16]),
    ] {
        assert!(model.contains(&(name.clone(), shape)), "{name}: {model:?}");
    }
    let dense = shapes(&hf.join("2_Dense/model.safetensors"));
    assert_eq!(dense, [("linear.bias".to_string(), vec![32]), ("linear.weight".to_string(), vec![32, 16])]);
    let modules = read_json(&hf.join("modules.json"));
    let paths: Vec<&str> = modules.as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["", "1_Pooling", "2_Dense", "3_Normalize"]);
    assert!(hf.join("3_Normalize").is_dir() && !hf.join("generation_config.json").exists());
    assert_eq!(read_json(&hf.join("1_Pooling/config.json"))["pooling_mode_mean_tokens"], json!(true));
    assert_eq!(
        std::fs::read(hf.join("tokenizer.json")).unwrap(),
        std::fs::read(fixture("text/tokenizer.json")).unwrap()
    );

    // distill reads the folder back as a teacher (mean pooling, 2_Dense, normalisation): its
    // embeddings are student.pt's, on the text fixture's probe lines
    let expected = Tensor::read_safetensors(fixture("hf/expected.safetensors")).unwrap();
    let get = |name: &str| expected.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    let (ids, mask) = (get("bert.input_ids"), get("bert.attention_mask"));
    let folder = Teacher::load(&hf, None, Precision::Fp32, Device::Cpu).unwrap();
    assert_eq!(folder.params, report.student.params);
    let got = folder.output(&ModelInput { x: ids.shallow_clone(), mask: Some(mask.shallow_clone()) }).unwrap();
    let module = CModule::load(run.join("student.pt")).unwrap();
    let traced = tch::no_grad(|| module.forward_is(&[IValue::from(ids), IValue::from(mask)]));
    let IValue::Tensor(want) = traced.unwrap() else { panic!("student.pt returns one tensor") };
    assert_eq!(got.size(), [3, 32]);
    let diff = (&got - &want).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "the folder's embeddings differ from student.pt's by {diff}");
    println!("distill's reading of the BERT folder: max |embedding - student.pt| = {diff}");

    if let Some(words) = transformers_check(&run) {
        assert_eq!(words[3], "3", "{words:?}");
    }
}
