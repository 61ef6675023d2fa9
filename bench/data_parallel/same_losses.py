"""Compares the metrics.jsonl of two distill runs line for line, timing columns aside:
prints "same losses (N lines, largest relative difference D)" or what differs, and exits 1 on a
difference above 1e-5 (the tolerance of float32 reduction order), as the CPU tests do.

    python3 same_losses.py RUN_A RUN_B
"""
import json
import sys

TIMING = {"seconds", "samples_per_s", "tokens_per_s", "elapsed_s", "step_ms"}


def lines(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [{k: v for k, v in json.loads(l).items() if k not in TIMING} for l in f if l.strip()]


def numbers(a, b, path=""):
    """(path, x, y) of every pair of numbers in a and b, or raises on a differing structure."""
    if isinstance(a, dict):
        if sorted(a) != sorted(b):
            raise ValueError(f"{path}: keys {sorted(a)} vs {sorted(b)}")
        for k in a:
            yield from numbers(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        yield path, float(a), float(b)
    elif a != b:
        raise ValueError(f"{path}: {a!r} vs {b!r}")


def main():
    a, b = lines(sys.argv[1]), lines(sys.argv[2])
    if len(a) != len(b):
        print(f"differ: {len(a)} vs {len(b)} lines")
        return 1
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        for path, u, v in numbers(x, y):
            rel = abs(u - v) / max(abs(u), abs(v), 1e-12)
            worst = max(worst, rel)
            if rel > 1e-5:
                print(f"differ at line {i + 1} {path}: {u} vs {v}")
                return 1
    print(f"same losses ({len(a)} lines, largest relative difference {worst:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
