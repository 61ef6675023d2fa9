//! The explorer's Llama 2 and GPT-2 scenarios as a user runs them: the cfg.toml the page
//! exports (`tests/fixtures/explorer-llama.toml`, `explorer-gpt2.toml`, which estimator-wasm's
//! tests `the_llama_scenario_writes_the_fixture_the_end_to_end_test_trains` and
//! `the_gpt2_scenario_writes_...` hold byte-equal to `ExplorerForm::cfg_toml`; this crate builds
//! without the explorer) in a folder of its own, the model folder at the name the file gives
//! (`Llama-2-7b-hf`, `gpt2`: here the tiny fixtures `hf/llama` and `hf/gpt2` stand in for
//! meta-llama/Llama-2-7b-hf and openai-community/gpt2) and two text files beside it, and the
//! folder's vocabulary (512) set as the file's header says for another folder.
use std::path::{Path, PathBuf};

use distill::inputs::hf::keys::{LANGUAGE_MODELS, SUPPORTED};
use distill::run::plan_command::PlanOptions;
use e2e::{fixture, metrics_lines, options, run};
use estimator_wasm::schema::HeadKind;
use serde_json::{json, Value};

use crate::hf_readback::{
    assert_config, assert_written_as, reads_back_as_student_pt, tensor_shapes, transformers_check,
};

/// The header's instruction for a folder other than the scenario's: its vocab_size.
const VOCAB: [&str; 2] = ["data.classes=512", "student.transformer.vocab=512"];

/// `dir` laid out as the exported cfg.toml `toml` (a fixture) asks: `cfg.toml`, the model folder
/// `folder/` (the fixture `hf/{model}`'s config.json, model.safetensors, tokenizer.json),
/// `train.txt` and `test.txt` (the language-model fixture's 1,500 KJV verses and 200 held-out
/// ones). Returns the cfg.toml's path.
fn user_folder(dir: &Path, toml: &str, folder: &str, model: &str) -> PathBuf {
    let cfg = dir.join("cfg.toml");
    std::fs::copy(fixture(toml), &cfg).unwrap();
    let to = dir.join(folder);
    std::fs::create_dir(&to).unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture(&format!("hf/{model}")).join(name), to.join(name)).unwrap();
    }
    for (name, from) in [("train.txt", "lm/lm-train.txt"), ("test.txt", "lm/lm-test.txt")] {
        std::fs::copy(fixture(from), dir.join(name)).unwrap();
    }
    cfg
}

/// The Llama 2 scenario's layout.
fn llama_folder(dir: &Path) -> PathBuf {
    user_folder(dir, "explorer-llama.toml", "Llama-2-7b-hf", "llama")
}

/// `distill plan --json` of `cfg` with the vocabulary overrides, parsed.
fn plan(cfg: &Path) -> Value {
    let opts = PlanOptions {
        student: cfg.to_path_buf(),
        teacher: None,
        gpu: None,
        batch: None,
        train_samples: None,
        test_samples: None,
        json: true,
        sets: VOCAB.map(String::from).to_vec(),
    };
    serde_json::from_str(&distill::run::plan_command::plan(&opts).unwrap()).unwrap()
}

/// The explorer exports a folder teacher for exactly the `model_type`s whose folders distill
/// reads as language models: of every type distill builds (a fixture folder each), those whose
/// model ends in an LM head; and the exported files name the folder, not a preset.
#[test]
fn the_explorer_names_the_folders_distill_reads() {
    assert_eq!(estimator_wasm::schema::HF_MODEL_TYPES, LANGUAGE_MODELS);
    for model_type in SUPPORTED {
        let config = distill::inputs::hf::read_config(&fixture(&format!("hf/{model_type}"))).unwrap();
        let head = distill::inputs::hf::plan::arch(&config).transformer.unwrap().head;
        assert_eq!(config.model_type(), model_type);
        assert_eq!(head == HeadKind::Lm, LANGUAGE_MODELS.contains(&model_type), "{model_type}: head {}", head.name());
    }
    for (file, dir) in [("explorer-llama.toml", "Llama-2-7b-hf"), ("explorer-gpt2.toml", "gpt2")] {
        let text = std::fs::read_to_string(fixture(file)).unwrap();
        let tokenizer = format!("tokenizer = \"{dir}/tokenizer.json\"\n");
        for line in [format!("hf = \"{dir}\"\n"), tokenizer, "train = \"train.txt\"\n".into()] {
            assert!(text.contains(&line), "the exported {file} lacks {line:?}");
        }
        assert!(!text.contains("preset"), "the folder, not a preset, describes the teacher:\n{text}");
    }
}

