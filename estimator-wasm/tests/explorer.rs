//! The explorer's form (feature `explorer`, off by default) against the schema's rules: it reads
//! names by the same loose rule as the cfg.toml, and the sweep of a pasted cfg at the schema's
//! limits stays bounded, its depth lever refused on its own field.
//!
//! Without the feature (`cargo test -p estimator-wasm`) this file says it skipped them;
//! `cargo test -p estimator-wasm --features explorer` (run by scripts/test) runs them, with the
//! explorer's unit tests in `src/explorer/`.
#[cfg(not(feature = "explorer"))]
#[test]
fn explorer_tests_skipped_without_feature_explorer() {
    use std::io::Write;
    // straight to stderr: the test harness captures eprintln! of a passing test
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED the explorer's tests (tests/explorer.rs, src/explorer/): run \
         `cargo test -p estimator-wasm --features explorer` (scripts/test does)"
    );
}

#[cfg(feature = "explorer")]
mod form {
    use estimator_wasm::explorer::{ExplorerForm, FormField, CUSTOM};
    use estimator_wasm::schema::limits::MAX_LAYERS;
    use estimator_wasm::schema::Family;

    fn lm(student_layers: u64) -> String {
        format!(
            "[data]\ninput_shape = [16]\nclasses = 4\n[teacher]\nparams = 10\n[student]\nfamily = \"transformer\"\n\
             dropout = 0.1\n[student.transformer]\nvocab = 4\nlayers = {student_layers}\nd_model = 8\nheads = 2\n"
        )
    }

    /// The explorer's form reads the same names as the cfg.toml (JSON from the widget and links).
    #[test]
    fn the_form_matches_names_loosely() {
        let form: ExplorerForm =
            serde_json::from_str(r#"{"teacher": "GPT2", "family": "Transformer", "gpu": "h200"}"#).unwrap();
        assert_eq!(form.family, Family::Transformer);
        assert_eq!(form.config().unwrap().estimate.gpu.as_deref(), Some("H200"));
    }

    /// The explorer's whole sweep (a dozen compiled models) of a pasted cfg at the limit.
    #[test]
    fn the_sweep_of_a_pasted_cfg_at_the_limit_is_bounded() {
        let form = ExplorerForm::from_cfg(&lm(MAX_LAYERS), "H200").unwrap();
        assert_eq!(form.teacher, CUSTOM);
        let sweep = estimator_wasm::explorer::sweep::sweep(&form).unwrap();
        assert_eq!(sweep.plan.layers.len(), 8197);
        // the depth multiplier cannot take it past the limit: an error on the depth field
        let deeper = ExplorerForm { depth: 2.0, ..form };
        let e = deeper.config().unwrap_err();
        assert_eq!(
            (e.field, e.message),
            (Some(FormField::Depth), "student.transformer.layers: is 8192; must be between 1 and 4096".to_string())
        );
    }
}

/// The "MiniLM to a small encoder" scenario writes the example's cfg.toml, every scenario says
/// whether `distill` trains what it writes, and the Llama and GPT-2 scenarios name a model folder.
#[cfg(feature = "explorer")]
mod trainable {
    use std::collections::BTreeMap;

    use estimator_wasm::explorer::sweep::sweep;
    use estimator_wasm::explorer::{scenario, ExplorerForm, SCENARIOS};
    use estimator_wasm::schema::{untrainable, Precision};
    use estimator_wasm::Config;
    use serde_json::Value;

