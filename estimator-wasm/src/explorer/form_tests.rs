//! Tests of the explorer's form: every scenario prices, levers reach the config, bad fields
//! are named, a pasted cfg.toml round-trips.
use crate::explorer::form::*;
use crate::explorer::form_field::{FormError, FormField};
use crate::explorer::scenarios::{scenario, InputKind, CUSTOM, SCENARIOS};
use crate::schema::limits::MAX_BATCH;
use crate::schema::*;

#[test]
fn every_scenario_and_family_gives_a_valid_config() {
    for s in &SCENARIOS {
        for &family in s.families {
            let mut e = ExplorerForm::for_scenario(s, "A100-80GB");
            e.family = family;
            let c = e.config().unwrap_or_else(|err| panic!("{} {family:?}: {err}", s.key));
            assert_eq!(InputKind::of(&c), s.input, "{}", s.key);
            assert_eq!(c.train.batch_size, BatchSize::Fixed(s.batch));
            assert_eq!(c.estimate.gpu.as_deref(), Some("A100-80GB"));
            let text = e.cfg_toml().unwrap();
            // the file names the teacher's folder where distill reads it, in place of the
            // preset the page prices; every other key is the priced config's
            let mut priced = Config::from_toml_str(&text).unwrap();
            if let Some(folder) = s.folder.filter(|f| f.trains()) {
                assert_eq!(priced.teacher.hf.as_deref(), Some(folder.dir), "{}", s.key);
                assert_eq!(priced.data.tokenizer, Some(format!("{}/tokenizer.json", folder.dir)), "{}", s.key);
                (priced.teacher.hf, priced.teacher.preset) = (None, c.teacher.preset.clone());
            }
            assert_eq!(priced, c, "{}: the cfg.toml parses back equal", s.key);
        }
    }
}

#[test]
fn scenario_teachers_have_their_published_sizes() {
    let params = |key: &str| {
        let c = ExplorerForm::for_scenario(scenario(key).unwrap(), "H200").config().unwrap();
        crate::estimate(&c, &crate::Inputs::default()).unwrap().params.teacher
    };
    assert_eq!(params("resnet50"), 25_557_032);
    assert_eq!(params("vit-b16"), 86_567_656);
    assert_eq!(params("gpt2"), 124_439_808);
    assert_eq!(params("fashion-mnist-cnn"), 421_738);
    // BERT-base less its token-type embeddings and pooler (the published count is 109.5M)
    assert_eq!(params("bert-base"), 108_891_650);
}

#[test]
fn unit_multipliers_keep_the_base_student() {
    let e = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
    let text = include_str!("../../../examples/fashion-mnist/student.toml");
    let example = Config::from_toml_str(text).unwrap();
    let c = e.config().unwrap();
    assert_eq!(c.student, example.student);
    assert_eq!(c.data.input_shape, vec![1, 28, 28]);
}

#[test]
fn width_and_depth_scale_the_student() {
    let mut e = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
    e.width = 2.0;
    e.depth = 1.5;
    let c = e.config().unwrap();
    assert_eq!(c.student.channels, vec![16, 32, 64]);
    assert_eq!(c.student.hidden, vec![64]);
    let small = e.config_at(0.25).unwrap();
    assert_eq!(small.student.channels, vec![4, 8, 16]);

    let mut e = ExplorerForm::for_scenario(scenario("llama-2-7b").unwrap(), "H200");
    e.width = 0.5;
    e.depth = 0.5;
    let t = e.config().unwrap().student.transformer.unwrap();
    assert_eq!((t.d_model, t.heads, t.kv_heads, t.mlp_width, t.layers), (1024, 16, Some(2), Some(2816), 11));
    // 3 heads cannot keep the 8:1 ratio: one key/value head
    let t = e.config_at(0.375).unwrap().student.transformer.unwrap();
    assert_eq!((t.heads, t.kv_heads), (6, Some(1)));
}

