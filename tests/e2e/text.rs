//! Sentence-encoder distillation on the text fixture (WordNet lines, the tiny BERT teacher of
//! `make_text_fixtures.py`): the whole text pipeline (tokenise, cache the teacher's embeddings,
//! train, resume, export, evaluate) checked against PyTorch's reading of the files.
use std::path::{Path, PathBuf};

use distill::host::progress::Verbosity;
use distill::inputs::data::{Dataset, TextLayout, TextTokenizer};
use distill::inputs::teacher_cache::{self, CacheKey};
use distill::TrainOptions;
use e2e::{fixture, load_student, metrics_lines, options, python, run, run_stopped, serial, text_config, train};
use estimator_wasm::Config;
use tch::Tensor;

/// Embeddings of the first `n` test sentences by the student exported in `run`
/// (`student.safetensors` loaded into a Rust student of `cfg`), with the token ids and mask they
/// were computed from, written to `out` as an npz for Python.
fn rust_embeddings(cfg: &Path, run: &Path, n: usize, out: &Path) {
    let spec = Config::from_toml_str(&std::fs::read_to_string(cfg).unwrap()).unwrap();
    let tokenizer = TextTokenizer::load(
        &fixture("text/tokenizer.json"),
        spec.data.input_shape[0],
        Some(1000),
        TextLayout::Sentences,
    )
    .unwrap();
    let test = Dataset::load(&fixture("text/text-test.txt"), &spec.data, Some(&tokenizer)).unwrap();
    let student = load_student(&spec, &run.join("student.safetensors"));
    let batch = test.chunks(n).next().unwrap();
    let embedding = tch::no_grad(|| student.forward(&batch.input, false));
    let mask = batch.input.mask.as_ref().unwrap();
    Tensor::write_npz(&[("ids", &batch.input.x), ("mask", mask), ("embedding", &embedding)], out).unwrap();
}