    /// Every leaf of a TOML document as `dotted.key -> value`.
    fn leaves(text: &str) -> BTreeMap<String, Value> {
        fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
            match v {
                Value::Object(m) => {
                    for (k, v) in m {
                        walk(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, v, out);
                    }
                }
                _ => {
                    out.insert(prefix.to_string(), v.clone());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk("", &basic_toml::from_str::<Value>(text).unwrap(), &mut out);
        out
    }

    /// The scenario's cfg.toml holds every key of `examples/{example}/student.toml` with the
    /// same value (the data paths from the repository root), and distill trains it.
    fn writes_the_example_cfg(key: &str, example: &str, min_keys: usize) {
        let form = ExplorerForm::for_scenario(scenario(key).unwrap(), "H200");
        let text = form.cfg_toml().unwrap();
        let config = Config::from_toml_str(&text).unwrap();
        assert_eq!(untrainable(&config), None);
        let exported = leaves(&text);
        let path = format!("{}/../examples/{example}/student.toml", env!("CARGO_MANIFEST_DIR"));
        let example = leaves(&std::fs::read_to_string(path).unwrap());
        assert!(example.len() >= min_keys, "{} keys", example.len());
        for (key, want) in &example {
            let got = exported.get(key).unwrap_or_else(|| panic!("{key} is missing from the scenario's cfg.toml"));
            match key.as_str() {
                // the example sits in examples/<name>/, the downloaded file at the repository root
                "data.train" | "data.test" | "data.tokenizer" => {
                    let want = want.as_str().unwrap().strip_prefix("../../").unwrap();
                    assert_eq!(got.as_str(), Some(want), "{key}");
                }
                _ => assert_eq!(got, want, "{key}"),
            }
        }
    }

    #[test]
    fn the_minilm_scenario_writes_the_example_cfg() {
        writes_the_example_cfg("all-minilm-l6-v2", "minilm", 30);
    }

    #[test]
    fn the_smollm2_scenario_writes_the_example_cfg() {
        writes_the_example_cfg("smollm2-135m", "smollm2", 35);
    }

    #[test]
    fn a_scaled_encoder_starts_from_random_weights() {
        let base = ExplorerForm::for_scenario(scenario("all-minilm-l6-v2").unwrap(), "H200");
        for (width, depth) in [(1.0, 2.0), (0.5, 1.0)] {
            let c = ExplorerForm { width, depth, ..base.clone() }.config().unwrap();
            assert!(c.student.init_from_teacher.is_empty(), "width {width}, depth {depth}");
        }
        assert_eq!(base.config().unwrap().student.init_from_teacher, vec![0, 4, 5]);
    }

    #[test]
    fn every_scenario_says_whether_distill_trains_it() {
        let lm = Some("distill cannot train this yet: a language model without text (set data.tokenizer)");
        let classifier = Some(
            "distill cannot train this yet: transformer classifiers (head = \"classifier\"); it trains sentence \
             encoders (head = \"embedding\")",
        );
        let want = [
            ("fashion-mnist-cnn", None),
            ("resnet50", None),
            ("vit-b16", None),
            ("all-minilm-l6-v2", None),
            ("bert-base", classifier),
            ("gpt2", None),
            ("smollm2-135m", None),
            ("llama-2-7b", None),
            ("llama-3-8b", None),
        ];
        let keys: Vec<&str> = SCENARIOS.iter().map(|s| s.key).collect();
        assert_eq!(keys, want.map(|(k, _)| k), "a new scenario needs its line here");
        for (key, note) in want {
            let s = sweep(&ExplorerForm::for_scenario(scenario(key).unwrap(), "H200")).unwrap();
            assert_eq!(s.untrainable.as_deref(), note, "{key}");
        }
        // a recipe the trainer lacks is named on any scenario
        let mut form = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "H200");
        form.precision = estimator_wasm::schema::Precision::PureBf16;
        let note = sweep(&form).unwrap().untrainable.unwrap();
        assert!(note.ends_with("train.precision = \"pure_bf16\" (it trains fp32, fp16 and bf16)"), "{note}");
        // a language model without text is named where a scenario's data has none
        let mut lm_form = ExplorerForm::from_cfg(
            "[data]\ninput_shape = [16]\nclasses = 50\n[student]\nfamily = \"transformer\"\n[student.transformer]\n\
             vocab = 50\nlayers = 1\nd_model = 8\nheads = 2\n[teacher]\nparams = 1\n",
            "H200",
        )
        .unwrap();
        lm_form.batch = 1;
        assert_eq!(sweep(&lm_form).unwrap().untrainable.as_deref(), lm);
    }

    /// The Llama and GPT-2 scenarios' cfg.toml names the user's copy of the teacher's Hugging
    /// Face folder (`teacher.hf`, its `tokenizer.json` the data's) and says where to get it; the
    /// page prices the published checkpoint by its preset.
    #[test]
    fn the_decoder_scenarios_train_from_a_model_folder() {
        for (key, repo, dir, preset) in [
            ("gpt2", "openai-community/gpt2", "gpt2", "gpt2"),
            ("llama-2-7b", "meta-llama/Llama-2-7b-hf", "Llama-2-7b-hf", "llama-2-7b"),
            ("llama-3-8b", "meta-llama/Meta-Llama-3-8B", "Meta-Llama-3-8B", "llama-3-8b"),
        ] {
            let form = ExplorerForm::for_scenario(scenario(key).unwrap(), "H200");
            let text = form.cfg_toml().unwrap();
            let exported = leaves(&text);
            assert_eq!(exported.get("teacher.hf"), Some(&Value::from(dir)), "{key}");
            assert_eq!(exported.get("teacher.preset"), None, "{key}");
            assert_eq!(exported.get("data.tokenizer"), Some(&Value::from(format!("{dir}/tokenizer.json"))), "{key}");
            assert_eq!(exported.get("data.train"), Some(&Value::from("train.txt")), "{key}");
            assert_eq!(exported.get("data.test"), Some(&Value::from("test.txt")), "{key}");
            assert!(text.contains(&format!("\n#   hf download {repo} --local-dir {dir}\n")), "{key}:\n{text}");
            assert!(
                text.contains("\n#   distill plan --student cfg.toml\n#   distill --student cfg.toml\n\n[data]"),
                "{key}:\n{text}"
            );
            assert_eq!(form.config().unwrap().teacher.preset.as_deref(), Some(preset), "{key}: the page's price");
            let s = sweep(&form).unwrap();
            assert_eq!((s.untrainable, s.folder.map(|f| (f.repo, f.dir))), (None, Some((repo, dir))), "{key}");
            let t = form.config().unwrap().student.transformer.unwrap();
            if key == "gpt2" {
                // GPT-2's layout: learned positions, LayerNorm before each block, biases, tied head
                assert_eq!(
                    (t.rope_theta, t.max_positions, t.norm_position.name(), t.norm.name(), t.bias, t.tie_embeddings),
                    (None, 1024, "pre", "layer", true, true),
                    "{key}"
                );
                assert_eq!((t.layers, t.d_model, t.heads, t.vocab), (6, 768, 12, 50257));
            } else {
                // the student is a Llama: rotary positions, nothing added to its token embedding
                assert_eq!((t.rope_theta.is_some(), t.max_positions, t.bias), (true, 0, false), "{key}");
            }
        }
        assert!(sweep(&ExplorerForm::for_scenario(scenario("smollm2-135m").unwrap(), "H200"))
            .unwrap()
            .folder
            .is_none());
    }

    /// The Llama 2 scenario's cfg.toml with the page's levers at a student small enough to train
    /// in seconds (width 1/16, one layer, windows of 64 tokens, fp32) is
    /// `tests/fixtures/explorer-llama.toml`, byte for byte: the file the end-to-end test
    /// `explorer_folder` trains from a model folder (the tests crate builds without the explorer).
    #[test]
    fn the_llama_scenario_writes_the_fixture_the_end_to_end_test_trains() {
        let form = ExplorerForm {
            width: 1.0 / 16.0,
            depth: 1.0 / 22.0,
            input: 64,
            batch: 8,
            eval_batch: 8,
            precision: Precision::Fp32,
            teacher_precision: Precision::Fp32,
            ..ExplorerForm::for_scenario(scenario("llama-2-7b").unwrap(), "RTX-4090")
        };
        let t = form.config().unwrap().student.transformer.unwrap();
        assert_eq!((t.layers, t.d_model, t.heads, t.kv_heads, t.mlp_width), (1, 128, 2, Some(1), Some(352)));
        let path = format!("{}/../tests/fixtures/explorer-llama.toml", env!("CARGO_MANIFEST_DIR"));
        let text = form.cfg_toml().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "{path} is not the page's cfg.toml: write the right-hand text to it if the change is meant"
        );
    }

    /// The GPT-2 scenario's cfg.toml at a student small enough to train in seconds (width 1/12,
    /// one layer, windows of 64 tokens, fp32) is `tests/fixtures/explorer-gpt2.toml`, byte for
    /// byte: the file the end-to-end test `explorer_folder` trains from the GPT-2 fixture folder.
    #[test]
    fn the_gpt2_scenario_writes_the_fixture_the_end_to_end_test_trains() {
        let form = ExplorerForm {
            width: 1.0 / 12.0,
            depth: 1.0 / 6.0,
            input: 64,
            batch: 8,
            eval_batch: 8,
            precision: Precision::Fp32,
            teacher_precision: Precision::Fp32,
            ..ExplorerForm::for_scenario(scenario("gpt2").unwrap(), "RTX-4090")
        };
        let t = form.config().unwrap().student.transformer.unwrap();
        assert_eq!((t.layers, t.d_model, t.heads, t.mlp_width(), t.max_positions), (1, 64, 1, 256, 1024));
        let path = format!("{}/../tests/fixtures/explorer-gpt2.toml", env!("CARGO_MANIFEST_DIR"));
        let text = form.cfg_toml().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "{path} is not the page's cfg.toml: write the right-hand text to it if the change is meant"
        );
    }
}