#[test]
fn input_size_sets_the_shape() {
    let mut e = ExplorerForm::for_scenario(scenario("resnet50").unwrap(), "A100-80GB");
    assert_eq!(e.input, 224);
    e.input = 112;
    assert_eq!(e.config().unwrap().data.input_shape, vec![3, 112, 112]);
    let mut e = ExplorerForm { input: 512, ..ExplorerForm::default() };
    assert_eq!(e.config().unwrap().data.input_shape, vec![512]);
    e.input = 2048;
    let err = e.config().unwrap_err();
    assert_eq!(err.field, Some(FormField::Input), "{err}");
    assert!(err.message.contains("1024"), "{err}");
}

#[test]
fn levers_reach_the_config() {
    let e = ExplorerForm {
        batch: 3,
        precision: Precision::Fp16,
        optimizer: OptimizerKind::Sgd,
        checkpointing: "4".into(),
        sparsity: 0.5,
        prune: PruneMethod::Structured,
        data_parallel: 8,
        zero_stage: 2,
        gpu: "h200".into(),
        ..ExplorerForm::default()
    };
    let c = e.config().unwrap();
    assert_eq!(c.train.batch_size, BatchSize::Fixed(3));
    assert_eq!((c.train.precision, c.train.optimizer), (Precision::Fp16, OptimizerKind::Sgd));
    assert_eq!(c.student.checkpointing, Checkpointing::Segments(4));
    let p = c.prune.unwrap();
    assert_eq!((p.sparsity, p.method), (0.5, PruneMethod::Structured));
    assert_eq!((c.estimate.data_parallel, c.estimate.zero_stage), (8, 2));
    assert_eq!(c.estimate.gpu.as_deref(), Some("H200"));
}

#[test]
fn bad_fields_are_named() {
    type Case = (fn(&mut ExplorerForm), FormField);
    let cases: [Case; 9] = [
        (|e| e.batch = 0, FormField::Batch),
        (|e| e.width = -1.0, FormField::Width),
        (|e| e.width = f64::NAN, FormField::Width),
        (|e| e.depth = 1e9, FormField::Depth),
        (|e| e.input = 0, FormField::Input),
        (|e| e.sparsity = 1.0, FormField::Sparsity),
        (|e| e.zero_stage = 4, FormField::ZeroStage),
        (|e| e.checkpointing = "often".into(), FormField::Checkpointing),
        (|e| e.gpu = "A100".into(), FormField::Gpu),
    ];
    for (set, field) in cases {
        let mut e = ExplorerForm::default();
        set(&mut e);
        assert_eq!(e.config().unwrap_err().field, Some(field));
    }
    let e = ExplorerForm { teacher: "gpt-5".into(), ..ExplorerForm::default() };
    assert_eq!(e.config().unwrap_err().field, Some(FormField::Teacher));
    let e = ExplorerForm { family: Family::Cnn, ..ExplorerForm::default() };
    assert_eq!(e.config().unwrap_err().field, Some(FormField::Family));
}

