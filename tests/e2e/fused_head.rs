//! `kd.fused_head` on the language-model fixture (its tied head): the head fused with the loss
//! trains the student the chunked loss trains, step for step (the same losses to float
//! rounding), under JSD at T = 2, and the same held-out perplexity; and it is refused, with
//! its key, for a student without a language model's head.
use e2e::{fixture, lm_config, metrics_lines, options, run, text_config};

/// The steps' (loss, kd, ce) and the test perplexity of the fixture trained with `sets`.
fn train(sets: &[&str]) -> (Vec<[f64; 3]>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(
        dir.path(),
        &[("alpha = 0.5", "alpha = 0.5\ntemperature = 2.0\ndivergence = \"jsd\"\nloss_chunk = 16")],
    );
    let mut opts = options(&fixture("lm/lm-teacher.pt"), &cfg, &dir.path().join("run"));
    opts.sets = sets.iter().map(|s| s.to_string()).collect();
    let report = run(&opts).unwrap();
    let lines = metrics_lines(&dir.path().join("run/metrics.jsonl"));
    let steps = lines
        .iter()
        .filter(|l| l["kind"] == "step")
        .map(|l| ["loss", "kd", "ce"].map(|k| l[k].as_f64().unwrap()))
        .collect();
    (steps, report.student.test_perplexity.unwrap())
}

#[test]
fn a_fused_head_trains_as_the_chunked_loss_does() {
    let (chunked, ppl_chunked) = train(&[]);
    let (fused, ppl_fused) = train(&["kd.fused_head=true"]);
    assert!(chunked.len() >= 4 && chunked.len() == fused.len(), "{} and {} steps logged", chunked.len(), fused.len());
    // the first logged step's window of steps starts from the same weights: float rounding only
    for (c, f) in chunked[0].iter().zip(&fused[0]) {
        assert!((c - f).abs() < 1e-4 * c.abs().max(1.0), "first logged step: {:?} vs {:?}", chunked[0], fused[0]);
    }
    for (c, f) in chunked.iter().zip(&fused) {
        assert!((c[0] - f[0]).abs() < 1e-2 * c[0], "loss by step: {chunked:?} vs {fused:?}");
    }
    assert!(fused[fused.len() - 1][1] < 0.8 * fused[0][1], "the soft term fell too little: {fused:?}");
    assert!((ppl_fused - ppl_chunked).abs() < 1e-2 * ppl_chunked, "test perplexity {ppl_fused} vs {ppl_chunked}");
}

#[test]
fn a_fused_head_without_a_language_model_is_refused_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = text_config(dir.path(), &[]);
    let mut opts = options(&fixture("text/text-teacher.pt"), &cfg, &dir.path().join("run"));
    opts.sets = vec!["kd.fused_head=true".into(), "kd.loss_chunk=8".into()];
    let err = run(&opts).unwrap_err().to_string();
    assert!(err.contains("kd.fused_head: fuses a language model's head with its loss"), "{err}");
    assert!(!dir.path().join("run").exists(), "nothing written");
}
