//! `distill plan`: the estimator's breakdown of a cfg.toml, as text and JSON.
use std::process::{Command, Output};

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

#[test]
fn plan_refuses_more_ranks_than_training_samples_as_the_trainer_does() {
    // the digits fixture trains on 1437 samples: a job of 1438 ranks leaves one without any
    let case = Case::new();
    let out = plan_without_cuda(&case, &["--gpu", "H200", "--set", "estimate.data_parallel=1438"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = "estimate.data_parallel = 1438, but the training set holds 1437 samples: a rank would have none and distill refuses such a job; plan at most 1437 ranks";
    assert!(stderr.contains(CFG) && stderr.contains(why) && stderr.lines().count() == 1, "{stderr}");
    // as many ranks as samples: planned, one sample each
    let out = plan_without_cuda(&case, &["--gpu", "H200", "--set", "estimate.data_parallel=1437"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `distill plan --student CFG --teacher TEACHER` of `case` with `extra` flags, the machine's CUDA
/// devices hidden (`CUDA_VISIBLE_DEVICES` empty): the CPU's plan unless `--gpu` names one.
fn plan_without_cuda(case: &Case, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_distill"))
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["plan", "--student", case.path(CFG).to_str().unwrap()])
        .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

/// `distill plan` on a machine without a CUDA device (hidden here with `CUDA_VISIBLE_DEVICES`)
/// and without `--gpu`: the CPU's plan, no CUDA context, and a fit line against the RAM.
#[test]
fn plan_without_a_gpu_is_for_this_machines_cpu() {
    let case = Case::new();
    let run = |extra: &[&str]| {
        let out = plan_without_cuda(&case, extra);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(&[]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with("; target cpu"), "{text}");
    assert!(lines[2].starts_with("cpu (RAM available): ") && lines[2].contains(" -> fits ("), "{text}");
    assert!(!text.contains("cuda context") && !text.contains("allocator"), "{text}");
    assert!(text.contains("note: planned for this machine's CPU (no CUDA device): the RAM available"), "{text}");
    // on the CPU nothing is rounded or cached: one column of bytes, and the tensors are the total
    let header = lines.iter().find(|l| l.starts_with("phase")).unwrap();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["phase", "largest", "at", "tensors"]);
    let figure = |label: &str| {
        let line = lines.iter().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{label}"));
        line.trim_start()[label.len()..].trim().to_string()
    };
    assert_eq!(figure("= tensors"), figure("total on the device"));
    // JSON: the machine's device, and the plan priced on it (no CUDA context)
    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert_eq!(json["device"]["name"], "cpu");
    assert_eq!(json["device"]["fits"], true);
    assert!(json["device"]["memory"].as_u64().unwrap() > 0);
    assert_eq!(json["plan"]["totals"]["cuda_context"], 0);
    assert_eq!(json["plan"]["target"], "cpu");
    // a catalogue GPU named: the CUDA plan; the allocator's segments hold the tensors, so they
    // are not among the items summed, and the total adds what lies outside them
    let text = run(&["--gpu", "T4"]);
    assert!(text.lines().next().unwrap().ends_with("; target cuda") && !text.contains("planned for this machine"));
    let peak: Vec<&str> =
        text.lines().skip_while(|l| !l.starts_with("at the peak")).take_while(|l| !l.is_empty()).collect();
    let sum = peak.iter().position(|l| l.trim_start().starts_with("= tensors")).unwrap();
    assert!(peak[..sum].iter().all(|l| !l.contains("allocator") && !l.contains("context")), "{text}");
    assert_eq!(peak[sum + 1], "on the device:");
    assert!(peak[sum + 2].trim_start().starts_with("allocator segments"), "{text}");
    assert!(peak.iter().any(|l| l.trim_start().starts_with("+ cuda context")), "{text}");
    // the total, then the caching allocator's reserved bytes replayed over the run (CUDA only)
    // and the device total on them, which the headline and the fit give
    assert!(peak[peak.len() - 3].trim_start().starts_with("= total "), "{text}");
    assert!(peak[peak.len() - 2].trim_start().starts_with("reserved, replayed run"), "{text}");
    let replayed = peak.last().unwrap().trim_start();
    assert!(replayed.starts_with("= total, replayed run"), "{text}");
    let replayed_total = replayed.trim_start_matches("= total, replayed run").trim();
    assert!(text.lines().nth(1).unwrap().ends_with(&format!(", {replayed_total} on the device")), "{text}");
    let json: serde_json::Value = serde_json::from_str(&run(&["--gpu", "T4", "--json"])).unwrap();
    let t = &json["plan"]["totals"];
    let n = |k: &str| t[k].as_u64().unwrap();
    assert_eq!(n("total"), n("reserved") + n("fragmentation") + n("cuda_context") + n("nccl"));
    // the plan's own fit is the fast bound's (as the browser shows it); the table judges the
    // replayed total, the allocator's replay plus the context and NCCL
    let replayed = json["plan"]["reserved_replay"].as_u64().unwrap() + n("cuda_context") + n("nccl");
    let fit = &json["plan"]["fit"];
    let capacity = fit["capacity"].as_u64().unwrap();
    assert_eq!(fit["free"].as_u64().unwrap(), capacity - n("total"));
    let free = text.lines().nth(2).unwrap();
    let human = |b: u64| estimator_wasm::memory::render::human(b);
    assert!(free.ends_with(&format!("-> fits ({} free)", human(capacity - replayed))), "{text}");
    assert!(json.get("device").is_none());
}

/// Without its data files a plan takes the data's size from `--train-samples` and
/// `--test-samples`; the note that says what is left out names those flags and the files as
/// the trainer would open them (tidied: no `folder/..`).
#[test]
fn plan_takes_the_data_size_from_flags_when_the_files_are_missing() {
    let case = Case::edited("train = \"digits-train.npz\"", "train = \"elsewhere/../typo.npz\"");
    let run = |extra: &[&str]| {
        let out = plan_without_cuda(&case, extra);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (_, text, _) = run(&[]);
    let note = format!(
        "note: {} or {} could not be read, so this plan leaves out what the data decides (samples per epoch, the \
         teacher's cached outputs); check data.train and data.test",
        case.path("typo.npz").display(),
        case.path("digits-test.npz").display()
    );
    assert!(text.contains(&note), "{note}\n{text}");
    assert!(text.contains("or pass --train-samples N (and --test-samples N) to price them"), "{text}");
    // the flags price the data: int64 labels and fp32 inputs of 1 x 8 x 8 (the file is not
    // there to say it holds uint8), and the teacher's cached logits
    let (_, json, _) = run(&["--train-samples", "1000", "--test-samples", "200", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json["data"]["dataset"],
        serde_json::json!({"train_samples": 1000, "test_samples": 200, "sample_bytes": 256})
    );
    assert_eq!(json["plan"]["peak"]["dataset"], 1200 * (256 + 8));
    let (_, text, _) = run(&["--train-samples", "1000", "--test-samples", "200"]);
    assert!(!text.contains("could not be read") && !text.contains("left out"), "{text}");
    // a micro-batch no larger than the train set: the whole set is the largest a run cuts
    let t4 = text.lines().find(|l| l.trim_start().starts_with("T4 ")).unwrap();
    assert!(t4.ends_with(" 1000 (the whole train set)"), "{t4}");
    // the held-out file is read when it is there
    let (_, json, _) = run(&["--train-samples", "1000", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["data"]["dataset"]["test_samples"], 360);
    let (code, _, stderr) = run(&["--train-samples", "0"]);
    assert_eq!(code, Some(2));
    assert_eq!(stderr, "error: --train-samples 0: a data set holds at least 1 sample\n");
}
