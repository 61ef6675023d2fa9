//! `kd.divergence` on the language-model fixture, set on the command line: reverse KL and
//! GKD's JSD train (finite losses, a falling soft term and perplexity), in the 16-token chunks
//! of `kd.loss_chunk`, and `report.json` records the divergence and JSD's beta.
use e2e::{fixture, lm_config, metrics_lines, options, run};

/// Trains the fixture with `sets` into `dir/run`; the report, and the logged steps' and epochs'
/// lines.
fn distil(sets: &[&str]) -> (distill::report::Report, Vec<serde_json::Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lm_config(dir.path(), &[("alpha = 0.5", "alpha = 0.5\nloss_chunk = 16")]);
    let mut opts = options(&fixture("lm/lm-teacher.pt"), &cfg, &dir.path().join("run"));
    opts.sets = sets.iter().map(|s| s.to_string()).collect();
    let report = run(&opts).unwrap();
    let lines = metrics_lines(&dir.path().join("run/metrics.jsonl"));
    (report, lines, dir)
}

#[test]
fn reverse_kl_and_jsd_train_a_language_model_and_are_reported() {
    for (sets, name, beta) in [
        (&["kd.divergence=reverse_kl"][..], "reverse_kl", None),
        (&["kd.divergence=jsd", "kd.beta=0.3"][..], "jsd", Some(0.3)),
    ] {
        let (report, lines, dir) = distil(sets);
        let s = &report.student;
        assert_eq!((s.divergence.as_deref(), s.beta), (Some(name), beta));
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/report.json")).unwrap()).unwrap();
        assert_eq!(written["student"]["divergence"], name);
        assert_eq!(written["student"]["beta"].as_f64(), beta);
        let steps: Vec<&serde_json::Value> = lines.iter().filter(|l| l["kind"] == "step").collect();
        let kd: Vec<f64> = steps.iter().map(|l| l["kd"].as_f64().unwrap()).collect();
        assert!(kd.len() >= 4 && kd.iter().all(|v| v.is_finite() && *v > 0.0), "{name}: kd by step {kd:?}");
        assert!(steps.iter().all(|l| l["loss"].as_f64().unwrap().is_finite()));
        assert!(kd[kd.len() - 1] < 0.8 * kd[0], "{name}: the soft term fell too little: {kd:?}");
        let ppl: Vec<f64> =
            lines.iter().filter(|l| l["kind"] == "epoch").map(|l| l["perplexity"].as_f64().unwrap()).collect();
        assert!(ppl.len() == 2 && ppl[1] < ppl[0], "{name}: perplexity by epoch {ppl:?}");
        let test = s.test_perplexity.unwrap();
        assert!(test.is_finite() && test < 512.0, "{name}: test perplexity {test}");
    }
}
