"""The causal-LM benchmark of the SmolLM2 demo, written into BENCHMARKS.md between the `lm` markers and
into OUT/bench.json. Called by `scripts/bench-lm`, which makes the runs it reads.

From one `distill` run of an examples/smollm2 cfg with `--baseline` (RUN: the KD student,
RUN/baseline: the same student on next-token CE alone, from the same initialisation and data),
and optionally a second such run of another student (--compare, e.g. the whole head beside the
factorised one), all measured together:
  - held-out perplexity of the teacher, the KD student and the CE-only student, from the run's
    report.json (all three measured by distill on the same packed test windows);
  - tokens/s of teacher.pt and of each exported student.pt (`torch.jit.load`, the CPU,
    --threads threads, no grad) on the test windows at batch --batch, interleaved batch by batch
    over --reps passes after a warm-up (median pass; the ratio is the median of the per-pass
    ratios);
  - parameters (token embedding and the rest) and file sizes; greedy continuations of a few
    held-out prompts by each model (PROMPTS; the teacher's and both students' TorchScript);
  - peak memory of training: two short distill runs of the same cfg on the first --memory-lines
    training lines, stopped after --memory-steps steps, the loss whole (`kd.loss_chunk = 0`) and
    in chunks (the cfg's), each under `/usr/bin/time -f %M` (peak resident set), beside the
    estimator's total for the same run (`distill plan --json`, target CPU). The resident set also holds
    the process itself (libtorch's code, the tokenizer, the teacher's fp32 file before its bf16
    cast), which the estimator does not price: compare the two runs' difference with the
    predicted difference.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import tomllib

import torch
from safetensors import safe_open
from tokenizers import Tokenizer

from distill_tools.benchmarks_md import write_section
from distill_tools.lm_eval import NEW_TOKENS, PROMPTS, greedy, windows
from distill_tools.machine import summary as machine_summary

START, END = "<!-- lm:begin -->", "<!-- lm:end -->"


def speeds(models, data, batch, reps):
    """tokens/s of each model (name -> module) over `data` in batches, interleaved per batch."""
    batches = [data[i : i + batch] for i in range(0, data.shape[0], batch)]
    with torch.inference_mode():
        for m in models.values():
            for b in batches[:2]:
                m(b, torch.ones_like(b))
        passes = {name: [] for name in models}
        for rep in range(reps):
            spent = {name: 0.0 for name in models}
            names = list(models)
            for i, b in enumerate(batches):
                order = names[i % len(names) :] + names[: i % len(names)]
                for name in order:
                    t = time.perf_counter()
                    models[name](b, torch.ones_like(b))
                    spent[name] += time.perf_counter() - t
            for name in models:
                passes[name].append(spent[name])
    tokens = data.numel()
    out = {}
    for name, times in passes.items():
        ratio = statistics.median(passes["teacher"][r] / times[r] for r in range(reps))
        out[name] = {"tokens_per_s": tokens / statistics.median(times), "vs_teacher": ratio,
                     "min": tokens / max(times), "max": tokens / min(times)}
    return out


def safetensors_params(path):
    """(token embedding elements, other elements) of a student.safetensors."""
    emb = other = 0
    with safe_open(path, "pt") as f:
        for k in f.keys():
            n = f.get_slice(k).get_shape()
            count = 1
            for d in n:
                count *= d
            if k.startswith("embed."):
                emb += count
            else:
                other += count
    return emb, other


def memory_run(a, name, chunk, train):
    """The training part of a distill run (load, the teacher's test pass, --memory-steps steps, a
    checkpoint: `--stop-after-steps`, so no evaluation, export or latency run, whose logits over
    the whole test set are another matter) and its peak RSS; beside it the estimator's total for
    the same cfg (`distill plan --json`, target CPU) and its peak phase (bytes)."""
    out = os.path.join(a.out, f"memory-{name}")
    rss = out + ".rss"
    # the stopped run leaves its checkpoint in OUT.partial, which distill keeps for --resume:
    # an earlier benchmark's is ours to drop
    shutil.rmtree(out + ".partial", ignore_errors=True)
    sets = ["--set", f"data.train={train}", "--set", "train.epochs=1", "--set", f"kd.loss_chunk={chunk}"]
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss, a.distill, "--teacher", a.teacher, "--student", a.cfg,
           "--device", "cpu", "--out", out, "--overwrite", "--quiet", "--stop-after-steps", str(a.memory_steps)] + sets
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 130:  # 130: stopped after the step, with a checkpoint
        sys.exit(f"bench-lm: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    plan = subprocess.run([a.distill, "plan", "--student", a.cfg, "--teacher", a.teacher, "--json",
                           "--set", "estimate.target=cpu"] + sets, capture_output=True, text=True, check=True)
    p = json.loads(plan.stdout)["plan"]
    return {"peak_rss_bytes": int(open(rss).read().split()[-1]) * 1024, "predicted_bytes": p["totals"]["total"],
            "peak_phase": p["peak_phase"]}


def mib(b):
    return f"{b / 2**20:,.0f}"


def student_runs(run, tag):
    """[(key, label, report entry, folder)] of a run's KD student and, when trained, its CE-only
    baseline; `tag` names the student's head in the labels (None: no tag)."""
    report = json.load(open(os.path.join(run, "report.json")))
    suffix = f" ({tag})" if tag else ""
    out = [("kd" + (tag or ""), "KD student" + suffix, report["student"], run)]
    if report.get("baseline"):
        out.append(("ce" + (tag or ""), "CE-only student" + suffix, report["baseline"], os.path.join(run, "baseline")))
    return report, out


