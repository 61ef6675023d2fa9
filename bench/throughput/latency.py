"""Inference latency of an exported student, as users deploy it: `student.pt` under
`torch.jit.load`, and the same weights (`student.safetensors`) in the eager PyTorch module that
`kd_eager.py` builds, at batch 1 and batch 256, on the CPU. Called by `bench.py` on a finished
distill run; prints one JSON line.

    latency.py --student CFG --run RUN_DIR [--threads 2] [--reps-1 200] [--reps-256 20]

Both models get the same random normalised input batch ([B, *input_shape], fp32, seed 0; for a
transformer student, as distill times it, the first test sentence alone and the first 256 padded
to their longest, with `kd_eager_text.py`'s eager module), in eval mode under `torch.inference_mode`; each timing is the median of its calls after 10 warm-up
calls (distill's own report, `student.latency`, times its in-process model the same way with 5
warm-ups). The two models' outputs on the batch-256 input are compared (max absolute
difference), so the figures are of one network.
"""
import argparse
import json
import os
import statistics
import sys
import time
import tomllib

import torch

from distill_tools.throughput.kd_eager import build_student, read_safetensors


def median_ms(model, x, reps, warmup=10):
    """Median milliseconds of `model(*x)` over `reps` calls after `warmup`."""
    with torch.inference_mode():
        for _ in range(warmup):
            model(*x)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            model(*x)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", required=True, help="the cfg.toml the run trained")
    p.add_argument("--run", required=True, help="distill's run folder (student.pt, student.safetensors)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps-1", type=int, default=200)
    p.add_argument("--reps-256", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.student, "rb") as f:
        cfg = tomllib.load(f)
    jit = torch.jit.load(os.path.join(a.run, "student.pt")).eval()
    state = read_safetensors(os.path.join(a.run, "student.safetensors"))
    shape = list(cfg["data"]["input_shape"])
    gen = torch.Generator().manual_seed(0)
    if cfg["student"].get("family") == "transformer":
        from distill_tools.throughput.kd_eager_text import Encoder, distill_names, encode_all, padded, read_sentences, tokenizer_of

        t = cfg["student"]["transformer"]
        eager = Encoder(t, int(cfg["data"]["classes"])).eval()
        with torch.no_grad():
            for name, param in distill_names(eager).items():
                param.copy_(state[name])
        base = os.path.dirname(os.path.abspath(a.student))
        tok = tokenizer_of(os.path.join(base, cfg["data"]["tokenizer"]), shape[0])
        ids = encode_all(tok, read_sentences(os.path.join(base, cfg["data"]["test"]))[:256])
        pad_id = tok.token_to_id("[PAD]") or 0
        x1, x256 = padded(ids, [0], pad_id), padded(ids, list(range(len(ids))), pad_id)
    else:
        eager = build_student(cfg["student"], cfg["data"]).eval()
        missing, unexpected = eager.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked")]
        if missing or unexpected:
            sys.exit(f"latency.py: {a.run}/student.safetensors does not fit {a.student}: missing {missing}, unexpected {unexpected}")
        x1, x256 = (torch.randn([1] + shape, generator=gen),), (torch.randn([256] + shape, generator=gen),)
    with torch.inference_mode():
        diff = float((jit(*x256) - eager(*x256)).abs().max())
    out = {
        "jit_batch_1_ms": median_ms(jit, x1, a.reps_1),
        "eager_batch_1_ms": median_ms(eager, x1, a.reps_1),
        "jit_batch_256_ms": median_ms(jit, x256, a.reps_256),
        "eager_batch_256_ms": median_ms(eager, x256, a.reps_256),
        "max_abs_diff": diff,
        "threads": a.threads,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