#[test]
fn a_pasted_cfg_fills_the_form_and_prices_the_same_file() {
    // without [teacher], distill reads the teacher's size from t.pt but the page needs a preset
    let text = include_str!("../../../examples/fashion-mnist/student.toml");
    let preset = "[teacher]\npreset = \"fashion-mnist-cnn\"";
    assert!(text.contains(preset), "the example names its teacher preset");
    let bare = text.lines().filter(|l| !preset.lines().any(|p| l.starts_with(p))).collect::<Vec<_>>().join("\n");
    let e = ExplorerForm::from_cfg(&bare, "T4").unwrap();
    assert_eq!(crate::explorer::sweep::sweep(&e).unwrap_err().field, Some(FormField::Teacher));
    let e = ExplorerForm::from_cfg(text, "T4").unwrap();
    assert_eq!((e.teacher.as_str(), e.family, e.input, e.batch), (CUSTOM, Family::Cnn, 28, 128));
    let mut expected = Config::from_toml_str(text).unwrap();
    expected.estimate.gpu = Some("T4".into());
    assert_eq!(e.config().unwrap(), expected);
    // a cfg.toml that names its GPU keeps it; "auto" becomes the largest batch that fits
    let auto = format!("{text}\n[estimate]\ngpu = \"rtx3090\"\n").replace("batch_size = 128", "batch_size = \"auto\"");
    let e = ExplorerForm::from_cfg(&auto, "T4").unwrap();
    assert_eq!(e.gpu, "RTX-3090");
    let c = Config::from_toml_str(&auto).unwrap();
    assert_eq!(
        Some(e.batch),
        crate::max_batch(&c, &crate::Inputs::default(), catalogue::gpu("RTX-3090").unwrap(), 0.05).unwrap()
    );
    // another family starts from a generic base student; a transformer cannot read images
    let mlp = ExplorerForm { family: Family::Mlp, ..ExplorerForm::from_cfg(text, "T4").unwrap() };
    assert_eq!(mlp.config().unwrap().student.hidden, vec![256, 128]);
    let transformer = ExplorerForm { family: Family::Transformer, ..mlp };
    assert_eq!(transformer.config().unwrap_err().field, Some(FormField::Family));
    let err = ExplorerForm::from_cfg("[data]\ninput_shape = [0]\n", "T4").unwrap_err();
    assert_eq!(err.field, Some(FormField::Cfg));
}

#[test]
fn absurd_sizes_are_errors_not_panics() {
    // a million tokens: the student's 1024 learned positions cannot embed them
    let e = ExplorerForm { width: 64.0, depth: 16.0, input: 1 << 20, batch: MAX_BATCH, ..ExplorerForm::default() };
    let positions = "student.transformer.max_positions: 1024 positions cannot embed sequences of 1048576 \
                     (data.input_shape); use 0 or >= 1048576";
    for scale in [0.25, 1.0, 4.0] {
        let err = e.config_at(scale).unwrap_err();
        assert_eq!((err.field, err.message.as_str()), (Some(FormField::Input), positions), "scale {scale}");
    }
    // within them, 2^40 samples of the widest and deepest student: an overflow, at the micro-batch
    let e = ExplorerForm { input: 1024, ..e };
    let overflow = "the step at micro-batch 1099511627776 overflows 64-bit bytes (more than 16 EiB): the plan \
                    is too large to price";
    for scale in [0.25, 1.0, 4.0] {
        let c = e.config_at(scale).unwrap();
        let t = c.student.transformer.as_ref().unwrap();
        // 6 layers x 16; 12 heads x 64 x scale, of 64 dimensions each
        assert_eq!((t.layers, t.heads, t.d_model), (96, (768.0 * scale) as u64, (768.0 * scale) as u64 * 64));
        let err = FormError::from(crate::estimate(&c, &crate::Inputs::default()).unwrap_err());
        assert_eq!((err.field, err.message.as_str()), (Some(FormField::Batch), overflow), "scale {scale}");
    }
}

#[test]
fn an_exported_transformer_or_mlp_cfg_carries_no_conv_keys() {
    for (key, family) in [("gpt2", Family::Transformer), ("fashion-mnist-cnn", Family::Mlp)] {
        let mut e = ExplorerForm::for_scenario(scenario(key).unwrap(), "T4");
        e.family = family;
        let text = e.cfg_toml().unwrap();
        for conv in ["\nkernel =", "\npool ="] {
            assert!(!text.contains(conv), "{key} {family:?}: {conv:?} in\n{text}");
        }
        // what it exports (GPT-2: its folder in place of the preset) reads back the same
        assert_eq!(Config::from_toml_str(&text).unwrap(), e.export_config().unwrap(), "{key}: it reads back the same");
    }
    // a conv student keeps a kernel or pool that is not the default
    let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [8]\nkernel = 5\npool = \"avg\"\n";
    let out = Config::from_toml_str(text).unwrap().to_toml_string();
    assert!(out.contains("kernel = 5") && out.contains("pool = \"avg\""), "{out}");
}

