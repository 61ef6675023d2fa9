//! Data-parallel jobs of the real binary on the CPU (c10d's Gloo backend over loopback): torchrun
//! and hand-set launch variables, the same training as one process of the global batch, the
//! replicas kept identical, and ranks that die. Jobs refused before training: `job_refusals.rs`.
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{metrics_without_timing, Case, CFG, TEACHER};

/// A port nobody listens on now (the OS's choice, released at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `distill` as rank `rank` of `world`, its store at 127.0.0.1:`port`, one thread, `args` after
/// the case's teacher, cfg and `--out out`.
pub fn rank(case: &Case, rank: usize, world: usize, port: u16, args: &[&str]) -> Child {
    let mut c = case.command(TEACHER, CFG, "out");
    c.args(args);
    spawn_as_rank(c, rank, world, port)
}

/// Starts `c` as rank `rank` of `world` (its store at 127.0.0.1:`port`, Gloo on loopback, one
/// thread), its output captured.
pub fn spawn_as_rank(mut c: Command, rank: usize, world: usize, port: u16) -> Child {
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("GLOO_SOCKET_IFNAME", "lo")
        .env("OMP_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Loss and accuracy columns of every metrics line (the timing columns removed).
fn losses(out: &Path) -> Vec<serde_json::Value> {
    metrics_without_timing(&out.join("metrics.jsonl"))
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

/// The metrics logs of runs `a` and `b` line for line, every number within 1e-5 (relative).
fn assert_same_losses(a: &Path, b: &Path) {
    let (a, b) = (losses(a), losses(b));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_close(x, y, 1e-5);
    }
}

/// Every number of `a` and `b` (same keys) within `rel` of each other.
fn assert_close(a: &serde_json::Value, b: &serde_json::Value, rel: f64) {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= rel * x.abs().max(y.abs()).max(1e-12), "{x} vs {y}");
        }
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>());
            for (k, v) in x {
                assert_close(v, &y[k], rel);
            }
        }
        (x, y) => assert_eq!(x, y),
    }
}

/// `torchrun --nproc-per-node=2 [torchrun_args] --no-python distill ...` of the case into `out`
/// (c10d rendezvous at a free port, Gloo on loopback, one thread a rank).
fn torchrun(case: &Case, torchrun_args: &[&str], out: &str) -> Command {
    let torchrun = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/torchrun");
    assert!(torchrun.exists(), "{} is missing: run scripts/setup first", torchrun.display());
    let mut c = Command::new(&torchrun);
    c.args(["--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d"])
        .arg(format!("--rdzv-endpoint=127.0.0.1:{}", free_port()))
        .args(torchrun_args)
        .args(["--no-python", env!("CARGO_BIN_EXE_distill")])
        .args(["--teacher", case.path(TEACHER).to_str().unwrap(), "--student", case.path(CFG).to_str().unwrap()])
        .args(["--out", case.path(out).to_str().unwrap(), "--device", "cpu", "--quiet"])
        .env("GLOO_SOCKET_IFNAME", "lo")
        .env("OMP_NUM_THREADS", "1");
    c
}

