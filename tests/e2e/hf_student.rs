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

use e2e::{fixture, lm_config, text_config, train};
use serde_json::{json, Value};

use crate::hf_readback::{
    assert_config, assert_written_as, folder_and_student_pt, probe, read_json, reads_back_as_student_pt, tensor_shapes,
    transformers_check,
};

#[test]
fn a_llama_student_is_written_as_a_model_folder_that_computes_its_logits() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = format!("tokenizer = {:?}\n", fixture("lm").join("tokenizer.json"));
    let teacher_table = format!("[teacher]\nhf = {:?}\n\n[kd]", fixture("hf/llama"));
    let cfg = lm_config(dir.path(), &[(&tokenizer, ""), ("[kd]", &teacher_table)]);
    let report = train(Path::new(""), &cfg, dir.path(), false).unwrap();
    let run = dir.path().join("run");
    let hf = run.join("hf");
    assert_written_as(&report, "LlamaForCausalLM");
    assert_eq!(
        read_json(&run.join("report.json"))["student"]["hf"],
        json!({"folder": "hf", "architecture": "LlamaForCausalLM"})
    );
    assert!(
        !run.join("hf.tmp").exists() && run.join("student.pt").is_file() && run.join("student.safetensors").is_file()
    );

    // the fixture student: vocab 512, d 32, 1 layer, 4 heads, 2 kv heads, SwiGLU 64, tied
    assert_config(
        &hf,
        &[
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
        ],
    );
    let shapes = tensor_shapes(&hf.join("model.safetensors"));
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
    assert_written_as(&report, "BertModel");
    assert_config(
        &hf,
        &[
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
        ],
    );
    let model = tensor_shapes(&hf.join("model.safetensors"));
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
    let dense = tensor_shapes(&hf.join("2_Dense/model.safetensors"));
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
    let (got, want) = folder_and_student_pt(&run, report.student.params, &probe("bert."));
    assert_eq!(got.size(), [3, 32]);
    let diff = (&got - &want).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "the folder's embeddings differ from student.pt's by {diff}");
    println!("distill's reading of the BERT folder: max |embedding - student.pt| = {diff}");

    if let Some(words) = transformers_check(&run) {
        assert_eq!(words[3], "3", "{words:?}");
    }
}
