//! What a run says about itself beyond its students: where its wall time went (`phases` in
//! report.json and the summary) and `report.html`.
use distill::phase_times::Phase;
use e2e::{digits_config, fixture, train};

#[test]
fn the_wall_time_is_split_by_phase_and_the_phases_sum_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = digits_config(dir.path(), &[]);
    let report = train(&fixture("teacher-scripted.pt"), &cfg, dir.path(), true).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/report.json")).unwrap()).unwrap();
    let phases = &saved["phases"];
    let keys = [
        "startup_s",
        "data_s",
        "teacher_load_s",
        "teacher_pass_s",
        "training_s",
        "evaluation_s",
        "checkpoints_s",
        "export_s",
        "latency_s",
        "other_s",
    ];
    let wall = saved["wall_seconds"].as_f64().unwrap();
    let mut sum = 0.0;
    for key in keys {
        let s = phases[key].as_f64().unwrap_or_else(|| panic!("phases.{key} missing: {phases}"));
        assert!(s >= 0.0, "phases.{key} = {s}");
        sum += s;
    }
    assert_eq!(phases.as_object().unwrap().len(), keys.len(), "{phases}");
    assert!(sum <= wall + 1e-9, "the phases sum to {sum} s, the wall time is {wall} s");
    // every moment is charged to one phase: nothing is lost between them
    assert!(wall - sum < 1e-6, "{sum} against {wall}");
    let p = &report.phases;
    // each phase that ran holds time: the data, the teacher, the steps of both students (their
    // measured step times are part of training), the checkpoints, the exports and their latency
    for phase in [
        Phase::Data,
        Phase::TeacherLoad,
        Phase::TeacherPass,
        Phase::Evaluation,
        Phase::Checkpoints,
        Phase::Export,
        Phase::Latency,
    ] {
        assert!(p.get(phase) > 0.0, "{phase:?}: {p:?}");
    }
    let steps = report.student.train_seconds + report.baseline.as_ref().unwrap().train_seconds;
    assert!(p.training_s >= steps, "training {} s < the steps' {steps} s", p.training_s);
    // two students' latency at batch 1 and 256 take a measurable share
    assert!(p.latency_s > 0.01, "{p:?}");
    let summary = report.summary();
    assert!(summary.contains(&p.line(report.wall_seconds)), "{summary}");
    assert!(summary.contains("time: startup "), "{summary}");
}
