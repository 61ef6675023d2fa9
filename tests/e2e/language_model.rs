//! Causal language-model distillation on the LM fixture (KJV lines, the tiny Llama teacher of
//! `make_lm_fixtures.py`, a byte-level BPE of 512 tokens): the decoder student (rotary
//! positions, grouped-query causal attention, RMSNorm, SwiGLU, tied embeddings) computing what
//! the teacher computes when copied from it, the packed text as Python counts it, token-level KD
//! training, resume and export checked against PyTorch.
use std::path::Path;

use distill::host::progress::Verbosity;
use distill::inputs::data::ModelInput;
use distill::inputs::teacher::Teacher;
use distill::student::{StudentInit, TeacherWeights};
use e2e::{fixture, lm_config, metrics_lines, python, run_stopped, serial, train};
use estimator_wasm::schema::Precision;
use estimator_wasm::Config;
use tch::{Device, Kind, Tensor};

/// `expected.json`'s three test lines as one right-padded batch (pad id 0) with its mask, and
/// each line's length.
fn expected_batch() -> (ModelInput, Vec<i64>, serde_json::Value) {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("lm/expected.json")).unwrap()).unwrap();
    let ids: Vec<Vec<i64>> = serde_json::from_value(expected["ids"].clone()).unwrap();
    let longest = ids.iter().map(Vec::len).max().unwrap();
    let (mut flat, mut mask) = (Vec::new(), Vec::new());
    for line in &ids {
        flat.extend(line.iter().copied().chain(std::iter::repeat_n(0, longest - line.len())));
        mask.extend((0..longest).map(|j| i64::from(j < line.len())));
    }
    let shape = [ids.len() as i64, longest as i64];
    let input = ModelInput {
        x: Tensor::from_slice(&flat).reshape(shape),
        mask: Some(Tensor::from_slice(&mask).reshape(shape)),
    };
    (input, ids.iter().map(|l| l.len() as i64).collect(), expected)
}

/// A student of the teacher's shape (2 layers) with both layers copied from it computes the
/// teacher's logits on every real position, with either attention kernel; and the teacher
/// file computes in Rust what it computed in Python when the fixtures were made.
#[test]
fn a_student_copied_whole_from_the_llama_teacher_computes_its_logits() {
    let (input, lengths, expected) = expected_batch();
    let teacher = Teacher::load(&fixture("lm/lm-teacher.pt"), None, Precision::Fp32, Device::Cpu).unwrap();
    let want = teacher.output(&input).unwrap();
    let head: Vec<Vec<Vec<f64>>> = serde_json::from_value(expected["logits_head"].clone()).unwrap();
    let sums: Vec<f64> = serde_json::from_value(expected["logits_sum"].clone()).unwrap();
    for (i, len) in lengths.iter().enumerate() {
        let got = Vec::<Vec<f64>>::try_from(want.get(i as i64).narrow(0, 0, 5).narrow(1, 0, 8).to_kind(Kind::Double))
            .unwrap();
        for (g, w) in got.iter().flatten().zip(head[i].iter().flatten()) {
            assert!((g - w).abs() < 1e-5, "line {i}: {g} against Python's {w}");
        }
        let sum = want.get(i as i64).narrow(0, 0, *len).sum(Kind::Double).double_value(&[]);
        assert!((sum - sums[i]).abs() < 1e-3 * (1.0 + sums[i].abs()), "line {i}: sum {sum} against {}", sums[i]);
    }
    let weights = TeacherWeights { params: teacher.named_parameters().unwrap(), sample: None };
    for kernel in ["flash", "math"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = lm_config(
            dir.path(),
            &[
                ("init_from_teacher = [1]", "init_from_teacher = [0, 1]"),
                ("layers = 1", "layers = 2"),
                ("\"flash\"", &format!("\"{kernel}\"")),
            ],
        );
        let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        let init = StudentInit { teacher: Some(&weights), file: None };
        let (_vs, student, copied) = {
            let _guard = serial();
            distill::student::build::build_student_from(&spec, init, &cfg, Device::Cpu).unwrap()
        };
        let copied = copied.unwrap();
        assert_eq!((copied.teacher_layers, copied.kept.len(), copied.prefix.as_str()), (2, 0, ""), "{copied:?}");
        let got = tch::no_grad(|| student.forward(&input, false));
        assert_eq!(got.size(), want.size());
        for (i, len) in lengths.iter().enumerate() {
            let (g, w) = (got.get(i as i64).narrow(0, 0, *len), want.get(i as i64).narrow(0, 0, *len));
            let diff = (g - w).abs().max().double_value(&[]);
            assert!(diff < 1e-4, "{kernel}: line {i} differs from the teacher by {diff}");
        }
    }
}