def head_of(run):
    """The student's head as the run's cfg describes it: (label, rank or None)."""
    t = tomllib.load(open(os.path.join(run, "config.toml"), "rb"))["student"]["transformer"]
    rank = t.get("head_rank")
    if rank:
        return f"head rank {rank}", rank
    return ("tied head" if t.get("tie_embeddings") else "whole head"), None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--distill", required=True)
    p.add_argument("--teacher", required=True)
    p.add_argument("--cfg", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--compare", help="a second run (with --baseline) of another student, measured beside RUN's")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--memory-lines", type=int, default=200)
    p.add_argument("--memory-steps", type=int, default=12)
    p.add_argument("--command", required=True)
    p.add_argument("--run-command", required=True)
    p.add_argument("--out", default="runs/bench-lm")
    p.add_argument("--benchmarks", default="BENCHMARKS.md")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file(a.tokenizer)
    tag, rank = head_of(a.run)
    report, students = student_runs(a.run, tag if a.compare else None)
    if a.compare:
        students += student_runs(a.compare, head_of(a.compare)[0])[1]
    labels = {"teacher": "teacher", **{key: label for key, label, _, _ in students}}
    models = {"teacher": torch.jit.load(a.teacher).eval()}
    for key, _, _, folder in students:
        models[key] = torch.jit.load(os.path.join(folder, "student.pt")).eval()
    data = windows(tok, a.test, a.window)
    load = os.getloadavg()[0]
    speed = speeds(models, data, a.batch, a.reps)
    load_after = os.getloadavg()[0]
    samples = {name: [greedy(m, tok, pr, NEW_TOKENS) for pr in PROMPTS] for name, m in models.items()}

    train_lines = [l for l in open(a.train, encoding="utf-8").read().split("\n") if l.strip()][: a.memory_lines]
    small = os.path.abspath(os.path.join(a.out, "memory-train.txt"))
    with open(small, "w", encoding="utf-8") as f:
        f.writelines(l + "\n" for l in train_lines)
    chunk = int(next(l.split("=")[1].split("#")[0] for l in open(a.cfg) if l.strip().startswith("loss_chunk")))
    memory = {"whole": memory_run(a, "whole", 0, small), "chunked": memory_run(a, "chunked", chunk, small)}

    t = report["teacher"]
    s = report["student"]
    rows = [("teacher", t["test_perplexity"], t["test_accuracy"], None, t["params"], None, t["file_bytes"], None)]
    for key, label, r, folder in students:
        split = safetensors_params(os.path.join(folder, "student.safetensors"))
        rows.append((label, r["test_perplexity"], r["test_accuracy"], r["agreement"], r["params"], split,
                     r["torchscript_bytes"], r["safetensors_bytes"]))
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    test_text = report["data"]["test_text"]
    train_text = report["data"]["train_text"]
    runs = f"`{a.run_command}`" + (f" and the run in `{a.compare}`" if a.compare else "")
    head = (f"; the students with a head of rank {rank} (head.down [{rank}, d], "
            f"head.up [vocab, {rank}]; the embedding untied) have it fitted to the teacher's head on the student's "
            "hidden states before training" if rank else "")
    lines = [START, "## Causal LM distilled from SmolLM2-135M-Instruct (`scripts/bench-lm`)", "",
             f"Measured {date} with `{a.command}` on {machine_summary()}, no GPU, torch {torch.__version__}; "
             f"one-minute load average {load:.1f} before the timing and {load_after:.1f} after it.", "",
             f"The runs: {runs}: {train_text['packing']['tokens']:,} training tokens "
             f"({train_text['packing']['lines']:,} KJV passages) in {train_text['lines']:,} windows of {a.window}, "
             f"{s['steps']} steps of {s['batch_size']} windows per student, evaluated on {test_text['lines']} held-out windows "
             f"({test_text['lines'] * a.window:,} tokens of Genesis 1, Ruth, Jonah, Titus, Philemon and Jude). "
             f"The teacher is SmolLM2-135M-Instruct's 4-bit Q4_1 GGUF dequantized to fp32 (examples/smollm2/make_teacher.py); "
             f"the students start from its embedding and layers 0, 9, 19, 29 and train in bf16 autocast with the teacher "
             f"in bf16{head}; a KD student's loss is 0.5 x forward KL (T = 1) + 0.5 x next-token CE, a CE-only student's CE alone, "
             "from the same initialisation and data. "
             f"Perplexity: exp of the mean next-token cross-entropy over the test windows' predicting positions.", "",
             "| model | test perplexity | next-token accuracy | top-1 agreement with the teacher | parameters (embedding + other) | files |",
             "|---|---:|---:|---:|---|---|"]
    for name, ppl, acc, agree, params, split, pt, st in rows:
        split_s = f"{split[0] / 1e6:.2f} M + {split[1] / 1e6:.2f} M = {params / 1e6:.2f} M" if split else f"{params / 1e6:.2f} M (tied embedding 28.31 M)"
        files = f"`student.pt` {pt / 1e6:.1f} MB, `student.safetensors` {st / 1e6:.1f} MB" if st else f"`teacher.pt` {pt / 1e6:.1f} MB"
        agree_s = "-" if agree is None else f"{agree:.1%}"
        lines.append(f"| {name} | **{ppl:.2f}** | {acc:.1%} | {agree_s} | {split_s} | {files} |")
    lines.append("")
    for kd, ce in zip(students[0::2], students[1::2]):
        a_ppl, b_ppl = kd[2]["test_perplexity"], ce[2]["test_perplexity"]
        lines.append(f"{kd[1]} against {ce[1]}: perplexity {a_ppl:.2f} against {b_ppl:.2f} "
                     f"({(b_ppl - a_ppl) / b_ppl:.1%} lower); the teacher's is {t['test_perplexity']:.2f}.")
    lines += ["", f"Throughput (`torch.jit.load` of each TorchScript, CPU, {a.threads} threads, batch {a.batch} x {a.window} tokens, "
              f"the {data.shape[0]} test windows, {a.reps} interleaved passes after a warm-up; the goal is 4x with at most half "
              "the teacher's layers, 4 of 30 here):", "",
              "| model | tokens/s (min-max) | vs teacher |", "|---|---:|---:|"]
    for name in models:
        r = speed[name]
        lines.append(f"| {labels[name]} | {r['tokens_per_s']:,.0f} ({r['min']:,.0f}-{r['max']:,.0f}) | {r['vs_teacher']:.2f}x |")
    lines += ["", "Greedy continuations (24 tokens) of held-out prompts:", ""]
    for i, pr in enumerate(PROMPTS):
        lines.append(f"- *{pr}*")
        for name in models:
            text = samples[name][i].replace("\n", " ").replace("|", "\\|")
            lines.append(f"  - {labels[name]}: {text}")
    mw, mc = memory["whole"], memory["chunked"]
    lines += ["", f"Peak memory of training, CPU: `{a.cfg}` on the first {a.memory_lines} training lines, stopped after "
              f"{a.memory_steps} steps with a checkpoint (`--stop-after-steps`: loading, the teacher's test pass and the steps; "
              f"no evaluation or export), the loss whole or in chunks of {chunk} positions; the estimator's total for it "
              "(`distill plan --json --set estimate.target=cpu`) against the peak resident set (`/usr/bin/time -f %M`), "
              "which also holds what the estimator does not price (libtorch's code, the tokenizer, the teacher's fp32 "
              "file read before its bf16 cast): compare the differences.", "",
              "| loss | predicted MiB (peak phase) | peak RSS MiB |", "|---|---:|---:|",
              f"| whole (`kd.loss_chunk = 0`) | {mib(mw['predicted_bytes'])} ({mw['peak_phase']}) | {mib(mw['peak_rss_bytes'])} |",
              f"| chunks of {chunk} | {mib(mc['predicted_bytes'])} ({mc['peak_phase']}) | {mib(mc['peak_rss_bytes'])} |",
              f"| difference | {mib(mw['predicted_bytes'] - mc['predicted_bytes'])} | {mib(mw['peak_rss_bytes'] - mc['peak_rss_bytes'])} |",
              END]
    text = "\n".join(lines)
    write_section(a.benchmarks, text, START, END)
    json.dump({"speed": speed, "samples": samples, "memory": memory, "report": report}, open(os.path.join(a.out, "bench.json"), "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