#[test]
fn multipliers_and_sizes_have_their_real_limits() {
    let form = ExplorerForm::default();
    for (field, edit, message) in [
        (FormField::Width, ExplorerForm { width: 1e-300, ..form.clone() }, "between 0.01 and 64"),
        (FormField::Width, ExplorerForm { width: 0.0099, ..form.clone() }, "between 0.01 and 64"),
        (FormField::Depth, ExplorerForm { depth: 17.0, ..form.clone() }, "between 0.01 and 16"),
        (FormField::Batch, ExplorerForm { batch: MAX_BATCH + 1, ..form.clone() }, "between 1 and 1,099,511,627,776"),
        (FormField::Input, ExplorerForm { input: MAX_INPUT + 1, ..form.clone() }, "between 1 and 1,048,576"),
        (
            FormField::DataParallel,
            ExplorerForm { data_parallel: MAX_GPUS + 1, ..form.clone() },
            "between 1 and 1,048,576",
        ),
    ] {
        let e = edit.check().unwrap_err();
        assert_eq!(e.field, Some(field), "{e}");
        assert!(e.message.contains(message), "{field:?}: {e}");
    }
    assert_eq!((MAX_BATCH, MAX_INPUT, MAX_GPUS), (1_099_511_627_776, 1_048_576, 1_048_576), "the messages' numbers");
    assert!(ExplorerForm { width: 0.01, depth: 0.01, ..form }.check().is_ok());
}

#[test]
fn a_pasted_cfgs_invalid_value_names_its_key_and_line() {
    let cfg = |train: &str, layers: u64, gpu: &str| {
        format!(
            "[data]\ninput_shape = [64]\nclasses = 100\n[student]\nfamily = \"transformer\"\n\
             [student.transformer]\nlayers = {layers}\nd_model = 64\nheads = 4\nvocab = 100\nhead = \"lm\"\n\
             [train]\n{train}\n[estimate]\ngpu = \"{gpu}\"\n"
        )
    };
    for (text, want) in [
        (cfg("batch_size = 0", 2, "T4"), "train.batch_size (line 13): is 0; must be between 1 and"),
        (cfg("", 0, "T4"), "student.transformer.layers (line 7): is 0; must be between 1 and 4096"),
        (
            cfg("", 1_000_000_000, "T4"),
            "student.transformer.layers (line 7): is 1000000000; must be between 1 and 4096",
        ),
        (cfg("", 2, "TPU-v9"), "estimate.gpu (line 15): unknown GPU \"TPU-v9\""),
        (cfg("", 2, "T4").replace("heads = 4", "heads = 3"), "student.transformer.heads (line 9): must divide d_model"),
    ] {
        let e = ExplorerForm::from_cfg(&text, "T4").unwrap_err();
        assert_eq!(e.field, Some(FormField::Cfg), "{e}");
        assert!(e.message.starts_with(want), "{e}\nwant {want}");
    }
    let mut hidden = String::from("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [");
    hidden.push_str(&vec!["8"; 5000].join(", "));
    hidden.push_str("]\n");
    let e = ExplorerForm::from_cfg(&hidden, "T4").unwrap_err();
    assert_eq!(e.message, "student.hidden (line 6): has 5000 entries; at most 1024", "never cut silently");
    // a key left to its default is placed at its table's header
    let text = cfg("", 2, "T4");
    assert_eq!(toml_text::line_of(&text, "student.transformer.kv_heads"), Some(6));
    assert_eq!(toml_text::line_of(&text, "student.transformer.layers"), Some(7));
    assert_eq!(toml_text::line_of(&text, "prune.sparsity"), None);
}

#[test]
fn depth_never_cuts_a_block_list_short() {
    let mut hidden = String::from("[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [");
    hidden.push_str(&vec!["8"; 1000].join(", "));
    hidden.push_str("]\n");
    let mut form = ExplorerForm::from_cfg(&hidden, "T4").unwrap();
    assert_eq!(form.config().unwrap().student.hidden.len(), 1000);
    form.depth = 2.0;
    let e = form.config().unwrap_err();
    assert_eq!(
        (e.field, e.message.as_str()),
        (Some(FormField::Depth), "student.hidden: has 2000 entries; at most 1024")
    );
}