/// Distils the fixture with the CE-only baseline beside it: the packed windows are the ones
/// Python counts, both students learn (perplexity far below the vocabulary's 512 and falling),
/// the teacher's perplexity is measured on the same windows, and `student.pt` reproduces the
/// Rust student's logits in PyTorch.
#[test]
fn a_language_model_distils_beside_its_ce_baseline_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(dir.path(), &[]);
    let report = train(&fixture("lm/lm-teacher.pt"), &cfg, dir.path(), true).unwrap();
    let run = dir.path().join("run");

    let packing = report.data.train_text.as_ref().unwrap().packing.clone().unwrap();
    let count = "import sys, json
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
lines = [l for l in open(sys.argv[2], encoding='utf-8').read().split('\\n') if l.strip()]
print(len(lines), sum(len(t.encode(l).ids) + 1 for l in lines))";
    let train_file = fixture("lm/lm-train.txt");
    let out = python(count, &[fixture("lm/tokenizer.json").to_str().unwrap(), train_file.to_str().unwrap()]);
    let counts: Vec<u64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!((packing.lines, packing.tokens), (counts[0], counts[1]));
    let windows = report.data.train_text.as_ref().unwrap().lines;
    assert_eq!((windows, packing.dropped_tokens), (counts[1] / 64, counts[1] % 64));
    // distill plan prices the same windows (it counted the file's 1,500 lines before)
    let spec = estimator_wasm::schema::Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    let files = distill::config::DataFiles::of(&cfg, &spec).unwrap().unwrap();
    assert_eq!(distill::run::plan_command::dataset(&files, &spec).unwrap().train_samples, counts[1] / 64);

    // The teacher's perplexity on the packed test windows is Python's (make_lm_fixtures.py);
    // the KD student beats the same student trained on next-token CE alone from the same
    // initialisation, and both learn (the epochs' perplexity falls).
    let (_, _, expected) = expected_batch();
    let (s, b) = (&report.student, report.baseline.as_ref().unwrap());
    let teacher = report.teacher.test_perplexity.unwrap();
    let python_teacher = expected["test_perplexity"].as_f64().unwrap();
    assert!(
        (teacher - python_teacher).abs() < 1e-3 * python_teacher,
        "teacher {teacher} against Python's {python_teacher}"
    );
    let (kd, ce) = (s.test_perplexity.unwrap(), b.test_perplexity.unwrap());
    // the gain is the perplexity's: next-token accuracy points are not the verdict
    assert_eq!(report.kd_gain_points, None);
    assert!(report.summary().contains(&format!("test perplexity {kd:.2} against {ce:.2} with labels alone")));
    assert!(kd < ce && kd > teacher, "perplexity: KD student {kd}, CE-only student {ce}, teacher {teacher}");
    for dir in [run.clone(), run.join("baseline")] {
        let epochs: Vec<f64> = metrics_lines(&dir.join("metrics.jsonl"))
            .iter()
            .filter(|l| l["kind"] == "epoch")
            .map(|l| l["perplexity"].as_f64().unwrap())
            .collect();
        assert!(epochs.len() == 2 && epochs[1] < epochs[0], "{}: perplexity by epoch {epochs:?}", dir.display());
    }
    // next-token accuracy and top-1 agreement with the teacher are shares of the test tokens
    let (acc, agree) = (s.test_accuracy.unwrap(), s.agreement.unwrap());
    assert!(acc > 0.1 && acc < report.teacher.test_accuracy.unwrap() && agree > 0.3 && agree < 1.0, "{acc} {agree}");

    let script = "import sys, json, torch
from tokenizers import Tokenizer
run, tok, test = sys.argv[1:4]
t = Tokenizer.from_file(tok)
line = [l for l in open(test, encoding='utf-8') if l.strip()][0].rstrip('\\n')
ids = torch.tensor([t.encode(line).ids])
with torch.no_grad():
    logits = torch.jit.load(run + '/student.pt')(ids, torch.ones_like(ids))
print(json.dumps({'ids': ids[0].tolist(), 'logits': logits[0, :, :16].tolist()}))";
    let test_file = fixture("lm/lm-test.txt");
    let out = python(
        script,
        &[run.to_str().unwrap(), fixture("lm/tokenizer.json").to_str().unwrap(), test_file.to_str().unwrap()],
    );
    let py: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<i64> = serde_json::from_value(py["ids"].clone()).unwrap();
    let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    let student = e2e::load_student(&spec, &run.join("student.safetensors"));
    let x = Tensor::from_slice(&ids).unsqueeze(0);
    let rust = tch::no_grad(|| student.forward(&ModelInput { mask: Some(x.ones_like()), x }, false));
    let want: Vec<Vec<f64>> = serde_json::from_value(py["logits"].clone()).unwrap();
    let got = Vec::<Vec<f64>>::try_from(rust.get(0).narrow(1, 0, 16).to_kind(Kind::Double)).unwrap();
    let diff = got.iter().flatten().zip(want.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(diff < 1e-5, "student.pt differs from the Rust student by {diff}");
}

