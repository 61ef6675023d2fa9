//! Embedding distillation (`kd.objective = "embedding_*"`): the student regresses the teacher's
//! output vector, and the report's held-out figures (mean cosine with the teacher, Spearman of
//! pair cosines) are checked against PyTorch's reading of the exported files.
use distill::train::objective::Agreement;
use e2e::{digits_config, fixture, metrics_lines, python, train};

/// The mean row cosine between the exported student and the teacher on the digits test set,
/// as PyTorch computes it from the files.
fn mean_cosine(teacher: &std::path::Path, student: &std::path::Path) -> f64 {
    let script = "import sys, numpy as np, torch
teacher, student, test = sys.argv[1:4]
d = np.load(test)
x = (torch.from_numpy(d['x']).float() * 0.0625 - 0.5) / 0.5
with torch.no_grad():
    t = torch.jit.load(teacher).eval()(x)['logits']
    s = torch.jit.load(student).eval()(x)
print(torch.nn.functional.cosine_similarity(s.double(), t.double(), dim=1, eps=1e-8).mean().item())";
    let test = fixture("digits-test.npz");
    let args = [teacher.to_str().unwrap(), student.to_str().unwrap(), test.to_str().unwrap()];
    python(script, &args).trim().parse().unwrap()
}

#[test]
fn a_student_regresses_the_teachers_output_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let edits = [("temperature = 4.0", "objective = \"embedding_cosine\""), ("alpha = 0.9", "alpha = 1.0")];
    let teacher = fixture("teacher-scripted.pt");
    let report = train(&teacher, &digits_config(dir.path(), &edits), dir.path(), false).unwrap();
    let s = &report.student;
    assert_eq!((s.agreement_metric, s.objective.as_str()), (Agreement::Cosine, "embedding_cosine"));
    // No accuracy where nothing scores classes; the teacher's neither.
    assert_eq!((s.test_accuracy, report.teacher.test_accuracy, report.teacher.chance_accuracy), (None, None, None));
    let cosine = s.agreement.unwrap();
    assert!(cosine > 0.9, "{cosine}");
    assert!(s.spearman.unwrap() > 0.85, "{:?}", s.spearman);
    // The report's cosine is the exported student's, as PyTorch measures it.
    let torch = mean_cosine(&teacher, &dir.path().join("run/student.pt"));
    assert!((cosine - torch).abs() < 1e-5, "{cosine} vs {torch} (PyTorch)");
    // metrics.jsonl: no accuracies, the cosine and Spearman per epoch; the loss falls.
    let epochs: Vec<serde_json::Value> =
        metrics_lines(&dir.path().join("run/metrics.jsonl")).into_iter().filter(|l| l["kind"] == "epoch").collect();
    assert_eq!(epochs.len(), 3);
    assert!(epochs.iter().all(|e| e["test_accuracy"].is_null() && e["train_accuracy"].is_null()));
    assert_eq!(epochs[2]["agreement"].as_f64(), Some(cosine));
    assert!(epochs[2]["loss"].as_f64() < epochs[0]["loss"].as_f64());
    // --baseline (labels alone) has nothing to train on here: refused before any output, so the
    // finished run in the same folder survives.
    let refused = train(&teacher, &digits_config(dir.path(), &edits), dir.path(), true).unwrap_err().to_string();
    assert!(refused.contains("--baseline") && refused.contains("leave --baseline out"), "{refused}");
    assert!(dir.path().join("run/report.json").is_file());
}
