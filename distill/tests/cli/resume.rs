//! Stopping and resuming: Ctrl-C and `--stop-after-steps` leave a resumable `.partial` run,
//! `--resume` finishes it exactly as an unbroken run would, and refuses (or repairs, saying
//! so) what changed in between.
use std::process::Command;

use crate::common::{digits_train, fixtures, same_metrics, Case, CFG, TEACHER};

/// A run of the case into `run`, once its metrics log holds 5 lines (its stderr piped).
fn started_run(case: &Case) -> std::process::Child {
    let child = case.command(TEACHER, CFG, "run").stderr(std::process::Stdio::piped()).spawn().unwrap();
    let metrics = case.path("run.partial/metrics.jsonl");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&metrics).map(|t| t.lines().count()).unwrap_or(0) < 5 {
        assert!(start.elapsed().as_secs() < 120, "the run never got going");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
fn ctrl_c_checkpoints_and_resume_finishes_the_same_run() {
    let case = Case::new();
    case.edit_config("epochs = 3", "epochs = 20");
    case.edit_config("hidden = [32]", "hidden = [32]\ndropout = 0.1");
    let child = started_run(&case);
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("continue with `distill --resume"), "{stderr}");
    assert!(!case.path("run").exists());
    assert!(case.path("run.partial/checkpoints").read_dir().unwrap().count() >= 1);

    // the teacher moved since: resume says so and keeps the run; --teacher points at it
    std::fs::rename(case.path(TEACHER), case.path("moved.pt")).unwrap();
    let resume = |extra: &[&str]| case.resume("run", extra);
    let lost = resume(&[]);
    let stderr = String::from_utf8_lossy(&lost.stderr);
    assert_eq!(lost.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass --teacher"), "{stderr}");
    assert!(case.path("run.partial/run.json").is_file());
    let resumed = resume(&["--teacher", case.path("moved.pt").to_str().unwrap()]);
    std::fs::rename(case.path("moved.pt"), case.path(TEACHER)).unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("test accuracy"));
    assert!(!case.path("run.partial").exists());
    let unbroken = case.command(TEACHER, CFG, "unbroken").output().unwrap();
    assert!(unbroken.status.success());
    same_metrics(&case, "run", "unbroken");
    let again = resume(&[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("that run has finished"));
}

#[test]
fn a_run_holds_its_folder_against_a_second_run_and_resume() {
    // a second distill on the --out of a run still going, or --resume of it, would write the
    // same folder: refused with the holder's pid, and the first run is untouched
    let case = Case::edited("epochs = 3", "epochs = 20");
    let child = started_run(&case);
    // refused before any work: a teacher that is not there is never reached
    let second = case.command("missing.pt", CFG, "run").output().unwrap();
    let resumed = case.resume("run", &[]);
    let held = format!("run.partial is in use by another distill process (pid {}) that is still running", child.id());
    for out in [&second, &resumed] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(&held), "{stderr}");
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let first = child.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(130), "{}", String::from_utf8_lossy(&first.stderr));
    let metrics = std::fs::read_to_string(case.path("run.partial/metrics.jsonl")).unwrap();
    assert!(metrics.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()), "{metrics}");
    // the lock died with the first run: the folder resumes
    let done = case.resume("run", &[]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(!case.path("run/.lock").exists());
}

