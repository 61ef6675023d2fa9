"""Held-out measures of a causal LM against its teacher, shared by the causal-LM benchmarks
(`bench/lm/bench.py`, `bench/lm/divergences.py`): the test windows as distill packs them, greedy
continuations of held-out prompts, and the divergences between the teacher's and a student's
next-token distributions.

Every model here is a TorchScript decoder called as `model(input_ids, attention_mask)` with int64
`[B, S]` and returning float logits `[B, S, vocab]` (examples/smollm2/make_teacher.py's teacher and
distill's exported `student.pt`).
"""
from typing import Dict, List

import torch

# held-out prompts: Jonah 2:1, Ruth 1:16 and Genesis 1:1 are in no training line
PROMPTS = [
    "Then Jonah prayed unto the LORD his God out of the fish's belly,",
    "And Ruth said, Intreat me not to leave thee,",
    "In the beginning God created",
]
NEW_TOKENS = 24


def windows(tok, path: str, s: int) -> torch.Tensor:
    """The packed windows of `path` as distill makes them: lines closed by <|endoftext|>, back to
    back, cut into whole windows of `s` tokens, int64 [N, s] (the tail shorter than s dropped)."""
    eos = tok.token_to_id("<|endoftext|>")
    stream: List[int] = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for line in text.split("\n"):
        if line.strip():
            stream += tok.encode(line).ids + [eos]
    n = len(stream) // s
    return torch.tensor(stream[: n * s]).reshape(n, s)


def greedy(model, tok, prompt: str, n: int = NEW_TOKENS) -> str:
    """The `n` tokens `model` appends to `prompt` taking the most likely token each time, decoded."""
    ids = torch.tensor([tok.encode(prompt).ids])
    with torch.inference_mode():
        for _ in range(n):
            logits = model(ids, torch.ones_like(ids))
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return tok.decode(ids[0, -n:].tolist())


def divergence_sums(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> Dict[str, float]:
    """Sums over positions of the divergences between the teacher's next-token distribution p and
    the student's q (softmax of the logits at T = 1, in float64), for logits [..., vocab] of the
    same shape: `forward_kl` sum_v p (log p - log q), `reverse_kl` sum_v q (log q - log p), `tvd`
    0.5 sum_v |p - q|, and `positions`, the number of positions summed (divide for the means)."""
    lp = torch.log_softmax(teacher_logits.double(), -1)
    lq = torch.log_softmax(student_logits.double(), -1)
    p, q = lp.exp(), lq.exp()
    return {
        "forward_kl": (p * (lp - lq)).sum().item(),
        "reverse_kl": (q * (lq - lp)).sum().item(),
        "tvd": 0.5 * (p - q).abs().sum().item(),
        "positions": lp[..., 0].numel(),
    }


def mean_divergences(teacher, students: Dict[str, object], data: torch.Tensor, batch: int) -> Dict[str, Dict[str, float]]:
    """Each student's mean forward KL, reverse KL and total variation to the teacher (nats; TVD in
    [0, 1]) over the predicting positions of the windows `data` [N, S] (all but each window's last,
    as distill's test perplexity counts them), the teacher run once per batch of `batch` windows."""
    totals = {name: {"forward_kl": 0.0, "reverse_kl": 0.0, "tvd": 0.0, "positions": 0} for name in students}
    with torch.inference_mode():
        for i in range(0, data.shape[0], batch):
            b = data[i : i + batch]
            mask = torch.ones_like(b)
            t = teacher(b, mask)[:, :-1].float()
            for name, model in students.items():
                s = model(b, mask)[:, :-1].float()
                for key, value in divergence_sums(t, s).items():
                    totals[name][key] += value
    return {name: {k: v / tot["positions"] for k, v in tot.items() if k != "positions"} for name, tot in totals.items()}
