//! Data-parallel jobs refused before training, on every rank, in one line: launch variables
//! that cannot work, a rank whose group never forms, what a job cannot do yet, a backend that
//! cannot move the run's tensors, ranks launched with different settings.
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::{Case, CFG, TEACHER};
use crate::data_parallel::{free_port, rank, spawn_as_rank, text};

#[test]
fn a_rank_alone_gives_up_after_the_timeout_naming_the_endpoint() {
    let case = Case::new();
    let port = free_port();
    let started = Instant::now();
    let mut c = case.command(TEACHER, CFG, "out");
    c.env("RANK", "0").env("WORLD_SIZE", "2").env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", port.to_string());
    let out = c.env("DISTILL_DIST_TIMEOUT_S", "2").env("GLOO_SOCKET_IFNAME", "lo").output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("rank 0 of 2 joining the Gloo group at 127.0.0.1:{port}")), "{err}");
    assert!(!case.path("out").exists() && !case.path("out.partial").exists(), "nothing written");
}

/// A rank above 0 whose rank 0 never listens: libtorch logged every retry with C++ stack frames
/// (dozens of lines before the readable one); now one line naming the variables to check.
#[test]
fn a_master_that_never_answers_is_one_line_naming_the_variables() {
    let case = Case::new();
    let port = free_port();
    let mut c = case.command(TEACHER, CFG, "out");
    c.env("RANK", "1").env("WORLD_SIZE", "2").env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", port.to_string());
    let out = c.env("DISTILL_DIST_TIMEOUT_S", "2").env("GLOO_SOCKET_IFNAME", "lo").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("rank 1 of 2 joining the Gloo group at 127.0.0.1:{port}")), "{err}");
    assert!(err.contains("check MASTER_ADDR and MASTER_PORT"), "{err}");
}

/// NCCL's exclusion syntax in Gloo's variable: Gloo's own check named neither the variable nor
/// the interfaces present.
#[test]
fn an_interface_gloo_cannot_bind_is_named_before_the_group_forms() {
    let case = Case::new();
    let mut c = case.command(TEACHER, CFG, "out");
    c.env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", free_port().to_string());
    let out = c.env("DISTILL_DIST_TIMEOUT_S", "2").env("GLOO_SOCKET_IFNAME", "^lo").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: GLOO_SOCKET_IFNAME=^lo: this host has no network interface \"^lo\""), "{err}");
    assert!(err.contains("; it has ") && err.contains("lo"), "{err}");
}

#[test]
fn launch_variables_that_cannot_work_are_refused_in_one_line() {
    let case = Case::new();
    let run = |vars: &[(&str, &str)], extra: &[&str]| {
        let mut c = case.command(TEACHER, CFG, "out");
        c.args(extra);
        for (k, v) in vars {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (o.status.code(), text(&o.stderr))
    };
    let (code, err) = run(&[("RANK", "0"), ("WORLD_SIZE", "2")], &[]);
    assert_eq!(code, Some(2));
    assert!(
        err.trim_end().ends_with(
            "WORLD_SIZE=2 but MASTER_ADDR is unset: set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port"
        ),
        "{err}"
    );
    let (code, err) = run(&[("RANK", "2"), ("WORLD_SIZE", "2")], &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("RANK=2 must be below WORLD_SIZE=2"), "{err}");
    let (code, err) = run(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "0")], &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("MASTER_PORT=\"0\" is not a port number"), "{err}");
    assert!(!case.path("out").exists(), "nothing written");
}

#[test]
fn what_a_job_cannot_do_yet_is_refused_on_every_rank() {
    let case = Case::new();
    let port = free_port();
    let workers: Vec<Child> =
        (0..2).map(|r| rank(&case, r, 2, port, &["--set", "train.batch_size=\"auto\""])).collect();
    for (r, o) in workers.into_iter().map(|c| c.wait_with_output().unwrap()).enumerate() {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "rank {r}: {err}");
        let needle = "train.batch_size = \"auto\" in a data-parallel job of 2 processes";
        assert!(err.lines().last().unwrap().contains(needle), "rank {r}: {err}");
    }
    assert!(!case.path("out").exists() && !case.path("out.partial").exists(), "nothing written");
    // refused before joining: a rank whose group can never form (no rank 0) still names the
    // mistake, at once, and does not wait out the join (a rank that refused after joining could
    // leave while the other was still connecting, which then reported the lost connection)
    let mut alone = case.command(TEACHER, CFG, "out");
    alone.args(["--set", "train.batch_size=\"auto\""]).env("DISTILL_DIST_TIMEOUT_S", "20");
    let o = spawn_as_rank(alone, 1, 2, free_port()).wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.lines().last().unwrap().contains("train.batch_size = \"auto\" in a data-parallel job of 2"), "{err}");
}

#[test]
fn a_backend_that_cannot_move_the_runs_tensors_is_refused_on_every_rank() {
    // NCCL is built in and chosen on CUDA; asked for on the CPU, or an unknown one, it is refused
    let case = Case::new();
    for (backend, needle) in [
        ("nccl", "DISTILL_DIST_BACKEND=nccl with --device cpu: NCCL moves CUDA tensors only"),
        ("mpi", "DISTILL_DIST_BACKEND=\"mpi\": use gloo or nccl (or unset it)"),
    ] {
        let port = free_port();
        let workers: Vec<Child> = (0..2)
            .map(|r| {
                let mut c = case.command(TEACHER, CFG, "out");
                c.env("DISTILL_DIST_BACKEND", backend);
                spawn_as_rank(c, r, 2, port)
            })
            .collect();
        for (r, o) in workers.into_iter().map(|c| c.wait_with_output().unwrap()).enumerate() {
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "rank {r}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(needle), "rank {r}: {err}");
        }
        assert!(!case.path("out").exists() && !case.path("out.partial").exists(), "nothing written");
    }
}

#[test]
fn ranks_launched_with_different_settings_are_refused_before_training() {
    // another learning rate would train other replicas; another width would exchange gradients
    // of other sizes (Gloo aborts the process); another seed would shuffle other batches
    let case = Case::new();
    for args in [
        &["--set", "train.lr=0.02"][..],
        &["--set", "student.hidden=[64]"],
        &["--set", "train.seed=5"],
        &["--sync-batch-norm"],
    ] {
        let set = args.join(" ");
        let port = free_port();
        let zero = rank(&case, 0, 2, port, &[]);
        let one = rank(&case, 1, 2, port, args);
        for (r, o) in [zero, one].into_iter().map(|c| c.wait_with_output().unwrap()).enumerate() {
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{set}, rank {r}: {err}");
            let last = err.lines().last().unwrap();
            assert!(
                last.contains(
                    "the ranks were launched with different cfg.toml settings, teachers, data or --sync-batch-norm"
                ),
                "{err}"
            );
        }
        assert!(!case.path("out").exists() && !case.path("out.partial").exists(), "{set}: nothing written");
    }
}
