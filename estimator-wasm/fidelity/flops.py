"""Count the FLOPs of a distillation step of each fidelity configuration with PyTorch's
`torch.utils.flop_counter.FlopCounterMode`.

The step is `measure.py`'s (same layers, inputs, precision and loss), run on CPU as `distill`
runs it (`distill/src/train/step.rs`): without checkpointing, forward, loss, backward; with it, the
forward of segments 0..K-2 without grad keeping each segment's input, the last segment with
grad, the backward, then each earlier segment recomputed from its kept input (last to first)
and back-propagated with the gradient of its output. Each phase is counted by its own
FlopCounterMode:

* `forward`: the student's forward (and the loss, which has no product: `loss` must be 0);
* `backward`: the backward, checkpoint recompute excluded;
* `recompute`: the checkpointed segments' forward again (0 without checkpointing);
* `teacher_forward`: a no-grad forward of `[teacher.arch]` at the batch, when the config has one.

FlopCounterMode counts matrix products only (mm, addmm, bmm, convolution and its backward,
SDPA). torch 2.11 has no formula for the CPU flash kernel
(`_scaled_dot_product_flash_attention_for_cpu` and its backward): they are given PyTorch's own
formulas for the CUDA flash kernel (`sdpa_flop_count`, `sdpa_backward_flop_count`: forward 2
products, backward 5, the scores `q k^T` computed again), with the query's heads for grouped
keys (those formulas require equal heads).

Usage: python flops.py [--configs DIR]   (JSON on stdout)
"""
import argparse
import glob
import json
import os
import sys
import tomllib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# run as a script: its own folder is first on the import path, so its sibling imports by name
from measure import HERE, batch_of, checkpoint_segments, layers_of, logit_loss

aten = torch.ops.aten


def flash_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    b, h, s_q, d = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    return 2 * b * h * s_q * s_k * d + 2 * b * h * s_q * s_k * d_v


def flash_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    b, h, s_q, d = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    # scores again, grad of probs and of v (d_v), grad of q and of k (d)
    return 2 * b * h * s_q * s_k * (3 * d + 2 * d_v)


CPU_FLASH = {
    aten._scaled_dot_product_flash_attention_for_cpu: flash_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flash_backward,
}


class Tally:
    """FLOPs summed over several `with` blocks (a FlopCounterMode clears its count on entry)."""

    def __init__(self):
        self.total = 0
        self.mode = None

    def __enter__(self):
        self.mode = FlopCounterMode(display=False, custom_mapping=CPU_FLASH)
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.total += self.mode.get_total_flops()


def count(cfg):
    torch.manual_seed(0)
    layers, shape = layers_of(cfg)
    net = nn.ModuleDict(layers)
    train, kd = cfg.get("train", {}), cfg.get("kd", {})
    precision = train.get("precision", "fp32")
    b = train.get("batch_size", 128)
    if precision == "pure_bf16":
        net = net.to(torch.bfloat16)
    net.train()
    x, y, teacher_logits, rows = batch_of(cfg, shape, b, precision)
    classes = cfg["data"]["classes"]
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    def run(r, h):
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            for i in r:
                h = layers[i][1](h)
        return h

    segments = checkpoint_segments(len(layers), cfg["student"].get("checkpointing", "none"))
    segments = segments or [range(len(layers))]
    fwd, loss_mode, bwd, rec = Tally(), Tally(), Tally(), Tally()
    kept = []
    with fwd:
        h = x
        with torch.no_grad():
            for r in segments[:-1]:
                kept.append(h)
                h = run(r, h)
        if len(segments) > 1:
            h = h.detach().requires_grad_(True)
        last_input = h
        logits = run(segments[-1], h)
    with loss_mode:
        z = logits.reshape(b * rows, classes).to(torch.float32)
        alpha = kd.get("alpha", 0.9)
        if kd.get("objective", "logits") == "logits":
            loss = logit_loss(z, y, teacher_logits, kd.get("temperature", 4.0), alpha)
        elif kd["objective"] == "embedding_mse":
            loss = alpha * F.mse_loss(z, F.normalize(teacher_logits, dim=-1))
        else:
            loss = alpha * (1 - F.cosine_similarity(z, F.normalize(teacher_logits, dim=-1), dim=-1)).mean()
    with bwd:
        loss.backward()
    grad = last_input.grad
    for k in range(len(segments) - 2, -1, -1):
        h = kept[k]
        if k > 0:
            h = h.detach().requires_grad_(True)
        with rec:
            out = run(segments[k], h)
        with bwd:
            torch.autograd.backward(out, grad)
        grad = h.grad if k > 0 else None
    result = {
        "batch": b,
        "forward": fwd.total,
        "loss": loss_mode.total,
        "backward": bwd.total,
        "recompute": rec.total,
    }
    teacher = cfg.get("teacher", {}).get("arch")
    if teacher is not None:
        t_layers, _ = layers_of({"data": cfg["data"], "student": teacher})
        tnet = nn.ModuleDict(t_layers).eval()
        with torch.no_grad(), Tally() as t:
            h = x
            for _, m in t_layers:
                h = m(h)
        result["teacher_forward"] = t.total
        del tnet
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=os.path.join(HERE, "configs"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    for path in sorted(glob.glob(os.path.join(args.configs, "*.toml"))):
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
        results[os.path.splitext(os.path.basename(path))[0]] = count(cfg)
    meta = {"torch": torch.__version__, "device": "cpu"}
    sys.stdout.write(json.dumps({"meta": meta, "configs": results}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
