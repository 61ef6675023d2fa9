//! GPT-2 and BERT model folders that distill cannot build, as `--teacher DIR`: a tensor missing
//! or of another shape than config.json makes it (named, with both shapes), a `model_type` it
//! does not build (the supported ones listed). One line each, exit 2, nothing written.
use std::path::Path;

use tch::Tensor;

use crate::common::{fixtures, Case};

/// Copies the fixture model folder `hf/{name}` to the case as `{name}/`, every tensor but
/// `drop`, and `config.json` with `from` replaced by `to`.
fn folder(case: &Case, name: &str, drop: &str, from: &str, to: &str) {
    let (src, dst) = (fixtures().join("hf").join(name), case.path(name));
    std::fs::create_dir(&dst).unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    assert!(config.contains(from), "{from}");
    std::fs::write(dst.join("config.json"), config.replacen(from, to, 1)).unwrap();
    std::fs::copy(src.join("tokenizer.json"), dst.join("tokenizer.json")).unwrap();
    let kept: Vec<(String, Tensor)> = Tensor::read_safetensors(src.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .filter(|(n, _)| n != drop)
        .collect();
    Tensor::write_safetensors(&kept, dst.join("model.safetensors")).unwrap();
}

/// The case with the text fixture (`text-student.toml`, its WordPiece tokenizer and sentences).
fn with_text(case: &Case) {
    for f in ["text-student.toml", "text-train.txt", "text-test.txt", "tokenizer.json"] {
        std::fs::copy(fixtures().join("text").join(f), case.path(f)).unwrap();
    }
}

#[test]
fn a_gpt2_folder_missing_a_tensor_names_it_and_its_shape() {
    let case = Case::with_lm();
    folder(&case, "gpt2", "transformer.h.1.mlp.c_fc.weight", "\"n_layer\": 2", "\"n_layer\": 2");
    let dir = case.path("gpt2");
    case.fails_with(
        "gpt2",
        "lm-student.toml",
        &[&format!(
            "{}: tensor transformer.h.1.mlp.c_fc.weight is missing (config.json makes it [32, 128])",
            dir.display()
        )],
    );
}

#[test]
fn a_bert_folder_whose_tensor_config_json_sizes_otherwise_names_both_shapes() {
    let case = Case::new();
    with_text(&case);
    folder(&case, "bert", "", "\"intermediate_size\": 64", "\"intermediate_size\": 48");
    let file = case.path("bert").join("model.safetensors");
    case.fails_with(
        "bert",
        "text-student.toml",
        &[&format!(
            "{}: tensor encoder.layer.0.intermediate.dense.weight has shape [64, 32] but config.json makes it [48, 32]",
            file.display()
        )],
    );
}

#[test]
fn an_unsupported_model_type_lists_the_supported_ones() {
    let case = Case::new();
    with_text(&case);
    folder(&case, "bert", "", "\"model_type\": \"bert\"", "\"model_type\": \"t5\"");
    let config = Path::new(&case.path("bert")).join("config.json");
    case.fails_with(
        "bert",
        "text-student.toml",
        &[&format!(
            "{}: model_type \"t5\" is not supported: distill builds llama, mistral, qwen2 (the Llama family), gpt2 and bert; give a TorchScript teacher for other models",
            config.display()
        )],
    );
}