#[test]
fn a_sentence_encoder_distils_exports_and_reloads_in_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = text_config(dir.path(), &[]);
    let report = train(&fixture("text/text-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let (s, run) = (&report.student, dir.path().join("run"));
    // The teacher's geometry is learnt: mean cosine with the teacher and Spearman of pair cosines.
    assert!(s.agreement.unwrap() > 0.95, "cosine {:?}", s.agreement);
    assert!(s.spearman.unwrap() > 0.9, "spearman {:?}", s.spearman);
    assert_eq!((s.test_accuracy, report.teacher.test_accuracy), (None, None));
    assert_eq!(s.temperature, None, "an embedding loss has no temperature to report");
    // The data as tokenised: 2000 train lines, 24 of them over 64 tokens (Python's count).
    let text = report.data.train_text.as_ref().unwrap();
    assert_eq!((text.lines, text.blank_skipped, text.truncated, text.max_tokens), (2000, 0, 24, 64));
    assert_eq!(report.data.test_text.as_ref().unwrap().truncated, 3);
    // host memory is measured on CPU too: the process's peak resident set (libtorch alone holds
    // more than 64 MiB), beside the plan's prediction
    let memory = report.memory.as_ref().unwrap();
    assert!(memory.measured_peak_resident_bytes.unwrap() > 64 << 20, "{memory:?}");
    let epochs: Vec<_> =
        metrics_lines(&run.join("metrics.jsonl")).into_iter().filter(|l| l["kind"] == "epoch").collect();
    assert!(epochs[2]["loss"].as_f64() < epochs[0]["loss"].as_f64());

    // student.pt, traced on one sentence, runs in PyTorch on a padded batch of 40 (its inputs
    // passed by name, as Hugging Face callers do) and returns the Rust student's embeddings; and it embeds like the teacher (cosine as in the report).
    let npz = dir.path().join("rust.npz");
    rust_embeddings(&cfg, &run, 40, &npz);
    let script = "import sys, numpy as np, torch
run, npz, teacher = sys.argv[1:4]
d = np.load(npz)
ids, mask = torch.from_numpy(d['ids']), torch.from_numpy(d['mask'])
assert ids.shape[0] == 40 and bool((mask == 0).any()), 'a padded batch'
with torch.no_grad():
    s = torch.jit.load(run + '/student.pt')(input_ids=ids, attention_mask=mask)
    t = torch.jit.load(teacher)(ids, mask)
print((s - torch.from_numpy(d['embedding'])).abs().max().item(), torch.nn.functional.cosine_similarity(s, t).mean().item())";
    let teacher = fixture("text/text-teacher.pt");
    let out = python(script, &[run.to_str().unwrap(), npz.to_str().unwrap(), teacher.to_str().unwrap()]);
    let figures: Vec<f64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(figures[0] < 1e-5, "student.pt differs from the Rust student by {}", figures[0]);
    assert!(figures[1] > 0.9, "cosine of student.pt with the teacher {}", figures[1]);
}

#[test]
fn an_interrupted_text_run_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    // length-bucketed batches and dropout: the resumed order and random state must both match
    let edits = [
        ("seed = 0", "seed = 0\nsave_every = 25"),
        ("input_shape = [64]", "input_shape = [64]\nbucket_by_length = true"),
        ("activation = \"gelu\"", "activation = \"gelu\"\ndropout = 0.1"),
    ];
    let cfg = text_config(dir.path(), &edits);
    let teacher = fixture("text/text-teacher.pt");
    let unbroken = train(&teacher, &cfg, &dir.path().join("a"), false).unwrap();
    let out = dir.path().join("b/run");
    let err = run_stopped(&teacher, &cfg, &out, 90);
    assert!(err.is_interrupt(), "{err}");
    let resumed = {
        let _guard = serial();
        distill::resume(&out, None, None, Verbosity::Quiet, None, &distill::data_parallel::Launch::single()).unwrap()
    };
    let lines = |p: &Path| -> Vec<String> {
        metrics_lines(&p.join("metrics.jsonl"))
            .iter()
            .map(|v| format!("{} {} {} {}", v["step"], v["loss"], v["agreement"], v["spearman"]))
            .collect()
    };
    assert_eq!(lines(&dir.path().join("a/run")), lines(&out));
    assert_eq!(unbroken.student.agreement, resumed.student.agreement);
    assert_eq!(unbroken.student.spearman, resumed.student.spearman);
}

/// An interrupted run leaves the teacher's train-set outputs in its folder, and the resumed run
/// trains on what it reads there instead of running the teacher again: replaced by zeros, they
/// make every later loss mean(e^2) = 1/32 for the unit-length 32-wide embeddings e. The
/// finished run folder no longer holds them.
#[test]
fn a_resumed_run_reads_the_teacher_outputs_its_first_part_cached() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = text_config(dir.path(), &[("seed = 0", "seed = 0\nsave_every = 40")]);
    let out = dir.path().join("run");
    assert!(run_stopped(&fixture("text/text-teacher.pt"), &cfg, &out, 40).is_interrupt());
    let cache = dir.path().join("run.partial").join(distill::run::train_students::TEACHER_OUTPUTS);
    let tensors = Tensor::read_safetensors(&cache).unwrap();
    let find = |want: &str| tensors.iter().find(|(name, _)| name == want).map(|(_, t)| t.shallow_clone()).unwrap();
    let (outputs, key) =
        (find("outputs"), CacheKey(String::from_utf8(Vec::<u8>::try_from(find("key")).unwrap()).unwrap()));
    let norms = outputs.norm_scalaropt_dim(2, [1], false);
    assert_eq!(outputs.size()[1], 32);
    assert!((norms - 1.0).abs().max().double_value(&[]) < 1e-5, "the teacher's unit-length embeddings");
    teacher_cache::write(&cache, &key, &outputs.zeros_like()).unwrap();
    {
        let _guard = serial();
        distill::resume(&out, None, None, Verbosity::Quiet, None, &distill::data_parallel::Launch::single()).unwrap();
    }
    let after: Vec<f64> = metrics_lines(&out.join("metrics.jsonl"))
        .iter()
        .filter(|v| v["kind"] == "step" && v["step"].as_u64().unwrap() > 40)
        .map(|v| v["kd"].as_f64().unwrap())
        .collect();
    assert!(!after.is_empty());
    for kd in after {
        assert!((kd - 1.0 / 32.0).abs() < 1e-6, "kd {kd}: the resumed steps trained on the zeros it read");
    }
    assert!(!out.join(distill::run::train_students::TEACHER_OUTPUTS).exists(), "removed once the run finished");
}

