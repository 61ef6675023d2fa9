"""Measure the memory of a language model's distillation loss under each `kd.divergence`.

The ops are distill's, one for one: `objective/logit_kd.rs` (the predicting positions of token
logits [B, S, V] picked with `index_select`, then `alpha * soft + (1 - alpha) * CE`) and
`objective/divergence.rs` (the soft term; tch calls the same ATen functions: `log_softmax`,
`kl_div` with `log_target`, which ATen computes as `exp(target) * (target - input)`,
`logaddexp`, `softmax`, `abs`, `sum`). The student's logits (requiring grad; fp32, or bf16 as
autocast makes them, the rows then cast to fp32 as distill does), the teacher's (fp32) and the
labels exist before the loss and are not counted. Three figures per case, in bytes
(docs/memory-model.md section 7b):

* `saved`: what autograd keeps for backward, by `torch.autograd.graph.saved_tensors_hooks`,
  each storage once (by its data pointer), the inputs' storages excluded (section 11 A);
* `forward_peak`: the largest sum of live storages the loss allocated while it was built;
* `backward_peak`: the same while `loss.backward()` ran, counted from the backward's start
  (the saved tensors still alive then are in it, and the logits' gradient once it exists).

Live storages are tracked by a `TorchDispatchMode`: each op's outputs whose storage is new are
added at their `nbytes()` and taken off when Python's weak reference to the storage dies.
Every label is a real token (no -100), so the rows are all B x S positions, as the plan takes.

Usage: python divergences.py [--batch B] [--seq S] [--vocab V] [--logits fp32|bf16]   (JSON on stdout)
"""
import argparse
import json
import math
import sys
import weakref

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CASES = [
    ("none", None),
    ("forward_kl", None),
    ("reverse_kl", None),
    ("jsd", 0.5),
    ("jsd", 0.9),
    ("jsd", 0.0),
    ("jsd", 1.0),
    ("tvd", None),
]


class LiveBytes(TorchDispatchMode):
    """The bytes of the storages the ops under it allocated that are still alive, and their peak
    since the last `mark()`."""

    def __init__(self, exclude):
        super().__init__()
        self.exclude = set(exclude)
        self.live = {}
        self.now = 0
        self.peak = 0

    def mark(self):
        self.peak = self.now

    def _free(self, key):
        self.now -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key = st.data_ptr()
            if key in self.exclude or key in self.live or st.nbytes() == 0:
                continue
            self.live[key] = st.nbytes()
            self.now += st.nbytes()
            weakref.finalize(st, self._free, key)
        self.peak = max(self.peak, self.now)
        return out


def soft_term(s, t, temperature, name, beta):
    """distill's `soft_loss` (objective/divergence.rs), op for op, on fp32 logits."""
    if name == "jsd" and beta <= 0.0:
        name = "forward_kl"
    elif name == "jsd" and beta >= 1.0:
        name = "reverse_kl"
    scale = temperature * temperature / s.shape[0]
    if name == "tvd":
        q = (s / temperature).softmax(-1)
        p = (t / temperature).softmax(-1)
        return (q - p).abs().sum() * (0.5 * scale)
    s_logp = (s / temperature).log_softmax(-1)
    t_logp = (t / temperature).log_softmax(-1)
    if name == "forward_kl":
        return torch.kl_div(s_logp, t_logp, reduction=2, log_target=True) * scale
    if name == "reverse_kl":
        return torch.kl_div(t_logp, s_logp, reduction=2, log_target=True) * scale
    log_m = torch.logaddexp(t_logp + math.log(beta), s_logp + math.log(1.0 - beta))
    to_teacher = torch.kl_div(log_m, t_logp, reduction=2, log_target=True) * beta
    to_student = torch.kl_div(log_m, s_logp, reduction=2, log_target=True) * (1.0 - beta)
    return (to_teacher + to_student) * scale


def kd_loss(logits, teacher, labels, name, beta, alpha=0.5, temperature=2.0):
    """distill's `LogitKd::loss` on token logits; `name` "none": CE alone (alpha = 0)."""
    labels = labels.reshape(-1)
    keep = labels.ge(0).nonzero().squeeze(1)
    rows = logits.flatten(0, 1).index_select(0, keep)  # alive through the loss, as in distill
    student = rows.float()
    y = labels.index_select(0, keep)
    ce = torch.nn.functional.nll_loss(student.log_softmax(-1), y)
    if name == "none":
        del rows
        return ce
    t = teacher.flatten(0, 1).index_select(0, keep)
    soft = soft_term(student, t, temperature, name, beta)
    loss = soft * alpha + ce * (1.0 - alpha)
    del rows
    return loss


def measure(batch, seq, vocab, dtype, name, beta):
    torch.manual_seed(0)
    logits = torch.randn(batch, seq, vocab, dtype=dtype, requires_grad=True)
    teacher = torch.randn(batch, seq, vocab)
    labels = torch.randint(0, vocab, (batch, seq))
    inputs = {x.untyped_storage().data_ptr() for x in (logits, teacher, labels)}
    saved = {}

    def pack(x):
        key = x.untyped_storage().data_ptr()
        if key not in inputs:
            saved[key] = x.untyped_storage().nbytes()
        return x

    with LiveBytes(inputs) as live:
        with saved_tensors_hooks(pack, lambda x: x):
            loss = kd_loss(logits, teacher, labels, name, beta)
        forward_peak = live.peak
        live.mark()
        loss.backward()
        backward_peak = live.peak
    return {
        "divergence": name,
        "beta": beta,
        "saved": sum(saved.values()),
        "forward_peak": forward_peak,
        "backward_peak": backward_peak,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--logits", choices=["fp32", "bf16"], default="fp32", help="the student's logits' dtype")
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.logits]
    torch.set_num_threads(1)
    out = {
        "torch": torch.__version__,
        "shape": [a.batch, a.seq, a.vocab],
        "logits": a.logits,
        "unit": a.batch * a.seq * a.vocab * 4,
        "cases": [measure(a.batch, a.seq, a.vocab, dtype, n, b) for n, b in CASES],
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