/// `distill plan` prices the teacher from the folder's config.json: its exact parameter count
/// (34,976, not Llama 2 7B's 6,738,415,616) and the same plan, byte for byte, as the same cfg
/// describing that config.json by hand in `[teacher.arch]` (2 layers, d 32, 4 heads of which 2
/// key/value, SwiGLU 64, RMSNorm, rotary base 10000, tied head over 512 tokens).
#[test]
fn distill_plan_prices_the_teacher_from_the_folders_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = llama_folder(dir.path());
    let folder = plan(&cfg);
    assert_eq!(folder["plan"]["params"]["teacher"], 34_976);
    let arch = "\n[teacher.arch]\nfamily = \"transformer\"\nactivation = \"silu\"\n[teacher.arch.transformer]\n\
                vocab = 512\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\nmlp_width = 64\nmlp = \"swiglu\"\n\
                norm = \"rms\"\nrope_theta = 10000.0\ntie_embeddings = true\nbias = false\n";
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("hf = \"Llama-2-7b-hf\"\n"));
    let by_hand = dir.path().join("by-hand.toml");
    std::fs::write(&by_hand, text.replace("hf = \"Llama-2-7b-hf\"\n", arch)).unwrap();
    let described = plan(&by_hand);
    assert_eq!(described["plan"]["params"]["teacher"], 34_976);
    for key in ["totals", "flops", "phases", "peak"] {
        assert_eq!(folder["plan"][key], described["plan"][key], "plan.{key}");
    }
    // the teacher's forward is in the step: 2 x its 34,816 multiply-adds a token, and attention
    let teacher = folder["plan"]["flops"]["teacher_forward"].as_u64().unwrap();
    let tokens = 8 * 64;
    assert!(teacher > 2 * 34_816 * tokens && teacher < 4 * 34_816 * tokens, "teacher forward {teacher} FLOPs");
}

/// `distill --student cfg` (no `--teacher`: the cfg's folder) with the vocabulary overrides,
/// into `dir/run`: its report, checked to be written and to name the teacher folder `folder`
/// of `params` parameters, and the step lines' losses.
fn train_from_folder(dir: &Path, cfg: &Path, folder: &str, params: u64) -> (distill::report::Report, Vec<f64>) {
    let out = dir.join("run");
    let opts = distill::TrainOptions { sets: VOCAB.map(String::from).to_vec(), ..options(Path::new(""), cfg, &out) };
    let report = run(&opts).unwrap();
    assert!(out.join("report.json").is_file(), "no report.json in {}", out.display());
    let teacher = (report.teacher.params, report.teacher.path.ends_with(folder));
    assert_eq!(teacher, (params, true), "{}", report.teacher.path);
    let metrics = metrics_lines(&out.join("metrics.jsonl"));
    let steps: Vec<f64> = metrics.iter().filter(|l| l["kind"] == "step").map(|l| l["loss"].as_f64().unwrap()).collect();
    let epochs = metrics.iter().filter(|l| l["kind"] == "epoch").count();
    assert!(epochs == 1 && steps.iter().all(|l| l.is_finite()), "{epochs} epochs, loss by step {steps:?}");
    (report, steps)
}

/// `distill --student cfg.toml` (no `--teacher`: the cfg's folder) trains the exported file: one
/// epoch of 64-token windows, a report.json whose teacher is the folder's, and a student that
/// learned from it (its held-out perplexity well under the 512 of a uniform guess, and falling).
#[test]
fn distill_trains_the_exported_cfg_from_the_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = llama_folder(dir.path());
    let (report, steps) = train_from_folder(dir.path(), &cfg, "Llama-2-7b-hf", 34_976);
    assert!(steps.len() >= 2 && steps[steps.len() - 1] < steps[0], "loss by step {steps:?}");
    let (student, teacher) = (report.student.test_perplexity.unwrap(), report.teacher.test_perplexity.unwrap());
    assert!(student.is_finite() && student < 200.0, "student perplexity {student} (vocabulary 512)");
    assert!(teacher < student, "teacher {teacher}, student {student}");
}