/// `--teacher-cache DIR`: the first run keeps the teacher's train-set outputs in DIR, under a
/// key naming what produced them; a second run with another student but the same teacher and
/// data trains on what it reads there (replaced by zeros: every loss is mean(e^2) = 1/32 for the
/// unit-length 32-wide embeddings e), and a run whose truncation differs computes its own.
#[test]
fn runs_on_the_same_teacher_and_data_share_the_teacher_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (teacher, cache) = (fixture("text/text-teacher.pt"), dir.path().join("cache"));
    let kd_losses = |out: &Path| -> Vec<f64> {
        metrics_lines(&out.join("metrics.jsonl"))
            .iter()
            .filter(|v| v["kind"] == "step")
            .map(|v| v["kd"].as_f64().unwrap())
            .collect()
    };
    let cached_run = |name: &str, edits: &[(&str, &str)]| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let out = sub.join("run");
        let opts =
            TrainOptions { teacher_cache: Some(cache.clone()), ..options(&teacher, &text_config(&sub, edits), &out) };
        run(&opts).unwrap();
        out
    };
    let teacher_outputs = |out: &Path| -> (String, f64) {
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        let t = &report["teacher"];
        (t["train_outputs"].as_str().unwrap().to_string(), t["train_outputs_seconds"].as_f64().unwrap())
    };
    let first = cached_run("a", &[]);
    let (how, seconds) = teacher_outputs(&first);
    assert_eq!(how, "computed");
    assert!(seconds > 0.0);
    let files: Vec<PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut tensors = Tensor::read_safetensors(&files[0]).unwrap();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["crc32", "key", "outputs"]);
    let key = CacheKey(String::from_utf8(Vec::<u8>::try_from(&tensors[1].1).unwrap()).unwrap());
    assert!(key.0.starts_with("v1 teacher="), "{key:?}");
    assert!(kd_losses(&first).iter().all(|kd| (kd - 1.0 / 32.0).abs() > 1e-3), "trained on the teacher's outputs");
    teacher_cache::write(&files[0], &key, &tensors[2].1.zeros_like()).unwrap();

    let wider = cached_run("b", &[("mlp_width = 64", "mlp_width = 96")]);
    assert_eq!(teacher_outputs(&wider).0, "read", "the second student reads the first one's outputs");
    let losses = kd_losses(&wider);
    assert!(!losses.is_empty());
    for kd in losses {
        assert!((kd - 1.0 / 32.0).abs() < 1e-6, "kd {kd}: the second student trained on the zeros of the cache");
    }
    let shorter = cached_run("c", &[("input_shape = [64]", "input_shape = [48]")]);
    assert!(kd_losses(&shorter).iter().all(|kd| (kd - 1.0 / 32.0).abs() > 1e-3), "another truncation: its own outputs");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 2, "a file for each key");
}

#[test]
fn magnitude_pruning_masks_a_transformers_projections_not_its_embeddings() {
    let dir = tempfile::tempdir().unwrap();
    let edits = [("log_every = 20", "log_every = 20\n[prune]\nsparsity = 0.5\nevery_steps = 20")];
    let report = train(&fixture("text/text-teacher.pt"), &text_config(dir.path(), &edits), dir.path(), false).unwrap();
    let prune = report.student.prune.as_ref().unwrap();
    assert_eq!(prune.target_sparsity, 0.5);
    // The exported weights: half of the projection matrices' values (pooled, global ranking) are
    // zero, the embeddings are dense.
    let (mut zeros, mut total) = (0i64, 0i64);
    for (name, t) in Tensor::read_safetensors(dir.path().join("run/student.safetensors")).unwrap() {
        let z = t.eq(0.0).sum(tch::Kind::Int64).int64_value(&[]);
        if name.starts_with("embed.") {
            assert_eq!(z, 0, "{name} is pruned");
        } else if name.ends_with(".weight") && t.dim() == 2 {
            (zeros, total) = (zeros + z, total + t.numel() as i64);
        }
    }
    // blk1_attn qkv 32x96 and proj 32x32, blk1_mlp fc1 32x64 and fc2 64x32: 8192 values
    assert_eq!(total, 8192);
    assert_eq!(zeros, 4096, "half of the projections pruned");
    assert!(report.student.agreement.unwrap() > 0.9, "{:?}", report.student.agreement);
}

