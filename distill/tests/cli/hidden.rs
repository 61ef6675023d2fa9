//! `[[kd.hidden]]` pairs the run cannot serve: one line naming the key, how many hidden states
//! there are and the fix, exit 2, nothing written.
use crate::common::{fixtures, Case, CFG, TEACHER};

/// The case's `config` with `pair` appended as one `[[kd.hidden]]` table.
fn with_pair(case: &Case, config: &str, pair: &str) {
    let path = case.path(config);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}\n[[kd.hidden]]\n{pair}\n")).unwrap();
}

fn refused(case: &Case, teacher: &str, config: &str, want: &str) {
    let (code, stderr) = case.run(teacher, config);
    assert_eq!((code, stderr.trim_end()), (2, want), "{stderr}");
    assert!(!case.path("run").exists() && !case.path("run.partial").exists(), "nothing written");
}

#[test]
fn a_hidden_pair_naming_a_student_layer_that_does_not_exist_says_how_many_there_are() {
    let case = Case::new();
    with_pair(&case, CFG, "student_layer = 40\nteacher_layer = 0");
    let cfg = case.path(CFG).display().to_string();
    // the digits student: flatten, fc1 (+ norm, act, dropout), fc2 (...), head
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 2, "{stderr}");
    let line = stderr.trim_end();
    assert!(
        line.starts_with(&format!("error: {cfg}: kd.hidden[0].student_layer: is 40, and the student has ")),
        "{line}"
    );
    assert!(line.contains(" hidden states (one per layer of distill plan's table, 0-based): use 0 to "), "{line}");
    assert_eq!(line.lines().count(), 1);
    assert!(!case.path("run").exists() && !case.path("run.partial").exists());
}

#[test]
fn a_hidden_pair_of_negative_weight_is_refused() {
    let case = Case::new();
    with_pair(&case, CFG, "student_layer = 1\nteacher_layer = 0\nweight = -0.5");
    let want = format!(
        "error: {}: kd.hidden[0].weight: must be a finite number >= 0: the pair's weight in the total loss (0 turns it off)",
        case.path(CFG).display()
    );
    refused(&case, TEACHER, CFG, &want);
}

#[test]
fn a_teacher_without_hidden_outputs_is_told_which_key_to_set() {
    // the digits teacher returns a dict of its logits and features, no hidden states
    let case = Case::new();
    with_pair(&case, CFG, "student_layer = 1\nteacher_layer = 0");
    let want = format!(
        "error: {}: [[kd.hidden]] needs the teacher's hidden states, and teacher.hidden_output is not set (the teacher returns a dict with keys [\"features\", \"logits\"]): set it to the dict key or tuple index of its list of hidden states, e.g. teacher.hidden_output = \"hidden_states\"",
        case.path(TEACHER).display()
    );
    refused(&case, TEACHER, CFG, &want);
}

#[test]
fn a_hidden_pair_naming_a_teacher_layer_that_does_not_exist_says_how_many_there_are() {
    // the tiny Llama folder: 2 layers, so 3 hidden states (0 the embeddings' output)
    let case = Case::with_lm();
    with_pair(&case, "lm-student.toml", "student_layer = 1\nteacher_layer = 7");
    let folder = fixtures().join("hf/llama");
    let want = format!(
        "error: {}: kd.hidden[0].teacher_layer = 7, and the folder's decoder returns 3 hidden states (0 the embeddings' output): use 0 to 2",
        folder.display()
    );
    refused(&case, folder.to_str().unwrap(), "lm-student.toml", &want);
}
