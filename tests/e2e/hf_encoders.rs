//! GPT-2 and BERT model folders as teachers (`tests/fixtures/hf/gpt2`, `hf/bert`, made by
//! `make_hf_fixtures.py`): GPT-2 (fp32) computes the logits `transformers` recorded and the BERT
//! (fp16, its modules.json pooling by the mean and normalising) the sentence embedding, over
//! right-padded batches; without modules.json the BERT pools by the plain mean; the plan counts
//! what the models read; runs distil students from both, named in the cfg's `[teacher] hf`.
use std::path::Path;

use distill::inputs::data::ModelInput;
use distill::inputs::hf::plan;
use distill::inputs::hf::weights::Checkpoint;
use distill::inputs::teacher::Teacher;
use e2e::{fixture, lm_config, metrics_lines, text_config, train};
use estimator_wasm::schema::Precision;
use tch::{Device, Kind, Tensor};

fn expected() -> Vec<(String, Tensor)> {
    Tensor::read_safetensors(fixture("hf/expected.safetensors")).unwrap()
}

fn get(expected: &[(String, Tensor)], name: &str) -> Tensor {
    expected.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1.shallow_clone()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}

fn load(dir: &Path) -> Teacher {
    Teacher::load(dir, None, Precision::Fp32, Device::Cpu).unwrap()
}

/// The plan's count of a folder, from its config.json (and headers) alone.
fn planned_params(dir: &Path) -> u64 {
    let config = distill::inputs::hf::read_config(dir).unwrap();
    plan::params(&config, &Checkpoint::open(dir).unwrap())
}

/// A copy of the fixture folder `dir` in `to` with every tensor renamed by `rename`.
fn renamed(dir: &Path, to: &Path, rename: impl Fn(&str) -> String) {
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(f), to.join(f)).unwrap();
    }
    let tensors = Tensor::read_safetensors(dir.join("model.safetensors")).unwrap();
    let tensors: Vec<(String, Tensor)> = tensors.into_iter().map(|(n, t)| (rename(&n), t)).collect();
    Tensor::write_safetensors(&tensors, to.join("model.safetensors")).unwrap();
}

#[test]
fn gpt2_computes_the_logits_transformers_recorded_over_a_padded_batch() {
    let expected = expected();
    let input = ModelInput { x: get(&expected, "input_ids"), mask: Some(get(&expected, "attention_mask")) };
    let dir = fixture("hf/gpt2");
    let teacher = load(&dir);
    // transformers' count (43,904), the head tied to wte
    assert_eq!((teacher.params, planned_params(&dir)), (43_904, 43_904));
    let want = get(&expected, "gpt2.logits");
    let diff = max_diff(&teacher.output(&input).unwrap(), &want);
    assert!(diff < 1e-4, "gpt2: logits differ from transformers' by {diff}");
    println!("gpt2: max |logits - transformers'| = {diff}");
    assert!(want.abs().max().double_value(&[]) > 1.0, "logits of a few units");
    // a bare GPT2Model's names (the Hub's original gpt2: `wte.weight`, `h.0.attn.c_attn.weight`)
    let bare = tempfile::tempdir().unwrap();
    renamed(&dir, bare.path(), |n| n.trim_start_matches("transformer.").to_string());
    let diff = max_diff(&load(bare.path()).output(&input).unwrap(), &want);
    assert!(diff < 1e-4, "gpt2 under GPT2Model's names: {diff}");
}

#[test]
fn bert_computes_the_pooled_embedding_transformers_recorded_and_the_plain_mean_without_modules() {
    let expected = expected();
    let (ids, mask) = (get(&expected, "bert.input_ids"), get(&expected, "bert.attention_mask"));
    let input = ModelInput { x: ids.shallow_clone(), mask: Some(mask.shallow_clone()) };
    let dir = fixture("hf/bert");
    let teacher = load(&dir);
    // transformers' 52,320 less the pooler (32 x 32 + 32), which a sentence embedding never runs
    assert_eq!((teacher.params, planned_params(&dir)), (51_264, 51_264));
    let want = get(&expected, "bert.embedding");
    let got = teacher.output(&input).unwrap();
    let diff = max_diff(&got, &want);
    assert!(diff < 1e-4, "bert: the embedding differs from transformers' by {diff}");
    println!("bert: max |embedding - transformers'| = {diff}");
    let norms = Vec::<f64>::try_from(got.norm_scalaropt_dim(2.0, [1i64], false).to_kind(Kind::Double)).unwrap();
    assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "modules.json normalises: {norms:?}");

    // the same folder without modules.json: the mean of the unpadded tokens' states, unnormalised
    let plain = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(dir.join(f), plain.path().join(f)).unwrap();
    }
    let states = get(&expected, "bert.last_hidden_state");
    let m = mask.to_kind(Kind::Float).unsqueeze(-1);
    let mean = (&states * &m).sum_dim_intlist(1, false, Kind::Float) / m.sum_dim_intlist(1, false, Kind::Float);
    let got = load(plain.path()).output(&input).unwrap();
    let diff = max_diff(&got, &mean);
    assert!(diff < 1e-4, "bert without modules.json: the mean differs from transformers' states by {diff}");
    println!("bert without modules.json: max |embedding - mean of transformers' states| = {diff}");
    // not the normalised embedding: the states' mean is far from unit length
    assert!(max_diff(&got, &want) > 0.1);

    // a checkpoint saved with a task head (`bert.` before every name) and the older LayerNorm
    // names (`gamma`, `beta`): the same embedding
    let old = tempfile::tempdir().unwrap();
    renamed(&dir, old.path(), |n| {
        format!("bert.{}", n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"))
    });
    let diff = max_diff(&load(old.path()).output(&input).unwrap(), &mean);
    assert!(diff < 1e-4, "bert under BertForPreTraining's old names: {diff}");
}