#[test]
fn structured_pruning_narrows_a_transformers_feed_forward_to_the_same_function() {
    let dir = tempfile::tempdir().unwrap();
    let edits =
        [("log_every = 20", "log_every = 20\n[prune]\nmethod = \"structured\"\nsparsity = 0.25\nevery_steps = 20")];
    let cfg = text_config(dir.path(), &edits);
    let report = train(&fixture("text/text-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let shrunk = report.student.prune.as_ref().unwrap().shrunk.as_ref().unwrap();
    // floor(64 * 0.25) = 16 of the 64 feed-forward neurons removed: fc1 32x48 + 48, fc2 48x32 + 32
    // instead of 32x64 + 64 and 64x32 + 32 (4,192 - 3,152 = 1,040 parameters fewer).
    assert_eq!(shrunk.mlp_width, Some(48));
    assert!(shrunk.max_abs_diff < 1e-5, "shrunk vs masked embeddings differ by {}", shrunk.max_abs_diff);
    assert!(report.student.spearman.unwrap() > 0.85, "spearman {:?}", report.student.spearman);
    let run = dir.path().join("run");
    let count = |f: PathBuf| Tensor::read_safetensors(f).unwrap().iter().map(|(_, t)| t.numel()).sum::<usize>();
    let (dense, small) = (count(run.join("dense/student.safetensors")), count(run.join("student.safetensors")));
    assert_eq!((dense - small, small as u64), (1040, shrunk.params));
    assert_eq!(report.student.params, shrunk.params, "the report counts the exported student");
    let saved = Tensor::read_safetensors(run.join("student.safetensors")).unwrap();
    let fc2 = &saved.iter().find(|(n, _)| n == "blk1_mlp.fc2.weight").unwrap().1;
    assert_eq!(fc2.size(), [32, 48]);
    let small = Config::from_toml_str(&std::fs::read_to_string(run.join("student.toml")).unwrap()).unwrap();
    assert_eq!(small.student.transformer.as_ref().unwrap().mlp_width, Some(48));
    assert!(small.prune.is_none(), "the shrunk cfg must not prune again");
    // its files absolute: it trains from the run folder, wherever that moves
    for file in [&small.data.train, &small.data.test, &small.data.tokenizer] {
        let file = Path::new(file.as_deref().unwrap());
        assert!(file.is_absolute() && file.is_file(), "{}", file.display());
    }

    // PyTorch runs both TorchScript files on a padded batch and gets the same embeddings.
    let npz = dir.path().join("rust.npz");
    rust_embeddings(&cfg, &run.join("dense"), 40, &npz);
    let script = "import sys, numpy as np, torch
run, npz = sys.argv[1:3]
d = np.load(npz)
ids, mask = torch.from_numpy(d['ids']), torch.from_numpy(d['mask'])
with torch.no_grad():
    small = torch.jit.load(run + '/student.pt')(ids, mask)
    dense = torch.jit.load(run + '/dense/student.pt')(ids, mask)
print((small - dense).abs().max().item(), (dense - torch.from_numpy(d['embedding'])).abs().max().item())";
    let out = python(script, &[run.to_str().unwrap(), npz.to_str().unwrap()]);
    let figures: Vec<f64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(figures.iter().all(|&d| d < 1e-5), "python: {out}");
}
