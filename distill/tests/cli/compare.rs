//! `distill compare`: finished runs side by side from the command line.
use std::process::Command;

fn compare(args: &[&std::path::Path], cwd: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_distill")).arg("compare").args(args).current_dir(cwd).output().unwrap()
}

#[test]
fn compare_prints_the_table_and_writes_the_page_beside_the_caller() {
    let root = tempfile::tempdir().unwrap();
    let report = serde_json::json!({
        "student": {"params": 2410, "test_accuracy": 0.75, "samples_per_s": 1234.5},
        "compression_ratio": 1.146,
        "wall_seconds": 3.5
    });
    for name in ["a", "b"] {
        std::fs::create_dir_all(root.path().join(name)).unwrap();
        std::fs::write(root.path().join(name).join("report.json"), report.to_string()).unwrap();
    }
    let out = compare(&[&root.path().join("a"), &root.path().join("b")], root.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "run  params  compression  accuracy  samples/s   wall\n\
         a      2410         1.1x    75.00%       1234  3.5 s\n\
         b      2410         1.1x    75.00%       1234  3.5 s\n\
         page: compare.html\n"
    );
    assert!(std::fs::read_to_string(root.path().join("compare.html")).unwrap().contains("<table id=\"runs\">"));
    // a run that did not finish: exit 2, one line naming its missing report
    let out = compare(&[&root.path().join("a"), &root.path().join("c")], root.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("c/report.json: ") && stderr.lines().count() == 1,
        "{stderr}"
    );
    // no run at all is clap's usage error
    let out = compare(&[], root.path());
    assert_eq!(out.status.code(), Some(2));
}