/// A stopped run resumes to the same losses and perplexities as an uninterrupted one.
#[test]
fn an_interrupted_language_model_run_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(dir.path(), &[("seed = 0", "seed = 0\nsave_every = 20")]);
    let teacher = fixture("lm/lm-teacher.pt");
    train(&teacher, &cfg, &dir.path().join("a"), false).unwrap();
    let out = dir.path().join("b/run");
    assert!(run_stopped(&teacher, &cfg, &out, 30).is_interrupt());
    {
        let _guard = serial();
        distill::resume(&out, None, None, Verbosity::Quiet, None, &distill::data_parallel::Launch::single()).unwrap();
    }
    let lines = |p: &Path| -> Vec<String> {
        metrics_lines(&p.join("metrics.jsonl"))
            .iter()
            .map(|v| format!("{} {} {} {}", v["step"], v["loss"], v["kd"], v["perplexity"]))
            .collect()
    };
    assert_eq!(lines(&dir.path().join("a/run")), lines(&out));
}

/// A narrower feed-forward takes the teacher's strongest SwiGLU neurons (gate and up rows of
/// the same neurons, down's columns); a student that is not Llama-shaped, or a layer the
/// teacher lacks, is refused naming the key.
#[test]
fn a_llama_teacher_initialises_narrower_students_and_refuses_others() {
    let teacher = Teacher::load(&fixture("lm/lm-teacher.pt"), None, Precision::Fp32, Device::Cpu).unwrap();
    let weights = TeacherWeights { params: teacher.named_parameters().unwrap(), sample: None };
    let by_name = |n: &str| weights.params.iter().find(|(name, _)| name == n).unwrap().1.shallow_clone();
    let build = |edits: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = lm_config(dir.path(), edits);
        let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        let _guard = serial();
        distill::student::build::build_student_from(
            &spec,
            StudentInit { teacher: Some(&weights), file: None },
            &cfg,
            Device::Cpu,
        )
    };
    let (vs, _, copied) = build(&[("mlp_width = 64", "mlp_width = 40")]).unwrap();
    assert_eq!(copied.unwrap().mlp_neurons, Some((40, 64)));
    let vars = vs.variables();
    let (gate, up, down) = (
        by_name("layers.1.mlp.gate_proj.weight"),
        by_name("layers.1.mlp.up_proj.weight"),
        by_name("layers.1.mlp.down_proj.weight"),
    );
    // the neurons kept: the 40 largest |[gate_n, up_n]| * |down[:, n]|, in the teacher's order
    let score =
        Tensor::cat(&[&gate, &up], 1).norm_scalaropt_dim(2, [1], false) * down.norm_scalaropt_dim(2, [0], false);
    let keep = score.topk(40, 0, true, true).1.sort(0, false).0;
    let fc1 = Tensor::cat(&[gate.index_select(0, &keep), up.index_select(0, &keep)], 0);
    assert!(vars["blk1_mlp.fc1.weight"].equal(&fc1));
    assert!(vars["blk1_mlp.fc2.weight"].equal(&down.index_select(1, &keep)));
    for (edits, want) in [
        (&[("norm = \"rms\"", "norm = \"layer\"")][..], "student.init_from_teacher copies a Llama teacher: set student.transformer.norm = \"rms\""),
        (&[("init_from_teacher = [1]", "init_from_teacher = [2]")][..], "student.init_from_teacher[0] = 2, but the teacher has 2 layers"),
        (&[("kv_heads = 2", "kv_heads = 4")][..], "student.init_from_teacher: the teacher's keys and values have 16 rows each, and the student's 4 key/value head(s) of 8 give 32: set student.transformer.kv_heads = 2"),
        (&[("heads = 4", "heads = 8")][..], "the student's 2 key/value head(s) of 4 give 8: set student.transformer.kv_heads = 4"),
        (&[("mlp_width = 64", "mlp_width = 80")][..], "set student.transformer.mlp_width = 64 or less"),
        (&[("bias = false", "bias = false\ntoken_types = 2")][..], "set student.transformer.token_types = 0"),
    ] {
        let e = build(edits).err().unwrap().to_string();
        assert!(e.contains(want), "{e}");
    }
}

/// A random split of a language model's windows is refused: neighbouring windows share text
/// (a window's last label is the next one's first token), so the test set would not be held out.
#[test]
fn a_random_split_of_a_language_models_windows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let test = format!("test = {:?}\n", fixture("lm").join("lm-test.txt"));
    let cfg = lm_config(dir.path(), &[(test.as_str(), "holdout = 0.1\n")]);
    let e = train(&fixture("lm/lm-teacher.pt"), &cfg, dir.path(), false).err().unwrap().to_string();
    assert!(e.contains("data.holdout") && e.contains("give data.test, a held-out .txt"), "{e}");
    assert!(!dir.path().join("run").exists() && !dir.path().join("run.partial").exists());
}