#[test]
fn an_overflowing_micro_batch_is_marked_at_the_batch() {
    let form = ExplorerForm { batch: MAX_BATCH, ..ExplorerForm::default() };
    let e = crate::explorer::sweep::sweep(&form).unwrap_err();
    assert_eq!(e.field, Some(FormField::Batch), "{e}");
    assert!(e.message.contains("micro-batch 1099511627776 overflows"), "{e}");
}

#[test]
fn the_evaluation_batch_is_a_field_of_the_form() {
    let form = ExplorerForm::for_scenario(scenario("resnet50").unwrap(), "T4");
    assert_eq!(form.eval_batch, 256, "the scenario's own");
    assert_eq!(form.config().unwrap().train.eval_batch_size, 256);
    let big = ExplorerForm { eval_batch: 1 << 20, ..form.clone() };
    assert_eq!(big.config().unwrap().train.eval_batch_size, 1 << 20);
    let plan = crate::estimate(&big.config().unwrap(), &crate::Inputs::default()).unwrap();
    assert_eq!(plan.peak_moment, crate::Moment::Evaluation, "a large evaluation batch can be the peak");
    let e = ExplorerForm { eval_batch: 0, ..form }.check().unwrap_err();
    assert_eq!(e.field, Some(FormField::EvalBatch));
    let text = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n[train]\neval_batch_size = 77\n";
    assert_eq!(ExplorerForm::from_cfg(text, "T4").unwrap().eval_batch, 77, "a pasted cfg's own");
}

#[test]
fn a_pasted_cfg_is_bounded_in_size() {
    let base = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n# ";
    let fits = format!("{base}{}\n", "x".repeat(MAX_CFG_BYTES - base.len() - 1));
    assert_eq!(fits.len(), MAX_CFG_BYTES);
    assert!(ExplorerForm::from_cfg(&fits, "T4").is_ok());
    let e = ExplorerForm::from_cfg(&format!("{fits}#"), "T4").unwrap_err();
    assert_eq!((e.field, e.message.as_str()), (Some(FormField::Cfg), "this cfg.toml is 4.0 MiB; at most 4 MiB"));
}

/// A pasted cfg.toml whose teacher's vocabulary is padded (`teacher.vocab`) is priced at the
/// teacher's width and exported with the key, so `distill` trains what the page planned.
#[test]
fn a_pasted_padded_teacher_vocabulary_is_priced_and_exported() {
    let cfg = |teacher: &str| {
        format!(
            "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 100\n[student]\nfamily = \"transformer\"\n\
             [student.transformer]\nlayers = 2\nd_model = 64\nheads = 4\nvocab = 100\nhead = \"lm\"\n\
             [teacher]\nparams = 1000\ncache_logits = false\n{teacher}[train]\nbatch_size = 8\n"
        )
    };
    let plain = ExplorerForm::from_cfg(&cfg(""), "T4").unwrap();
    let padded = ExplorerForm::from_cfg(&cfg("vocab = 228\n"), "T4").unwrap();
    let exported = padded.cfg_toml().unwrap();
    assert!(exported.contains("\nvocab = 228\n"), "{exported}");
    let logits = |f: &ExplorerForm| {
        let plan = crate::estimate(&f.config().unwrap(), &crate::Inputs::default()).unwrap();
        plan.moments.iter().map(|m| m.categories.get(crate::Cat::Logits)).max().unwrap()
    };
    // the teacher's fp32 logits [8, 64, 228] against [8, 64, 100], CUDA-rounded
    let grow = logits(&padded) - logits(&plain);
    assert!((8 * 64 * 128 * 4..=8 * 64 * 128 * 4 + 4096).contains(&grow), "{grow}");
}
