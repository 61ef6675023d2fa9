//! A factorised language-model head (`student.transformer.head_rank`) on the LM fixture: fitted
//! to the teacher's head on the student's hidden states, it keeps the share of the logits'
//! variance it reports; a run with it trains, is priced as built, and exports what Rust computes.
use distill::inputs::data::ModelInput;
use distill::inputs::teacher::Teacher;
use distill::student::head_fit::HEAD_FIT_WINDOWS;
use distill::student::{StudentInit, TeacherWeights};
use e2e::{fixture, lm_config, python, serial, train};
use estimator_wasm::schema::{arch, Precision};
use estimator_wasm::Config;
use tch::{Device, Kind, Tensor};

/// The fixture student with both teacher layers copied and an untied head of `rank`.
fn edits(rank: &str) -> Vec<(&'static str, String)> {
    vec![
        ("init_from_teacher = [1]", "init_from_teacher = [0, 1]".into()),
        ("layers = 1", "layers = 2".into()),
        ("tie_embeddings = true", format!("tie_embeddings = false\nhead_rank = {rank}")),
    ]
}

/// A student that computes the teacher's hidden states (both layers copied) gets the head of
/// rank 8 (of width 32) whose logits, centred over the vocabulary, miss the teacher's by
/// exactly the share of their variance it reports as dropped, on the windows it was fitted on.
/// Rank 30 (the most that costs less than the whole head) keeps more than rank 8.
#[test]
fn the_fitted_head_misses_the_teachers_logits_by_the_variance_it_drops() {
    let teacher = Teacher::load(&fixture("lm/lm-teacher.pt"), None, Precision::Fp32, Device::Cpu).unwrap();
    let ids = Tensor::from_slice(&(0..HEAD_FIT_WINDOWS * 24).map(|i| (i * 7919) % 512).collect::<Vec<i64>>())
        .reshape([HEAD_FIT_WINDOWS, 24]);
    // the last window half padding: its padded positions are left out of the fit
    let mask = ids.ones_like();
    let _ = mask.get(HEAD_FIT_WINDOWS - 1).narrow(0, 12, 12).fill_(0);
    let sample = ModelInput { x: ids, mask: Some(mask.shallow_clone()) };
    let want = teacher.output(&sample).unwrap().to_kind(Kind::Double);
    let weights =
        TeacherWeights { params: teacher.named_parameters().unwrap(), sample: Some(sample.to_device(Device::Cpu)) };
    let mut kept_by_rank = Vec::new();
    // rank 8 again at batch 1: the body runs one window at a time (the fit's passes stay within
    // the batches the plan prices), and the fit is the same
    for (rank, one_at_a_time) in [("8", false), ("30", false), ("8", true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut edits = edits(rank);
        if one_at_a_time {
            edits.extend([
                ("batch_size = 16", "batch_size = 1".into()),
                ("eval_batch_size = 32", "eval_batch_size = 1".into()),
            ]);
        }
        let edits: Vec<(&str, &str)> = edits.iter().map(|(a, b)| (*a, b.as_str())).collect();
        let cfg = lm_config(dir.path(), &edits);
        let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        let init = StudentInit { teacher: Some(&weights), file: None };
        let (_vs, student, copied) = {
            let _guard = serial();
            distill::student::build::build_student_from(&spec, init, &cfg, Device::Cpu).unwrap()
        };
        let copied = copied.unwrap();
        let fit = copied.head_fit.clone().unwrap();
        assert_eq!((fit.tokens, copied.kept.len()), (HEAD_FIT_WINDOWS * 24 - 12, 0), "{copied:?}");
        assert!(copied.summary().contains(&format!("head: rank {rank} fitted on {} tokens", fit.tokens)));
        // softmax ignores a shift of a token's logits: the fit is to their centred values
        let centred = |l: Tensor| &l - l.mean_dim(-1, true, None);
        let got = centred(tch::no_grad(|| student.forward(&sample, false)).to_kind(Kind::Double));
        let want = centred(want.shallow_clone());
        let real = mask.to_kind(Kind::Double).unsqueeze(-1);
        // the variance about the mean logits over the real positions
        let mean = (&want * &real).sum_dim_intlist(&[0i64, 1][..], true, Kind::Double) / real.sum(Kind::Double);
        let variance = ((&want - &mean) * &real).square().sum(Kind::Double).double_value(&[]);
        let missed = ((&got - &want) * &real).square().sum(Kind::Double).double_value(&[]);
        assert!(
            (missed / variance - (1.0 - fit.kept)).abs() < 1e-4,
            "rank {rank}: missed {} of the variance, the fit says {}",
            missed / variance,
            1.0 - fit.kept
        );
        kept_by_rank.push(fit.kept);
    }
    assert!(0.0 < kept_by_rank[0] && kept_by_rank[0] < kept_by_rank[1] && kept_by_rank[1] < 1.0, "{kept_by_rank:?}");
    assert!((kept_by_rank[2] - kept_by_rank[0]).abs() < 1e-12, "{kept_by_rank:?}");
}

/// A run with a rank-8 head trains (its perplexity falls), reports the parameters the estimator
/// counts for it (the factors instead of one [512, 32] matrix), and its `student.pt` computes
/// in Python what the Rust student computes.
#[test]
fn a_student_with_a_factorised_head_trains_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let edits = edits("8");
    let edits: Vec<(&str, &str)> = edits.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let cfg = lm_config(dir.path(), &edits);
    let report = train(&fixture("lm/lm-teacher.pt"), &cfg, dir.path(), false).unwrap();
    let spec = Config::from_toml_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    let layers = arch::layers(&spec.student, &spec.data).unwrap();
    // embedding 512 x 32, head 8 x 32 + 512 x 8, no bias
    let head = layers.last().unwrap();
    assert_eq!(head.op.params(), 8 * 32 + 512 * 8);
    assert_eq!(report.student.params, arch::param_count(&layers));
    let run = dir.path().join("run");
    // no Hugging Face folder: the report says why, and today's exports stay
    let why = report.student.hf.not_written.as_deref();
    assert_eq!(
        why,
        Some("a factorised LM head (student.transformer.head_rank = 8): Hugging Face's LlamaForCausalLM has no equivalent")
    );
    assert!(!run.join("hf").exists() && !run.join("hf.tmp").exists() && run.join("student.pt").is_file());
    let epochs: Vec<f64> = e2e::metrics_lines(&run.join("metrics.jsonl"))
        .iter()
        .filter(|l| l["kind"] == "epoch")
        .map(|l| l["perplexity"].as_f64().unwrap())
        .collect();
    assert!(epochs.len() == 2 && epochs[1] < epochs[0], "perplexity by epoch {epochs:?}");

    let ids: Vec<i64> = (0..20).map(|i| (i * 31) % 512).collect();
    let script = "import sys, json, torch
ids = torch.tensor([json.loads(sys.argv[2])])
with torch.no_grad():
    print(json.dumps(torch.jit.load(sys.argv[1] + '/student.pt')(ids, torch.ones_like(ids))[0].tolist()))";
    let out = python(script, &[run.to_str().unwrap(), &serde_json::to_string(&ids).unwrap()]);
    let want: Vec<Vec<f64>> = serde_json::from_str(&out).unwrap();
    let student = e2e::load_student(&spec, &run.join("student.safetensors"));
    let x = Tensor::from_slice(&ids).unsqueeze(0);
    let got = tch::no_grad(|| student.forward(&ModelInput { mask: Some(x.ones_like()), x }, false));
    let got = Vec::<Vec<f64>>::try_from(got.get(0).to_kind(Kind::Double)).unwrap();
    let diff = got.iter().flatten().zip(want.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(diff < 1e-5, "student.pt differs from the Rust student by {diff}");
}