/// The GPT-2 scenario's exported cfg.toml (`explorer-gpt2.toml`: a 1-layer GPT-2-shaped student,
/// d 64, LayerNorm, learned positions, tied head) trains from the folder `gpt2/` it names
/// (here the 43,904-parameter fixture `hf/gpt2`): an epoch of steps, a report.json whose teacher
/// is the folder's, and the student written as a `GPT2LMHeadModel` folder (`run/hf`: the exact
/// GELU, Conv1D's transposed weights) that distill reads back, and transformers loads, to
/// `student.pt`'s logits.
#[test]
fn distill_trains_the_exported_gpt2_cfg_from_the_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = user_folder(dir.path(), "explorer-gpt2.toml", "gpt2", "gpt2");
    let (report, steps) = train_from_folder(dir.path(), &cfg, "gpt2", 43_904);
    assert!(!steps.is_empty(), "no step lines");
    let student = report.student.test_perplexity.unwrap();
    assert!(student.is_finite() && student < 512.0, "student perplexity {student} (vocabulary 512)");

    let (run, hf) = (dir.path().join("run"), dir.path().join("run/hf"));
    assert_written_as(&report, "GPT2LMHeadModel");
    assert_config(
        &hf,
        &[
            ("architectures", json!(["GPT2LMHeadModel"])),
            ("model_type", json!("gpt2")),
            ("vocab_size", json!(512)),
            ("n_embd", json!(64)),
            ("n_layer", json!(1)),
            ("n_head", json!(1)),
            ("n_inner", json!(256)),
            ("n_positions", json!(1024)),
            ("activation_function", json!("gelu")),
            ("layer_norm_epsilon", json!(1e-5)),
            ("tie_word_embeddings", json!(true)),
            // the folder's config.json (it has no generation_config.json)
            ("bos_token_id", json!(0)),
            ("eos_token_id", json!(0)),
        ],
    );
    let shapes = tensor_shapes(&hf.join("model.safetensors"));
    // 2 tables, 4 Conv1Ds and 2 LayerNorms with biases, ln_f; the tied head not stored
    assert_eq!(shapes.len(), 2 + 12 + 2, "{shapes:?}");
    let l = "transformer.h.0";
    for (name, shape) in [
        ("transformer.wte.weight".to_string(), vec![512, 64]),
        ("transformer.wpe.weight".to_string(), vec![1024, 64]),
        (format!("{l}.attn.c_attn.weight"), vec![64, 192]),
        (format!("{l}.attn.c_attn.bias"), vec![192]),
        (format!("{l}.mlp.c_fc.weight"), vec![64, 256]),
        (format!("{l}.mlp.c_proj.weight"), vec![256, 64]),
        (format!("{l}.ln_2.bias"), vec![64]),
        ("transformer.ln_f.weight".to_string(), vec![64]),
    ] {
        assert!(shapes.contains(&(name.clone(), shape)), "{name}: {shapes:?}");
    }
    // within 1e-5, not only 1e-4: the folder written with GPT-2's default gelu_new (the tanh
    // GELU) in place of the exact one measured 6.9e-5 (distill) and 8.9e-5 (transformers) here,
    // the exact one 6e-7 and 5e-7
    let diff = reads_back_as_student_pt(&run, report.student.params);
    assert!(diff < 1e-5, "distill's reading of the GPT-2 folder differs from student.pt's by {diff}");
    if let Some(words) = transformers_check(&run) {
        assert_eq!((words[3].as_str(), words[5].as_str()), ("26", "4"), "{words:?}");
        let diff: f64 = words[1].parse().unwrap();
        assert!(diff < 1e-5, "transformers' GPT2LMHeadModel differs from student.pt by {diff}");
    }
}
