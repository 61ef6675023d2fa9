"""Data-parallel scaling of `distill` on this machine's CPU: the same job (the same global batch,
epochs and data, so the same training) as one process and as a torchrun job of two processes
over c10d's Gloo backend, written into BENCHMARKS.md between the `data-parallel` markers.
Called by `scripts/bench-data-parallel` (which builds and prepares the inputs).

Runs, alternated `--reps` times (median reported):
  1 process x 1 thread        the anchor: what one core trains
  1 process x 2 threads       what two cores give without data parallelism (intra-op threads)
  2 processes x 1 thread      torchrun --nproc-per-node=2, OMP_NUM_THREADS=1, half the batch each
Scaling efficiency = samples/s of the 2-process job / (2 x the anchor's). Training samples/s
are distill's own (optimiser steps only); wall time is the whole job, from outside, under
`/usr/bin/time -f %M` (peak RSS of the launcher's process tree is not summed: each rank's own
peak is read from its `/usr/bin/time` wrapper). Every rank reads the teacher's outputs from a
shared `--teacher-cache` folder, filled by a first run that is not timed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from distill_tools.benchmarks_md import write_section
from distill_tools.machine import summary as machine_summary

START, END = "<!-- data-parallel:start -->", "<!-- data-parallel:end -->"


def run(a, name, procs, threads, batch, rep):
    out = os.path.join(a.out, f"{name}-{rep}")
    cmd = [a.distill, "--teacher", a.teacher, "--student", a.cfg, "--device", "cpu", "--out", out, "--overwrite"]
    cmd += ["--quiet", "--teacher-cache", os.path.join(a.out, "teacher-cache")]
    cmd += ["--set", f"train.epochs={a.epochs}", "--set", f"train.batch_size={batch}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo")
    rss = [os.path.join(a.out, f"{name}-{rep}.rank{r}.rss") for r in range(procs)]
    if procs == 1:
        full = ["/usr/bin/time", "-f", "%M", "-o", rss[0]] + cmd
    else:
        # each rank under its own /usr/bin/time, writing to the file of its RANK
        wrapper = f'exec /usr/bin/time -f %M -o {a.out}/{name}-{rep}.rank"$RANK".rss "$@"'
        full = [a.torchrun, "--standalone", f"--nproc-per-node={procs}", "--no-python", "bash", "-c", wrapper, "rank"]
        full += cmd
    t0 = time.perf_counter()
    p = subprocess.run(full, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {name} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    peaks = [int(open(r).read().split()[-1]) / 1024 for r in rss]
    s = report["student"]
    return {"samples_per_s": s["samples_per_s"], "wall": wall, "rss": max(peaks), "accuracy": s["test_accuracy"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--distill", required=True)
    p.add_argument("--torchrun", required=True)
    p.add_argument("--teacher", required=True)
    p.add_argument("--cfg", default="examples/fashion-mnist/student.toml")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="runs/bench-data-parallel")
    p.add_argument("--benchmarks", default="BENCHMARKS.md")
    p.add_argument("--command", default="scripts/bench-data-parallel")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    configs = [("1x1", 1, 1, a.batch), ("1x2", 1, 2, a.batch), ("2x1", 2, 1, a.batch // 2)]
    run(a, "warm-up", 1, 2, a.batch, 0)  # fills the teacher cache
    results = {c[0]: [] for c in configs}
    for rep in range(a.reps):
        for name, procs, threads, batch in configs if rep % 2 == 0 else list(reversed(configs)):
            print(f"== {name} rep {rep + 1}/{a.reps}", file=sys.stderr, flush=True)
            results[name].append(run(a, name, procs, threads, batch, rep))
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in results.items()}
    anchor = med["1x1"]["samples_per_s"]
    rows = {
        "1x1": "1 process x 1 thread (anchor)",
        "1x2": "1 process x 2 threads",
        "2x1": "2 processes x 1 thread (torchrun, Gloo)",
    }
    lines = [
        START,
        "## Data-parallel scaling on the CPU (`scripts/bench-data-parallel`)",
        "",
        f"`{a.command} --epochs {a.epochs} --reps {a.reps}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{machine_summary()}; `{a.cfg}`, {a.epochs} epoch(s) of "
        f"Fashion-MNIST at a global batch of {a.batch} (the 2-process job: {a.batch // 2} per rank), the teacher's "
        "outputs read from a shared cache; medians of the alternated repetitions.",
        "",
        "| job | training samples/s | x the anchor | scaling efficiency | wall s | peak RSS per process (MiB) | test accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label in rows.items():
        m = med[name]
        procs = 2 if name != "1x1" else 1
        eff = m["samples_per_s"] / (procs * anchor)
        lines.append(
            f"| {label} | {m['samples_per_s']:.0f} | {m['samples_per_s'] / anchor:.2f} | {eff:.0%} | {m['wall']:.1f} | "
            f"{m['rss']:.0f} | {m['accuracy']:.4f} |"
        )
    lines += [
        "",
        "Scaling efficiency: samples/s over (cores used x the anchor's). The 2-process job trains the same "
        "global batches as the 1-process ones (so the same accuracy, to float32 reduction order); each rank "
        "holds a whole student, optimiser and teacher-output cache, so its peak RSS is one process's.",
        END,
    ]
    text = "\n".join(lines)
    write_section(a.benchmarks, text, START, END)
    print(text)


if __name__ == "__main__":
    main()