/// The process ids of `parent`'s children whose environment holds `RANK=<rank>`.
fn children_of_rank(parent: u32, rank: usize) -> Vec<i32> {
    let entry = format!("RANK={rank}");
    let mut found = Vec::new();
    for dir in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = dir.file_name().to_string_lossy().parse::<i32>() else { continue };
        // /proc/<pid>/stat: "pid (name) state ppid ...", the name in parentheses
        let Ok(stat) = std::fs::read_to_string(dir.path().join("stat")) else { continue };
        let ppid = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1));
        if ppid != Some(&parent.to_string()) {
            continue;
        }
        let environ = std::fs::read(dir.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == entry.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn torchrun_restarts_a_job_whose_rank_was_killed_from_its_newest_checkpoint() {
    // torchrun --max-restarts reruns the first command on every worker after one fails: the
    // restarted workers continue from rank 0's newest checkpoint (not from step 0, and not
    // stopping at the .partial folder), and the job ends with the losses of an uninterrupted one.
    let case = Case::edited("epochs = 3", "epochs = 40");
    case.edit_config("seed = 0", "seed = 0\nsave_every = 50");
    train_single(&case);
    let job =
        torchrun(&case, &["--max-restarts=1"], "job").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let checkpoints = case.path("job.partial/checkpoints");
    while !std::fs::read_dir(&checkpoints).is_ok_and(|d| d.flatten().any(|e| e.path().join("state.json").is_file())) {
        assert!(started.elapsed() < Duration::from_secs(120), "no checkpoint after 2 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    // an edit between the attempts: the restart trains the run's own copy (and says so)
    case.edit_config("lr = 0.01", "lr = 0.02");
    let rank_one = children_of_rank(job.id(), 1);
    assert_eq!(rank_one.len(), 1, "torchrun's worker of rank 1");
    // SAFETY: a signal to a process our child started.
    assert_eq!(unsafe { libc::kill(rank_one[0], libc::SIGKILL) }, 0);
    let done = job.wait_with_output().unwrap();
    let err = text(&done.stderr);
    assert!(done.status.success(), "torchrun: {err}");
    assert!(!case.path("job.partial").exists(), "the restarted job finished and took its name");
    assert_same_losses(&case.path("single"), &case.path("job"));
    assert_eq!(report(&case.path("job"))["student"]["steps"], report(&case.path("single"))["student"]["steps"]);
}

#[test]
fn two_ranks_under_torchrun_train_as_one_process_of_the_global_batch() {
    let case = Case::new();
    train_single(&case);
    let job: Output = torchrun(&case, &[], "job").output().unwrap();
    assert!(job.status.success(), "torchrun: {}", text(&job.stderr));
    // Each rank averages the gradients of its 32 of every 64 samples: the losses, accuracies and
    // test figures of every logged step and epoch are those of one process at batch 64, to
    // float32 reduction order.
    assert_same_losses(&case.path("single"), &case.path("job"));
    let r = report(&case.path("job"));
    assert_eq!(
        r["data_parallel"],
        serde_json::json!({"world_size": 2, "backend": "gloo", "micro_batch": 32, "global_batch": 64})
    );
    assert_eq!(r["student"]["test_accuracy"], report(&case.path("single"))["student"]["test_accuracy"]);
    assert!(report(&case.path("single")).get("data_parallel").is_none());
    // one summary on stdout (rank 0's), one run folder
    assert_eq!(text(&job.stdout).matches("test accuracy").count(), 1, "{}", text(&job.stdout));
    let names = |d: &str| {
        let mut v: Vec<_> = std::fs::read_dir(case.path(d)).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    assert_eq!(names("job"), names("single"));
}

#[test]
fn batch_norm_replicas_stay_identical_with_rank_zeros_statistics() {
    // Each rank normalises with its own 16 samples; rank 0's running statistics are sent to all
    // before every step and evaluation, and every epoch ends with a check that both ranks hold
    // the same parameters and buffers (a mismatch stops the job with an error).
    let case = Case::edited("family = \"mlp\"", "family = \"cnn\"\nchannels = [8]\nnorm = \"batch\"");
    case.edit_config("batch_size = 32", "batch_size = 16");
    let port = free_port();
    let workers: Vec<Child> = (0..2).map(|r| rank(&case, r, 2, port, &[])).collect();
    let outs: Vec<Output> = workers.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
    }
    let r = report(&case.path("out"));
    assert_eq!(r["data_parallel"]["global_batch"], 32);
    assert!(r["student"]["test_accuracy"].as_f64().unwrap() > 0.85, "{}", r["student"]);
}

#[test]
fn sync_batch_norm_ranks_train_as_one_process_of_the_global_batch() {
    // --sync-batch-norm: each BatchNorm normalises over both ranks' 16 samples, so the job trains
    // what one process at batch 32 trains; without it each rank's own 16 give other losses.
    // SGD, not AdamW: the bias of the Linear before a BatchNorm has a zero gradient up to
    // rounding, which Adam's normalisation turns into whole steps, so under AdamW two ways of
    // summing the same batch drift apart on those biases (docs/data-parallel.md).
    // Every seed, not one lucky one. Two epochs (90 steps): the CPU convolution runs
    // channels-last, whose BatchNorm kernel sums a batch in another order than the synchronised
    // statistics; the runs agree to 1e-7 for ~100 steps, then a rounding-level flip (a tied
    // max-pool or a ReLU at 0) moves the later losses apart by 1e-5.
    let case = Case::edited("family = \"mlp\"", "family = \"cnn\"\nchannels = [8]\nnorm = \"batch\"");
    case.edit_config("epochs = 3", "epochs = 2");
    case.edit_config("batch_size = 32", "batch_size = 16\noptimizer = \"sgd\"\nlr = 0.05");
    case.edit_config("lr = 0.01", "");
    for seed in ["0", "1"] {
        let (single, synced) = (format!("single-{seed}"), format!("synced-{seed}"));
        let seeded = format!("train.seed={seed}");
        let one = case.command(TEACHER, CFG, &single).args(["--set", "train.batch_size=32", "--set", &seeded]).output();
        let one = one.unwrap();
        assert!(one.status.success(), "{}", text(&one.stderr));
        job_of_two(&case, &synced, &["--sync-batch-norm", "--set", &seeded]);
        assert_same_losses(&case.path(&single), &case.path(&synced));
        // the running statistics are the global batch's too: the test accuracy is one process's
        let acc = |d: &str| report(&case.path(d))["student"]["test_accuracy"].as_f64().unwrap();
        assert!((acc(&synced) - acc(&single)).abs() < 1e-6, "{} vs {}", acc(&synced), acc(&single));
    }
    job_of_two(&case, "own", &[]);
    let (own, one) = (losses(&case.path("own")), losses(&case.path("single-0")));
    assert_ne!(own[0]["loss"], one[0]["loss"], "per-rank statistics train another first step");
}

#[test]
fn ctrl_c_on_one_rank_stops_every_rank_after_the_same_step() {
    // Ctrl-C reaches the ranks at different times (here: rank 1 alone); they agree on it at the
    // steps that log, so both checkpoint the same step and stop.
    let case = Case::new();
    case.edit_config("epochs = 3", "epochs = 1000");
    let port = free_port();
    let zero = rank(&case, 0, 2, port, &[]);
    let one = rank(&case, 1, 2, port, &[]);
    case.wait_for_step("out");
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(one.id() as i32, libc::SIGINT) }, 0);
    let (one, zero) = (one.wait_with_output().unwrap(), zero.wait_with_output().unwrap());
    assert_eq!((zero.status.code(), one.status.code()), (Some(130), Some(130)), "{}", text(&zero.stderr));
    let step_of = |o: &Output| {
        let err = text(&o.stderr);
        let at = err.find("stopped after step ").unwrap_or_else(|| panic!("{err}"));
        err[at + 19..].split_whitespace().next().unwrap().parse::<u64>().unwrap()
    };
    let step = step_of(&zero);
    assert_eq!(step, step_of(&one));
    // rank 0 keeps the checkpoint and says how to go on; rank 1 has none to keep
    assert!(text(&zero.stderr).contains("continue with `distill --resume"), "{}", text(&zero.stderr));
    assert!(!text(&one.stderr).contains("--resume"), "{}", text(&one.stderr));
    assert!(case.path("out.partial/checkpoints").is_dir(), "rank 0 keeps its checkpoint");
    // a step that logs (log_every = 10) or ends an epoch (1437 samples: 23 global batches of 64)
    assert!(step % 10 == 0 || step % 23 == 0, "{step}");
}

#[test]
fn a_stopped_job_resumes_with_as_many_ranks_to_the_uninterrupted_losses() {
    let case = Case::new();
    train_single(&case);
    let stopped = job_of_two_stopped_after_30(&case);
    // a stop that was asked for: rank 0 says how to continue the job, rank 1 nothing
    assert!(
        text(&stopped[0].stderr)
            .contains("stopped after step 30 as --stop-after-steps asked, with a checkpoint; checkpoints kept in"),
        "{}",
        text(&stopped[0].stderr)
    );
    assert!(text(&stopped[0].stderr).contains("torchrun --nproc-per-node=2"), "{}", text(&stopped[0].stderr));
    assert_eq!(text(&stopped[1].stderr), "");
    // one process cannot continue it: its steps would hold one micro-batch, not two
    let alone = Command::new(env!("CARGO_BIN_EXE_distill"))
        .args(["--resume", case.path("out").to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(2));
    let err = text(&alone.stderr);
    assert!(err.contains("the run was a data-parallel job of 2 processes, and this is one process"), "{err}");
    // two ranks resume from rank 0's checkpoint and finish as one process of batch 64 trains
    resume_job_of_two(&case, "out");
    assert_same_losses(&case.path("single"), &case.path("out"));
}

#[test]
fn a_job_resumed_before_its_first_checkpoint_starts_over_and_keeps_its_folder() {
    // a job's .partial without checkpoints (a restart or --resume before the first one): every
    // rank starts from step 0; rank 1 used to remove rank 0's folder, which it had reopened
    let case = Case::new();
    train_single(&case);
    job_of_two_stopped_after_30(&case);
    let checkpoints = case.path("out.partial/checkpoints");
    std::fs::remove_dir_all(&checkpoints).unwrap();
    resume_job_of_two(&case, "out");
    assert_same_losses(&case.path("single"), &case.path("out"));
}

#[test]
fn a_rank_that_dies_makes_the_others_fail_within_seconds_naming_it() {
    // rank 1 killed: rank 0 fails in the next collective and names it after a roll call in the
    // store; rank 0 killed (launched by hand, it served the store): rank 1 says so
    for (killed, needle) in [
        (1, "rank 1 is gone (it did not answer within 3 s: see its log)"),
        (0, "rank 0 is gone (the job's store, which it served, does not answer)"),
    ] {
        let case = Case::new();
        case.edit_config("epochs = 3", "epochs = 1000");
        let port = free_port();
        let mut workers: Vec<Child> = (0..2).map(|r| rank(&case, r, 2, port, &[])).collect();
        case.wait_for_step("out");
        workers[killed].kill().unwrap();
        let started = Instant::now();
        assert!(!workers[killed].wait().unwrap().success(), "rank {killed} was killed");
        let survivor = workers.remove(1 - killed).wait_with_output().unwrap();
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
        assert_eq!(survivor.status.code(), Some(2), "{}", text(&survivor.stderr));
        let err = text(&survivor.stderr);
        let last = err.lines().last().unwrap();
        assert!(last.starts_with(&format!("error: data-parallel: rank {} of 2: ", 1 - killed)), "{err}");
        assert!(last.contains(needle), "killed rank {killed}: {err}");
        // one line: neither a panic nor TCPStore's logged C++ backtrace of the roll call
        assert!(!err.contains("panicked") && !err.contains("Exception raised from"), "{err}");
    }
}

/// Trains one process into `single` at the global batch of a job of two (64): the run a job's
/// losses are compared with.
fn train_single(case: &Case) {
    let single = case.command(TEACHER, CFG, "single").args(["--set", "train.batch_size=64"]).output().unwrap();
    assert!(single.status.success(), "{}", text(&single.stderr));
}

/// Runs ranks 0 and 1 of a job into `out` (store at a free port) that stop after step 30 (mid
/// epoch 2: 23 global batches an epoch), rank 0 keeping its checkpoint; asserts that both exit
/// with 0 and returns their outputs, rank by rank.
fn job_of_two_stopped_after_30(case: &Case) -> Vec<Output> {
    let port = free_port();
    let workers: Vec<Child> = (0..2).map(|r| rank(case, r, 2, port, &["--stop-after-steps", "30"])).collect();
    let stopped: Vec<Output> = workers.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    assert!(stopped.iter().all(|o| o.status.code() == Some(0)), "{}", text(&stopped[0].stderr));
    stopped
}

/// Resumes the job stopped in `out` with ranks 0 and 1 (`distill --resume`) to the end.
fn resume_job_of_two(case: &Case, out: &str) {
    let port = free_port();
    let resume = |r: usize| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_distill"));
        c.args(["--resume", case.path(out).to_str().unwrap(), "--quiet"]);
        spawn_as_rank(c, r, 2, port)
    };
    let resumed: Vec<Output> = [resume(0), resume(1)].into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for (r, o) in resumed.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
    }
}

