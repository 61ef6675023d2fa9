"""Turns the report.json files of scripts/bench-compression into a markdown section of
BENCHMARKS.md (between the `compression` markers, replacing an earlier one).

Usage: python scripts/bench_table.py RUNS_DIR BENCHMARKS.md DATE COMMAND
"""
import json
import os
import sys

from distill_tools.benchmarks_md import write_section
from distill_tools.machine import summary as machine_summary

START, END = "<!-- compression:begin -->", "<!-- compression:end -->"


def load(runs, name):
    with open(os.path.join(runs, name, "report.json")) as f:
        return json.load(f)


def kib(n):
    return f"{n / 1024:.1f} KiB"


def main():
    runs, target, date, command = sys.argv[1:5]
    fp32 = load(runs, "fp32")
    base = fp32["student"]["test_accuracy"]
    rows = []
    for name in ["fp32", "bf16", "fp16"]:
        r = load(runs, name)
        s = r["student"]
        scale = f'{s["final_loss_scale"]:.0f}, {s["skipped_steps"]} skipped' if s["final_loss_scale"] else "-"
        rows.append(
            f'| {name} | {100 * s["test_accuracy"]:.2f}% | {100 * (s["test_accuracy"] - base):+.2f} | '
            f'{s["samples_per_s"]:.0f} | {scale} |'
        )
    precision = "\n".join(rows)

    rows = []
    for name in ["fp32"] + [f"magnitude-{p}" for p in (50, 70, 80, 90, 95)] + ["structured-50"]:
        r = load(runs, name)
        s = r["student"]
        p = s.get("prune")
        if p is None:
            rows.append(
                f'| dense | - | {100 * s["test_accuracy"]:.2f}% | - | {s["params"]:,} | {kib(s["safetensors_bytes"])} | - | - | '
                f'{s["latency"]["batch_1_ms"]:.3f} / {s["latency"]["large_batch_ms"]:.2f} |'
            )
            continue
        shrunk = p.get("shrunk")
        latency = s["latency"]
        lat = f'{latency["batch_1_ms"]:.3f} / {latency["large_batch_ms"]:.2f}'
        if shrunk:
            lat += f' (dense {p["dense_latency"]["batch_1_ms"]:.3f} / {p["dense_latency"]["large_batch_ms"]:.2f})'
            size = f'{kib(shrunk["safetensors_bytes"])} ({100 * shrunk["safetensors_bytes"] / p["dense_file_bytes"]:.0f}% of dense)'
            nonzero = f'{shrunk["params"]:,}'
        else:
            size = kib(p["dense_file_bytes"])
            nonzero = f'{p["nonzero_params"]:,}'
        rows.append(
            f'| {p["method"]} {p["scope"] if p["method"] == "magnitude" else "per layer"} | {100 * p["target_sparsity"]:.0f}% '
            f'(measured {100 * p["weight_sparsity"]:.2f}%) | {100 * s["test_accuracy"]:.2f}% | '
            f'{100 * (s["test_accuracy"] - base):+.2f} | {nonzero} | {size} | {kib(p["gzip_file_bytes"])} | {kib(p["csr_bytes"])} | {lat} |'
        )
    pruning = "\n".join(rows)

    t = fp32["teacher"]
    section = f"""{START}
## Compression on Fashion-MNIST (`scripts/bench-compression`)

Measured {date} with `{command}` on {machine_summary()}, no GPU, device
`{fp32["device"]}`. Teacher: {t["params"]:,} parameters, {100 * t["test_accuracy"]:.2f}% test accuracy. Student:
`examples/fashion-mnist/student.toml` ({fp32["student"]["params"]:,} parameters), KD with T = {fp32["student"]["temperature"]},
alpha = {fp32["student"]["alpha"]}, {fp32["student"]["steps"]} steps; every run from the same seed. Accuracy on the 10,000
test images; difference in points against the fp32 dense student. Accuracy is deterministic on
CPU (same seed, same result); samples/s and latency are wall-clock figures from a 2-core machine
that may have run other jobs at the same time, so compare them only roughly.

### Mixed precision

| precision | test accuracy | vs fp32 | train samples/s | final loss scale |
|---|---|---|---|---|
{precision}

On this CPU (AVX2, no native bf16/fp16 arithmetic) 16-bit autocast is emulated and slower than
fp32; the point of these runs is accuracy parity. fp16 uses dynamic loss scaling (2^16, x2 after
2000 clean steps, x0.5 and skip on overflow).

### Pruning (sparsity of conv/linear weights; schedule: cubic, events every 50 steps, final at 75% of training)

| method | sparsity | test accuracy | vs dense | non-zero params | safetensors | gzip | CSR | CPU latency ms (batch 1 / 256) |
|---|---|---|---|---|---|---|---|---|
{pruning}

Unstructured sparsity leaves the dense file and latency unchanged (zeros are stored and
multiplied); only an encoding that skips zeros (gzip, CSR) or structured pruning, which removes
whole channels and neurons, makes the student smaller and faster.
{END}"""
    write_section(target, section, START, END)
    print(section)


if __name__ == "__main__":
    main()
