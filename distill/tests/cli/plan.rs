//! `distill plan`: the estimator's breakdown of a cfg.toml, as text and JSON.
use std::process::Command;

use crate::common::{Case, CFG, TEACHER};

#[test]
fn plan_prints_the_breakdown_and_the_largest_batch_per_gpu() {
    let case = Case::new();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["plan", "--student", case.path(CFG).to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--gpu", "T4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in
        ["student 2410 parameters, teacher 2762", "T4: 15.0 GiB -> fits", "largest micro-batch per GPU", "H200", "fc1 "]
    {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
    // JSON keeps exact bytes; the teacher count comes from the TorchScript file.
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--json", "--batch", "64"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["plan"]["params"]["teacher"], 2762);
    assert_eq!(plan["plan"]["params"]["student"], 2410);
    assert_eq!(plan["plan"]["batch"], 64);
    assert!(plan["max_batch"].as_array().unwrap().len() >= 8);
    // Without a teacher file the cfg must say how big the teacher is.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(CFG) && stderr.contains("pass --teacher"), "{stderr}");
    let out = run(&["--gpu", "TPU-v9"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: --gpu TPU-v9: unknown GPU") && stderr.lines().count() == 1, "{stderr}");
    // --set overrides reach the plan (they were once parsed and ignored)
    let out = run(&["--teacher", case.path(TEACHER).to_str().unwrap(), "--set", "train.precision=bf16"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("precision bf16 autocast"));
    // readable data says nothing; a data file that cannot be read is named, not skipped in silence
    let teacher = case.path(TEACHER);
    let text = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text(run(&["--teacher", teacher.to_str().unwrap()])).contains("could not be read"));
    let typo = case.path("typo.npz");
    let set = format!("data.train={}", typo.display());
    let out = run(&["--teacher", teacher.to_str().unwrap(), "--set", &set]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let note = format!(
        "note: {} or {} could not be read, so this plan leaves out what the data decides",
        typo.display(),
        case.path("digits-test.npz").display()
    );
    assert!(text(out).contains(&note), "{note}");
}

/// A path flag written `--flag=~/file` reaches `distill` with the `~` (the shell expands it
/// only where a word starts with it): it is the home folder there too.
#[test]
fn a_path_flag_with_a_leading_tilde_is_in_the_home_folder() {
    let case = Case::new();
    let home = case.dir.path().to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .env("HOME", home)
        .args(["plan", &format!("--student=~/{CFG}"), &format!("--teacher=~/{TEACHER}"), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["plan"]["params"]["teacher"], 2762);
    // and a file that is not there is named as expanded, where the user can look for it
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .env("HOME", home)
        .args(["plan", "--student=~/missing.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{home}/missing.toml")), "{stderr}");
    // a path that is not UTF-8 is still a path (clap refused it once the flags expanded `~`)
    use std::os::unix::ffi::OsStrExt;
    let raw = std::ffi::OsStr::from_bytes(b"/nonexistent/\xff.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_distill")).arg("plan").arg("--student").arg(raw).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot read the student config"), "{stderr}");
}

#[test]
fn plan_refuses_a_cfg_without_a_held_out_set_as_the_trainer_does() {
    // `distill` refuses a cfg with neither data.test nor data.holdout; the plan resolves the
    // data files the same way, so it refuses it too rather than plan a split the run never makes
    let case = Case::edited("test = \"digits-test.npz\"\n", "");
    let why = "data.test is missing: set it to a held-out file (.npz, or .txt for text), or set data.holdout = 0.1 to split data.train";
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .args(["plan", "--student", case.path(CFG).to_str().unwrap()])
        .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(CFG) && stderr.contains(why) && stderr.lines().count() == 1, "{stderr}");
    case.fails_with(TEACHER, CFG, &[why]);
    // with data.holdout the plan holds the split the trainer makes: 1437 train rows, 10% held out
    case.edit_config("train = \"digits-train.npz\"", "train = \"digits-train.npz\"\nholdout = 0.1");
    let out = Command::new(env!("CARGO_BIN_EXE_distill"))
        .args(["plan", "--json", "--student", case.path(CFG).to_str().unwrap()])
        .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