/// `[teacher] hf` names the GPT-2 folder (no `--teacher`): its parameters are the folder's and
/// the LM student learns from it (perplexity falls from the first epoch to the second).
#[test]
fn a_student_distils_from_a_gpt2_folder_named_in_the_cfg() {
    let dir = tempfile::tempdir().unwrap();
    let teacher_table = format!("[teacher]\nhf = {:?}\n\n[kd]", fixture("hf/gpt2"));
    // the Llama-shaped student starts from scratch: a GPT-2 has no Llama layer to copy
    let cfg = lm_config(dir.path(), &[("[kd]", &teacher_table), ("init_from_teacher = [1]\n", "")]);
    let report = train(Path::new(""), &cfg, dir.path(), false).unwrap();
    assert_eq!((report.teacher.params, report.teacher.path.ends_with("hf/gpt2")), (43_904, true));
    let epochs: Vec<f64> = metrics_lines(&dir.path().join("run/metrics.jsonl"))
        .iter()
        .filter(|l| l["kind"] == "epoch")
        .map(|l| l["perplexity"].as_f64().unwrap())
        .collect();
    assert!(epochs.len() == 2 && epochs[1] < epochs[0], "perplexity by epoch {epochs:?}");
}

/// `[teacher] hf` names the BERT folder for the text fixture's sentence-encoder student (its
/// tokenizer the same WordPiece): the student regresses the folder's normalised embedding and
/// its cosine with the teacher rises over the epochs.
#[test]
fn a_sentence_encoder_distils_from_a_bert_folder_named_in_the_cfg() {
    let dir = tempfile::tempdir().unwrap();
    let teacher_table = format!("[teacher]\nhf = {:?}\n\n[kd]", fixture("hf/bert"));
    let cfg = text_config(dir.path(), &[("[kd]", &teacher_table)]);
    let report = train(Path::new(""), &cfg, dir.path(), false).unwrap();
    assert_eq!((report.teacher.params, report.teacher.path.ends_with("hf/bert")), (51_264, true));
    let agreement: Vec<f64> = metrics_lines(&dir.path().join("run/metrics.jsonl"))
        .iter()
        .filter(|l| l["kind"] == "epoch")
        .map(|l| l["agreement"].as_f64().unwrap())
        .collect();
    assert!(agreement.len() == 3 && agreement[2] > agreement[0], "cosine with the teacher by epoch {agreement:?}");
}

/// `distill plan`'s teacher for the folders: the exact counts, and a layer list priced from
/// config.json (GPT-2's ends in its 512-token head, the BERT's in its normalised embedding); a
/// BERT whose embedding width is not `data.classes` is refused naming the width to set.
#[test]
fn the_plan_prices_gpt2_and_bert_folders_from_their_config() {
    let dir = tempfile::tempdir().unwrap();
    let spec =
        |cfg: &Path| estimator_wasm::schema::Config::from_toml_str(&std::fs::read_to_string(cfg).unwrap()).unwrap();
    let lm = spec(&lm_config(dir.path(), &[]));
    let gpt2 = distill::run::plan_command::teacher_model(&fixture("hf/gpt2"), &lm).unwrap();
    let layers = gpt2.layers.unwrap();
    assert_eq!(gpt2.params, 43_904);
    let weights: u64 = layers.iter().map(|l| l.op.params()).sum();
    assert_eq!(weights, 43_904, "the layer list holds the model's parameters, the head tied");
    let text = spec(&text_config(dir.path(), &[]));
    let bert = distill::run::plan_command::teacher_model(&fixture("hf/bert"), &text).unwrap();
    let weights: u64 = bert.layers.unwrap().iter().map(|l| l.op.params()).sum();
    assert_eq!((bert.params, weights), (51_264, 51_264));
    let narrow = spec(&text_config(dir.path(), &[("classes = 32", "classes = 16")]));
    let e = distill::run::plan_command::teacher_model(&fixture("hf/bert"), &narrow).unwrap_err().to_string();
    assert!(
        e.ends_with("config.json: the folder's sentence embedding is 32 wide (hidden_size 32, pooled mean (modules.json), normalised): set data.classes = 32"),
        "{e}"
    );
}