/// Runs ranks 0 and 1 of a job into `out` (each `distill` with `args`, store at a free port) to
/// the end.
fn job_of_two(case: &Case, out: &str, args: &[&str]) {
    let port = free_port();
    let workers: Vec<Child> = (0..2)
        .map(|r| {
            let mut c = case.command(TEACHER, CFG, out);
            c.args(args);
            spawn_as_rank(c, r, 2, port)
        })
        .collect();
    for (r, o) in workers.into_iter().map(|c| c.wait_with_output().unwrap()).enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
    }
}

#[test]
fn checkpointed_ranks_train_as_one_process_without_checkpointing() {
    // Recomputing segments runs several backward passes; the ranks hand their gradients to the
    // Reducer at the end of the step, and the averages are those of one process at batch 64.
    let case = Case::edited("hidden = [32]", "hidden = [32, 32, 32]");
    train_single(&case);
    job_of_two(&case, "out", &["--set", "student.checkpointing=\"sqrt\""]);
    assert_same_losses(&case.path("single"), &case.path("out"));
    let r = report(&case.path("out"));
    assert_eq!(r["student"]["checkpointing_segments"], 3, "{}", r["student"]);
}

#[test]
fn a_language_model_with_a_chunked_loss_trains_as_one_process() {
    // the head and loss run chunk by chunk (several backward passes a step), on two ranks
    let case = Case::with_lm();
    let cfg = case.path("lm-student.toml");
    let edited = std::fs::read_to_string(&cfg).unwrap().replace("[kd]\n", "[kd]\nloss_chunk = 16\n");
    std::fs::write(&cfg, edited).unwrap();
    let mut single = case.command("lm-teacher.pt", "lm-student.toml", "single");
    let single = single.args(["--set", "train.batch_size=32"]).output().unwrap();
    assert!(single.status.success(), "{}", text(&single.stderr));
    let port = free_port();
    let workers: Vec<Child> =
        (0..2).map(|r| spawn_as_rank(case.command("lm-teacher.pt", "lm-student.toml", "out"), r, 2, port)).collect();
    for (r, o) in workers.into_iter().map(|c| c.wait_with_output().unwrap()).enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
    }
    assert_same_losses(&case.path("single"), &case.path("out"));
    let (one, two) = (report(&case.path("single")), report(&case.path("out")));
    assert_close(&one["student"]["test_perplexity"], &two["student"]["test_perplexity"], 1e-5);
    assert!(two["student"]["test_perplexity"].as_f64().unwrap() > 1.0, "{}", two["student"]);
}
