//! Seeded runs on CPU are reproducible bit for bit; another seed gives another run.
use e2e::{digits_config, fixture, metrics_lines, train};

/// The loss parts of each metrics line of the run in `dir`.
fn losses(dir: &std::path::Path) -> Vec<String> {
    metrics_lines(&dir.join("run/metrics.jsonl"))
        .iter()
        .map(|v| format!("{} {} {}", v["loss"], v["kd"], v["ce"]))
        .collect()
}

#[test]
fn same_seed_same_losses_with_dropout() {
    let edits = [("hidden = [32]", "hidden = [32]\ndropout = 0.3")];
    let (a, b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for dir in [&a, &b] {
        train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &edits), dir.path(), false).unwrap();
    }
    assert_eq!(losses(a.path()), losses(b.path()));
    let reseeded = [edits[0], ("seed = 0", "seed = 1")];
    train(&fixture("teacher-scripted.pt"), &digits_config(c.path(), &reseeded), c.path(), false).unwrap();
    assert_ne!(losses(a.path()), losses(c.path()));
}