#[test]
fn resume_without_an_interrupted_run_says_so() {
    let case = Case::new();
    let (code, stderr) = case.resume_run("nothing", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no interrupted run there"), "{stderr}");
    // a resumed run keeps its device (run.json): --device is refused, not silently ignored
    let (code, stderr) = case.resume_run("nothing", &["--device", "cpu"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'--resume <DIR>' cannot be used with '--device <DEVICE>'"), "{stderr}");
}

#[test]
fn resume_falls_back_to_the_newest_checkpoint_that_loads() {
    let case = Case::edited("seed = 0", "seed = 0\nsave_every = 10");
    let resume = |extra: &[&str]| case.resume("run", extra);
    case.stopped_run("run", "30");
    let ckpts = case.path("run.partial/checkpoints");
    let step = |n: u64| ckpts.join(format!("step-{n:09}"));
    assert!(step(20).is_dir() && step(30).is_dir());

    // a --stop-after-steps the run has already passed would never stop it: refused
    let early = resume(&["--stop-after-steps", "20"]);
    let stderr = String::from_utf8_lossy(&early.stderr);
    assert_eq!(early.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--stop-after-steps 20: student already stands at step 30"), "{stderr}");

    // a power loss left the newest checkpoint empty and a half-written one beside it
    std::fs::write(step(30).join("tensors.safetensors"), b"").unwrap();
    std::fs::write(step(30).join("state.json"), b"").unwrap();
    std::fs::create_dir(ckpts.join("step-000000040.tmp")).unwrap();
    let resumed = resume(&[]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("step-000000030 (unreadable checkpoint"), "{stderr}");
    assert!(stderr.contains(&format!("resuming from the newest that does, {}", step(20).display())), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(case.path("run/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");

    // the run ends exactly as an unbroken one: same losses, same weights
    let unbroken = case.command(TEACHER, CFG, "unbroken").output().unwrap();
    assert!(unbroken.status.success());
    same_metrics(&case, "run", "unbroken");
    let weights = |run: &str| std::fs::read(case.path(run).join("student.safetensors")).unwrap();
    assert_eq!(weights("run"), weights("unbroken"));
}

#[test]
fn resume_refuses_a_changed_teacher_or_data_file_but_follows_a_moved_one() {
    let case = Case::new();
    case.stopped_run("run", "10");
    // another teacher (the traced one: other bytes) copied over the run's teacher
    std::fs::rename(case.path(TEACHER), case.path("own.pt")).unwrap();
    std::fs::copy(fixtures().join("teacher-traced.pt"), case.path(TEACHER)).unwrap();
    let (code, stderr) = case.resume_run("run", &[]);
    assert_eq!(code, 2, "{stderr}");
    let teacher = std::path::absolute(case.path(TEACHER)).unwrap();
    let own = std::fs::metadata(case.path("own.pt")).unwrap().len();
    assert!(
        stderr.contains(&format!("teacher {} is not the file the run started with ({own} bytes", teacher.display())),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // the train rows reversed: same size, other content
    let (x, y) = digits_train();
    case.write_npz("digits-train.npz", &x.flip([0]), &y.flip([0]));
    let (code, stderr) = case.resume_run("run", &["--teacher", case.path("own.pt").to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("data.train {} is not the file", case.path("digits-train.npz").display())),
        "{stderr}"
    );
    assert!(stderr.contains("put the run's own file back"), "{stderr}");
    assert!(case.path("run.partial/run.json").is_file(), "the run stays resumable");
    // the own files back (the teacher moved): the run finishes (named by its .partial folder)
    std::fs::copy(fixtures().join("digits-train.npz"), case.path("digits-train.npz")).unwrap();
    let (code, stderr) = case.resume_run("run.partial", &["--teacher", case.path("own.pt").to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(case.path("run/report.json").is_file() && !case.path("run.partial").exists());
}

#[test]
fn resume_warns_that_edits_to_the_cfg_are_not_trained() {
    let case = Case::new();
    case.stopped_run("run", "10");
    let (code, stderr) = case.resume_run("run", &["--stop-after-steps", "20"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.starts_with("stopped after step 20 as --stop-after-steps asked"), "{stderr}");
    assert!(!stderr.contains("changed since"), "an unedited cfg gets no warning: {stderr}");
    case.edit_config("epochs = 3", "epochs = 5");
    let (code, stderr) = case.resume_run("run", &[]);
    assert_eq!(code, 0, "{stderr}");
    let own = case.path("run.partial/config.toml");
    assert!(
        stderr.contains(&format!(
            "warning: {} changed since the run started; --resume trains the run's own copy ({})",
            case.path(CFG).display(),
            own.display()
        )),
        "{stderr}"
    );
    // the run trained its own 3 epochs
    let metrics = std::fs::read_to_string(case.path("run/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().filter(|l| l.contains("\"kind\":\"epoch\"")).count(), 3, "{metrics}");
}

#[test]
fn resume_names_a_checkpoint_copied_from_a_run_of_another_cfg() {
    let case = Case::new();
    case.stopped_run("a", "10");
    let b =
        case.command(TEACHER, CFG, "b").args(["--set", "train.lr=0.05", "--stop-after-steps", "10"]).output().unwrap();
    assert_eq!(b.status.code(), Some(0), "{}", String::from_utf8_lossy(&b.stderr));
    let (a, b) = (case.path("a.partial/checkpoints"), case.path("b.partial/checkpoints"));
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::rename(&b, &a).unwrap();
    let (code, stderr) = case.resume_run("a", &[]);
    assert_eq!(code, 2, "{stderr}");
    let step = a.join("step-000000010");
    assert!(
        stderr.contains(&format!(
            "{} (this checkpoint was written by a run of another configuration than this run's config.toml (copied from \
             another run?): move it to the run it came from and resume that one)",
            step.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("delete that folder to train this student from the start"), "{stderr}");
    assert!(step.is_dir(), "the checkpoint stays");
}

#[test]
fn a_runs_config_toml_reruns_from_another_folder_to_the_same_losses() {
    let case = Case::new();
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 0, "{stderr}");
    let copy = std::fs::read_to_string(case.path("run/config.toml")).unwrap();
    let spec = estimator_wasm::Config::from_toml_str(&copy).unwrap();
    let train = std::fs::canonicalize(case.path("digits-train.npz")).unwrap();
    assert_eq!(spec.data.train.as_deref(), Some(train.to_str().unwrap()));
    // the run folder moved elsewhere, run from another working folder
    std::fs::create_dir(case.path("elsewhere")).unwrap();
    std::fs::rename(case.path("run"), case.path("elsewhere/first")).unwrap();
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_distill"))
        .current_dir(std::env::temp_dir())
        .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
        .args(["--student", case.path("elsewhere/first/config.toml").to_str().unwrap()])
        .args(["--out", case.path("again").to_str().unwrap(), "--device", "cpu", "--quiet"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    std::fs::rename(case.path("elsewhere/first"), case.path("run")).unwrap();
    same_metrics(&case, "run", "again");
}

#[test]
fn resume_refuses_a_changed_student_init() {
    // The baseline phase starts from student.init after the KD phase: a changed init would
    // give it other starting weights than the run began with.
    let case = Case::edited("hidden = [32]", "hidden = [32]\ninit = \"init.safetensors\"");
    let init = case.path("init.safetensors");
    let save_init = |scale: f64| {
        let text = std::fs::read_to_string(case.path(CFG)).unwrap().replace("init = \"init.safetensors\"", "");
        let spec = estimator_wasm::Config::from_toml_str(&text).unwrap();
        let (vs, _) = distill::student::build::build_student(&spec, None, &case.path(CFG), tch::Device::Cpu).unwrap();
        let _ = tch::no_grad(|| vs.variables()["fc1.weight"].shallow_clone().g_mul_scalar_(scale));
        vs.save(&init).unwrap();
    };
    save_init(1.0);
    case.stopped_run("run", "10");
    save_init(2.0);
    let (code, stderr) = case.resume_run("run", &[]);
    assert_eq!(code, 2, "{stderr}");
    let needle =
        format!("student.init {} is not the file the run started with", case.path("init.safetensors").display());
    assert!(stderr.contains(&needle), "{stderr}");
    assert!(stderr.contains("put the run's own file back"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn resume_repairs_a_cut_metrics_log_and_says_what_was_lost() {
    let case = Case::new();
    case.stopped_run("run", "50");
    let metrics = case.path("run.partial/metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let counted = text.lines().count();
    let whole = text[..300].matches('\n').count();
    assert!(whole < counted && !text[..300].ends_with('\n'), "the cut must fall inside a line");
    std::fs::write(&metrics, &text[..300]).unwrap();
    let (code, stderr) = case.resume_run("run", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("holds {whole} whole line(s) of the {counted} up to step 50 (cut or removed since)")),
        "{stderr}"
    );
    // every line is JSON again; the lost lines are missing and nothing else
    let unbroken = case.command(TEACHER, CFG, "unbroken").output().unwrap();
    assert!(unbroken.status.success());
    let lines = |run: &str| std::fs::read_to_string(case.path(run).join("metrics.jsonl")).unwrap();
    let resumed = lines("run");
    for line in resumed.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert_eq!(resumed.lines().count(), lines("unbroken").lines().count() - (counted - whole));

    // the log removed: all of it is lost, and said so
    case.stopped_run("gone", "50");
    std::fs::remove_file(case.path("gone.partial/metrics.jsonl")).unwrap();
    let (code, stderr) = case.resume_run("gone", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(&format!("holds 0 whole line(s) of the {counted} up to step 50")), "{stderr}");
}

#[test]
fn sigterm_checkpoints_and_stops_as_ctrl_c_does() {
    // what torchrun sends the other workers when one fails, and Slurm's scancel before SIGKILL
    let case = Case::edited("epochs = 3", "epochs = 20");
    let child = started_run(&case);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("continue with `distill --resume"), "{stderr}");
    assert!(case.path("run.partial/checkpoints").read_dir().unwrap().count() >= 1);
}

#[test]
fn resume_without_checkpoints_says_it_starts_from_step_0() {
    let case = Case::new();
    for (out, remove) in [("emptied", false), ("deleted", true)] {
        case.stopped_run(out, "10");
        let ckpts = case.path(&format!("{out}.partial/checkpoints"));
        for entry in std::fs::read_dir(&ckpts).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
        if remove {
            std::fs::remove_dir(&ckpts).unwrap();
        }
        let (code, stderr) = case.resume_run(out, &[]);
        assert_eq!(code, 0, "{stderr}");
        let abs = std::path::absolute(&ckpts).unwrap();
        assert_eq!(stderr, format!("warning: student: no checkpoint in {}; starting from step 0\n", abs.display()));
    }
}

#[test]
fn resume_checks_where_the_run_will_finish_before_training() {
    let case = Case::new();
    case.stopped_run("v", "20");
    std::fs::create_dir(case.path("v")).unwrap();
    std::fs::write(case.path("v/mine.txt"), "mine").unwrap();
    let (code, stderr) = case.resume_run("v", &[]);
    assert_eq!(code, 2, "{stderr}");
    let v = case.path("v");
    assert_eq!(
        stderr,
        format!("error: --resume {0}: {0} exists and is not a finished distill run (no report.json), so the resumed run could not take its name: move it away, then resume again\n", v.display())
    );
    assert_eq!(std::fs::read_to_string(case.path("v/mine.txt")).unwrap(), "mine");
    assert!(case.path("v.partial/run.json").is_file(), "still resumable");
    std::fs::rename(case.path("v"), case.path("mine")).unwrap();
    let (code, stderr) = case.resume_run("v", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(case.path("v/report.json").is_file() && !case.path("v/run.json").exists());
}
