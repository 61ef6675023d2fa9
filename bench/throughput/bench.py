"""Side-by-side training throughput: `distill` against the hand-written PyTorch eager loop
(`kd_eager.py`), run interleaved on the same machine, written into BENCHMARKS.md between the
`throughput` markers. Called by `scripts/bench-throughput` (which builds and prepares the inputs).

For each case (a cfg.toml and a precision), both sides get the same data files, teacher file,
initial weights (`init.safetensors`, written here by kd_eager.py from the seeded PyTorch init and
given to distill as `student.init`), epoch orders (distill's own permutations, written by the
`epoch_order` example), batch size, epochs, optimiser, schedule, precision and thread count
(`OMP_NUM_THREADS` for both, `torch.set_num_threads` in Python). Repetitions alternate which side
runs first. Each run is timed from outside (wall clock) under `/usr/bin/time -f %M` (peak RSS). With
`--device cuda` both sides train on the GPU (the image cases; fp16 too) and each reports its
caching allocator's peak allocated and reserved bytes, beside the estimator's prediction from
distill's report.

Check that both sides train the same thing: the loss of the first step (distill: a separate run
with `train.log_every = 1` stopped after one step; Python: the first step of each timed run) and
the mean loss of the first `log_every` steps (distill's first metrics line) must agree.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from distill_tools.benchmarks_md import write_section
from distill_tools.eager_result import read_eager_result
from distill_tools.machine import summary as machine_summary

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {
    "cnn": "examples/fashion-mnist/student.toml",
    "mlp": "bench/throughput/mlp.toml",
    "cnn-large": "bench/throughput/cnn-large.toml",
    "minilm": "examples/minilm/student.toml",
}
# Cases whose reference side is kd_eager_text.py (sentences, a transformer student) instead of kd_eager.py.
TEXT_CASES = {"minilm"}
START, END = "<!-- throughput:start -->", "<!-- throughput:end -->"


def timed(cmd, env, log):
    """Runs `cmd` under /usr/bin/time (peak RSS, KiB) when present; (stdout, wall s, peak RSS MiB)."""
    rss_file = log + ".rss"
    wrapped = ["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd if os.path.exists("/usr/bin/time") else cmd
    t0 = time.perf_counter()
    with open(log, "w") as err:
        p = subprocess.run(wrapped, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({p.returncode}); see {log}")
    rss = float("nan")
    if os.path.exists(rss_file):
        with open(rss_file) as f:
            rss = int(f.read().split()[-1]) / 1024
    return p.stdout, wall, rss


def prepare_text(a, cfg, out, init, order, env):
    """The text case's inputs: the first `--text-sentences` lines of the cfg's train file (a copy
    in `out`), the student's teacher-initialised weights (`init`, kd_eager_text.py's copy of
    `student.init_from_teacher`, given to both sides), and distill's length-bucketed epoch orders
    (`order`). Returns the reference command, the teacher, the batch size (the cfg's) and the
    distill overrides for the data."""
    import tomllib

    with open(cfg, "rb") as f:
        spec = tomllib.load(f)
    source = os.path.join(os.path.dirname(cfg), spec["data"]["train"])
    train = os.path.abspath(os.path.join(out, "train.txt"))
    with open(source, encoding="utf-8") as src, open(train, "w", encoding="utf-8") as dst:
        for _, line in zip(range(a.text_sentences), src):
            dst.write(line)
    py = [sys.executable, os.path.join(HERE, "kd_eager_text.py"), "--student", cfg]
    subprocess.run(py + ["--teacher", a.text_teacher, "--write-init", init], env=env, check=True, stdout=subprocess.DEVNULL)
    lengths = os.path.join(out, "lengths.i64")
    subprocess.run(py + ["--train", train, "--write-lengths", lengths], env=env, check=True, stdout=subprocess.DEVNULL)
    batch = int(spec["train"]["batch_size"])
    n = os.path.getsize(lengths) // 8
    subprocess.run([a.epoch_order, str(n), "0", str(a.epochs), order, lengths, str(batch)], check=True)
    return py + ["--train", train], a.text_teacher, batch, [f"data.train={json.dumps(train)}"]


def distill_cmd(a, cfg, out, sets, teacher=None):
    # --latency: distill's wall time keeps its own latency measurement (as before it was opt-in),
    # and the last repetition's report gives it beside latency.py's
    cmd = [a.distill, "--teacher", teacher or a.teacher, "--student", cfg, "--device", a.device, "--out", out, "--overwrite", "--quiet", "--latency"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def first_metrics_line(folder):
    for path in glob.glob(os.path.join(folder, "metrics.jsonl")):
        with open(path) as f:
            for line in f:
                j = json.loads(line)
                if "step" in j and j.get("kind", "step") == "step":
                    return j
    return None


def loss_of(line):
    losses = line.get("losses", line)
    return losses["loss"] if isinstance(losses, dict) else losses


def run_case(a, name, precision, env):
    cfg = CASES[name]
    case = f"{name}-{precision}"
    out = os.path.join(a.out, case)
    os.makedirs(out, exist_ok=True)
    init = os.path.abspath(os.path.join(out, "init.safetensors"))
    order = os.path.join(out, "order.i64")
    if name in TEXT_CASES:
        py, teacher, batch, data_sets = prepare_text(a, cfg, out, init, order, env)
    else:
        py = [sys.executable, os.path.join(HERE, "kd_eager.py"), "--student", cfg]
        subprocess.run(py + ["--write-init", init], env=env, check=True, stdout=subprocess.DEVNULL)
        n = len(np.load(a.train_npz)["y"])
        subprocess.run([a.epoch_order, str(n), "0", str(a.epochs), order], check=True)
        teacher, batch, data_sets = a.teacher, a.batch, []
    sets = data_sets + [
        f"student.init={json.dumps(init)}",
        f"train.epochs={a.epochs}",
        f"train.batch_size={batch}",
        f"train.precision={json.dumps(precision)}",
    ]
    eager = py + ["--teacher", teacher, "--init", init, "--order", order, "--epochs", str(a.epochs)]
    eager += ["--batch-size", str(batch), "--precision", precision, "--threads", str(a.threads)]
    eager += [] if name in TEXT_CASES else ["--device", a.device]

    # distill's first step alone: log every step, stop after one (a checkpoint is written).
    check = os.path.join(out, "distill-first-step")
    shutil.rmtree(check, ignore_errors=True)
    shutil.rmtree(check + ".partial", ignore_errors=True)
    subprocess.run(
        distill_cmd(a, cfg, check, sets + ["train.log_every=1"], teacher) + ["--stop-after-steps", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    line = first_metrics_line(check + ".partial") or first_metrics_line(check)
    distill_first = loss_of(line) if line else float("nan")

    sides = ["distill", "eager"] + (["compile"] if a.compile else [])
    runs = {s: [] for s in sides}
    for rep in range(a.reps):
        # alternate which side goes first, so a trend in the machine's load hits both
        for side in sides if rep % 2 == 0 else list(reversed(sides)):
            log = os.path.join(out, f"{side}-{rep}.log")
            print(f"== {case} rep {rep + 1}/{a.reps}: {side}", file=sys.stderr, flush=True)
            if side == "distill":
                run_dir = os.path.join(out, f"distill-{rep}")
                _, wall, rss = timed(distill_cmd(a, cfg, run_dir, sets, teacher), env, log)
                with open(os.path.join(run_dir, "report.json")) as f:
                    report = json.load(f)
                s = report["student"]
                first = first_metrics_line(run_dir)
                r = {
                    "samples_per_s": s["samples_per_s"],
                    "train_seconds": s["train_seconds"],
                    # an embedding student's held-out figure is its mean cosine with the teacher
                    "test_accuracy": s["test_accuracy"] if s["test_accuracy"] is not None else s["agreement"],
                    "first_window_loss": loss_of(first) if first else float("nan"),
                    "teacher_cache_seconds": report["teacher"].get("train_outputs_seconds") or float("nan"),
                }
                memory = report.get("memory") or {}
                r["peak_allocated_bytes"] = memory.get("measured_peak_allocated_bytes")
                r["peak_reserved_bytes"] = memory.get("measured_peak_reserved_bytes")
                r["predicted_allocated_bytes"] = memory.get("predicted_allocated_bytes")
            else:
                cmd = eager + (["--compile"] if side == "compile" else [])
                stdout, wall, rss = timed(cmd, env, log)
                r = read_eager_result(stdout)
            r.update(wall=wall, rss_mib=rss)
            runs[side].append(r)
            print(f"   {r['samples_per_s']:.0f} samples/s, wall {wall:.1f} s, {rss:.0f} MiB", file=sys.stderr, flush=True)
    # The teacher run on every batch instead of cached (teacher.cache_logits = false): one
    # distill run of one epoch, against the cached runs' samples/s and their one-time pass.
    live_dir = os.path.join(out, "distill-live-teacher")
    print(f"== {case}: distill with the teacher live (1 epoch)", file=sys.stderr, flush=True)
    live_sets = [s for s in sets if not s.startswith("train.epochs=")] + ["train.epochs=1", "teacher.cache_logits=false"]
    _, live_wall, _ = timed(distill_cmd(a, cfg, live_dir, live_sets, teacher), env, os.path.join(out, "distill-live-teacher.log"))
    with open(os.path.join(live_dir, "report.json")) as f:
        live = json.load(f)
    cache_s = [r["teacher_cache_seconds"] for r in runs["distill"]]
    teacher = {
        "live_samples_per_s": live["student"]["samples_per_s"],
        "live_wall": live_wall,
        "distill_cache_seconds": statistics.median(cache_s),
    }
    # The exported student (the last distill repetition's) as users load it.
    last = os.path.join(out, f"distill-{a.reps - 1}")
    lat = subprocess.run(
        [sys.executable, os.path.join(HERE, "latency.py"), "--student", cfg, "--run", last, "--threads", str(a.threads)],
        env=env, check=True, stdout=subprocess.PIPE, text=True,
    )
    latency = json.loads(lat.stdout.strip().splitlines()[-1])
    with open(os.path.join(last, "report.json")) as f:
        latency["distill"] = json.load(f)["student"]["latency"]
    result = {"case": case, "cfg": cfg, "precision": precision, "distill_first_loss": distill_first, "runs": runs}
    result["device"] = a.device
    result["kind"] = "text" if name in TEXT_CASES else "images"
    result.update(teacher=teacher, latency=latency)
    result["load_average"] = os.getloadavg()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def median(runs, key):
    return statistics.median(r[key] for r in runs) if runs else float("nan")


def spread(runs, key):
    """`median (min-max)` of `key` over the repetitions."""
    values = [r[key] for r in runs]
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def row(result):
    runs = result["runs"]
    d, e = runs["distill"], runs["eager"]
    c = runs.get("compile", [])
    sd, se = median(d, "samples_per_s"), median(e, "samples_per_s")
    sc = spread(c, "samples_per_s") if c else "not measured"
    first_e = e[0]["first_loss"]
    diff = abs(result["distill_first_loss"] - first_e)
    if result.get("kind") == "text":  # the mean cosine with the teacher
        acc = lambda rs: "/".join(f"cos {r['test_accuracy']:.4f}" for r in rs)  # noqa: E731
    else:
        acc = lambda rs: "/".join(f"{100 * r['test_accuracy']:.2f}" for r in rs)  # noqa: E731
    window = f"{median(d, 'first_window_loss'):.5f} / {median(e, 'first_window_loss'):.5f}"
    return (
        f"| {result['case']} | {spread(d, 'samples_per_s')} | {spread(e, 'samples_per_s')} | **{sd / se:.2f}x** | {sc} "
        f"| {median(d, 'wall'):.1f} / {median(e, 'wall'):.1f} "
        f"| {median(d, 'teacher_cache_seconds'):.1f} / {median(e, 'teacher_cache_seconds'):.1f} "
        f"| {median(d, 'rss_mib'):.0f} / {median(e, 'rss_mib'):.0f} "
        f"| {result['distill_first_loss']:.6f} / {first_e:.6f} ({diff:.1e}) | {window} | {acc(d)} / {acc(e)} |"
    )


def wall_split(runs):
    """`teacher pass + training steps + the rest` of the median repetition's wall seconds."""
    wall, cache, train = (median(runs, k) for k in ("wall", "teacher_cache_seconds", "train_seconds"))
    return f"{wall:.1f} = {cache:.1f} + {train:.1f} + {wall - cache - train:.1f}"


def cost_row(result):
    """The teacher cache's cost and gain, the wall time's parts and the exported student's latency."""
    runs, t, lat = result["runs"], result.get("teacher"), result.get("latency")
    if not t or not lat:
        return f"| {result['case']} | not measured | | | | | |"
    cached = median(runs["distill"], "samples_per_s")
    d = lat["distill"]
    return (
        f"| {result['case']} | {t['distill_cache_seconds']:.1f} | {cached:,.0f} / {t['live_samples_per_s']:,.0f} "
        f"(**{cached / t['live_samples_per_s']:.1f}x**) | {wall_split(runs['distill'])} | {wall_split(runs['eager'])} "
        f"| {lat['jit_batch_1_ms']:.3f} / {lat['eager_batch_1_ms']:.3f} / {d['batch_1_ms']:.3f} "
        f"| {lat['jit_batch_256_ms']:.2f} / {lat['eager_batch_256_ms']:.2f} / {d['large_batch_ms']:.2f} |"
    )


def mib(runs, key):
    """The median of `key` (bytes) over the repetitions in MiB, or "-" where not measured."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return f"{statistics.median(values) / 2**20:,.0f}" if values else "-"


def memory_row(result):
    """CUDA runs: each side's allocator peaks, and the estimator's allocated prediction."""
    d, e = result["runs"]["distill"], result["runs"]["eager"]
    return (
        f"| {result['case']} | {mib(d, 'predicted_allocated_bytes')} | {mib(d, 'peak_allocated_bytes')} "
        f"| {mib(d, 'peak_reserved_bytes')} | {mib(e, 'peak_allocated_bytes')} | {mib(e, 'peak_reserved_bytes')} |"
    )


def section(a, results):
    head = (
        "| case | distill samples/s | eager samples/s | ratio | torch.compile samples/s "
        "| wall s (distill / eager) | of which teacher cache s (distill / eager) | peak RSS MiB (distill / eager) "
        f"| first-step loss (distill / eager, diff) | mean loss of the first {a.log_every} steps "
        "| test accuracy % (distill / eager, each rep) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
    )
    rows = "\n".join(row(r) for r in results)
    cost_head = (
        "| case | teacher pass s (distill, once) | training samples/s, cached / teacher live (gain) "
        "| distill wall s = teacher pass + training + rest | eager wall s = teacher pass + training + rest "
        "| exported student, batch 1 ms: `torch.jit.load` / eager PyTorch / distill in-process "
        "| batch 256 ms: jit / eager / distill |\n"
        "|---|---:|---:|---|---|---:|---:|"
    )
    cost_rows = "\n".join(cost_row(r) for r in results)
    on_gpu = [r for r in results if r.get("device") == "cuda"]
    memory = (
        "\n\nCUDA memory (MiB; the estimator's prediction is `distill plan`'s allocated total for the "
        "cfg, the peaks are each side's caching allocator over its run):\n\n"
        "| case | predicted allocated | distill peak allocated | distill peak reserved | eager peak allocated "
        "| eager peak reserved |\n|---|---:|---:|---:|---:|---:|\n" + "\n".join(memory_row(r) for r in on_gpu)
        if on_gpu
        else ""
    )
    loads = ", ".join(f"{r['case']} {r['load_average'][0]:.2f}" for r in results if "load_average" in r)
    loads = f" One-minute load average at the end of each case: {loads}." if loads else ""
    images = [r for r in results if r.get("kind") != "text"]
    teacher_accuracy = images[0]["runs"]["eager"][0]["teacher_accuracy"] if images else float("nan")
    text = next((r for r in results if r.get("kind") == "text"), None)
    text_note = (
        f"""

The `minilm` case is the text demo's student (`examples/minilm/student.toml`: 3 post-norm
BERT layers 384 wide, 12 heads, feed-forward 1,536, started from teacher layers 0, 4 and 5 and
the teacher's embeddings) distilled from all-MiniLM-L6-v2 (`{a.text_teacher}`) on the first
{a.text_sentences:,} lines of its train file, at the cfg's batch of
{text["runs"]["eager"][0]["batch_size"]} sentences of similar length (distill's length-bucketed
batches, written by the `epoch_order` example and read by both sides) for {a.epochs} epoch(s), the
loss the MSE of the L2-normalised sentence embeddings. Its other side is
`bench/throughput/kd_eager_text.py` (the same student in plain PyTorch, math attention kernel,
AdamW, the `tokenizers` package); the initial weights are that script's copy of the teacher's
layers, given to both sides as `student.init`; its last column is the mean cosine of the
student's and the teacher's test embeddings (2,620 held-out sentences), not an accuracy."""
        if text
        else ""
    )
    return f"""{START}
## Training throughput against a PyTorch eager loop (`scripts/bench-throughput`)

Measured {a.date} with `{a.command}` on {machine_summary()}, {a.gpu},
torch {a.torch} (the same libtorch under both sides). {a.note}{loads}

Each case trains the same student on Fashion-MNIST (60,000 train / 10,000 test images) for {a.epochs}
epoch(s) at batch {a.batch} with {a.threads} threads, both sides from the same initial weights
(`student.init`), in the same batches (distill's epoch permutations), with the teacher's logits
cached once before training; {a.reps} repetitions per side, interleaved. The other side is
`bench/throughput/kd_eager.py`, the loop a user would write by hand (AdamW with the same
decay groups and schedule, `torch.autocast` for bf16). Samples/s is the training loop alone
(samples over the summed time of the steps, the definition of distill's report; median and
min-max of the repetitions);
wall time is the whole job measured from outside (process start, data and teacher load,
teacher cache, training, an evaluation per epoch, export; distill also writes checkpoints and
measures the exported student's latency); peak RSS by `/usr/bin/time -f %M`. Teacher:
{a.teacher_note}; test accuracy {100 * teacher_accuracy:.2f}%. With cached logits the training throughput does not depend on the teacher's
quality. bf16 autocast runs native kernels on CPUs with `avx512_bf16`/`amx_bf16` and is
emulated (slower than fp32) without them.{text_note}

{head}
{rows}

The first-step loss is the loss of the first batch from the same initial weights before any
update (distill: a separate run with `train.log_every = 1` stopped after one step); the next
column compares the mean of the first {a.log_every} steps (distill's first metrics line), where
both sides have updated the weights {a.log_every - 1} times. torch.compile: {a.compile_note}

What the cached teacher saves, where the wall time goes, and what the exported student costs at
inference. The teacher-live column is one more distill run per case, of one epoch, with
`teacher.cache_logits = false` (the teacher's forward on every batch). "The rest" of a wall time
is everything but the teacher pass and the training steps: process start, data and teacher
load, an evaluation per epoch, export (and for distill checkpoints and its own latency
measurement). Latency: the last distill repetition's `student.pt` under `torch.jit.load` and its
`student.safetensors` in `kd_eager.py`'s eager module (`bench/throughput/latency.py`: median of
200 calls at batch 1, 20 at batch 256, {a.threads} threads, inference mode), beside distill's own
in-process figure from its report.

{cost_head}
{cost_rows}{memory}
{END}"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--distill", required=True)
    p.add_argument("--epoch-order", required=True)
    p.add_argument("--teacher", required=True)
    p.add_argument("--teacher-note", required=True)
    p.add_argument("--train-npz", default="data/fashion-mnist/train.npz")
    p.add_argument("--text-teacher", default="data/minilm/teacher.pt", help="the minilm case's teacher")
    p.add_argument("--text-sentences", type=int, default=6400, help="the minilm case's first N train lines")
    p.add_argument("--cases", default="cnn-fp32,cnn-bf16,mlp-fp32,mlp-bf16,minilm-fp32,minilm-bf16")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides train")
    p.add_argument("--out", default="runs/bench-throughput")
    p.add_argument("--benchmarks", default="BENCHMARKS.md")
    p.add_argument("--command", default="scripts/bench-throughput")
    p.add_argument("--note", default="", help="a sentence for the section (e.g. what else ran)")
    p.add_argument("--report-only", action="store_true", help="rewrite the section from the saved results")
    a = p.parse_args()
    a.command += f" --cases {a.cases} --epochs {a.epochs} --reps {a.reps} --threads {a.threads} --batch {a.batch}"
    a.command += " --compile" if a.compile else ""
    a.command += " --device cuda" if a.device == "cuda" else ""
    if a.device == "cuda" and any(c.split("-")[0] in TEXT_CASES for c in a.cases.split(",")):
        p.error("--device cuda runs the image cases (cnn, mlp, cnn-large): kd_eager_text.py trains on the CPU only")
    if a.device == "cpu" and any(c.endswith("-fp16") for c in a.cases.split(",")):
        p.error("fp16 cases need --device cuda (fp16 autocast with a GradScaler)")
    a.command += f" --text-sentences {a.text_sentences}" if any(c.startswith("minilm") for c in a.cases.split(",")) else ""
    import torch

    a.torch = torch.__version__
    a.gpu = f"GPU {torch.cuda.get_device_name(0)}" if a.device == "cuda" else "no GPU"
    a.date = time.strftime("%Y-%m-%d", time.gmtime())
    a.log_every = 50
    a.compile_note = (
        "the student compiled with `torch.compile` (default mode), compile time inside the first steps."
        if a.compile
        else "not measured in this run (pass `--compile`)."
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    results = []
    for case in a.cases.split(","):
        if a.report_only:
            with open(os.path.join(a.out, case, "result.json")) as f:
                results.append(json.load(f))
            continue
        name, precision = case.rsplit("-", 1)
        results.append(run_case(a, name, precision, env))
        print(row(results[-1]), file=sys.stderr, flush=True)
    text = section(a, results)
    write_section(a.benchmarks, text, START, END)
    print(text)


if __name__ == "__main__":
    main()
