//! Gradient checkpointing trains the same student as keeping every activation, whatever the
//! number of segments (a lone `flatten` segment included), with an L1 term on every weight and
//! with dropout.
use std::path::Path;

use e2e::{digits_config, fixture, train};
use tch::Tensor;

fn weights(path: &Path) -> Vec<(String, Tensor)> {
    let mut v = Tensor::read_safetensors(path).unwrap();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn any_segment_count_trains_the_same_student_with_l1() {
    // The digits MLP has 4 blocks (flatten, fc1, fc1_act, head): 4 segments put `flatten`
    // alone in the first, 2 and "sqrt" put fc1 in a segment before the last.
    let l1 = ("log_every = 10", "log_every = 10\n[prune]\nsparsity = 0.0\nl1 = 0.01");
    let run = |checkpointing: &str| trained(l1, "", checkpointing);
    let (one, reference) = run("\"none\"");
    assert_eq!(one, 1);
    for (checkpointing, segments) in [("4", 4), ("6", 4), ("2", 2), ("\"sqrt\"", 2)] {
        let (k, w) = run(checkpointing);
        assert_eq!(k, segments, "checkpointing = {checkpointing}");
        same_weights(&reference, &w, checkpointing);
    }
}

/// With dropout the masks are drawn per block, so the segment count still changes nothing.
#[test]
fn any_segment_count_trains_the_same_student_with_dropout() {
    let l1 = ("log_every = 10", "log_every = 10\n[prune]\nsparsity = 0.0\nl1 = 0.001");
    let (_, reference) = trained(l1, "\ndropout = 0.2", "\"none\"");
    for checkpointing in ["2", "3", "\"sqrt\"", "100"] {
        same_weights(&reference, &trained(l1, "\ndropout = 0.2", checkpointing).1, checkpointing);
    }
}

fn same_weights(reference: &[(String, Tensor)], w: &[(String, Tensor)], checkpointing: &str) {
    for ((name, a), (_, b)) in reference.iter().zip(w) {
        let diff = (a - b).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "checkpointing = {checkpointing}: {name} differs by {diff}");
    }
}

/// One epoch of the digits MLP with `edit`, extra student keys and `checkpointing`: the
/// segments used and the trained weights.
fn trained(edit: (&str, &str), student: &str, checkpointing: &str) -> (usize, Vec<(String, Tensor)>) {
    let dir = tempfile::tempdir().unwrap();
    let edits = [
        edit,
        ("epochs = 3", "epochs = 1"),
        ("hidden = [32]", &format!("hidden = [32]{student}\ncheckpointing = {checkpointing}")),
    ];
    let report = train(&fixture("teacher-scripted.pt"), &digits_config(dir.path(), &edits), dir.path(), false);
    let report = report.unwrap_or_else(|e| panic!("checkpointing = {checkpointing}: {e}"));
    (report.student.checkpointing_segments, weights(&dir.path().join("run/student.safetensors")))
}
