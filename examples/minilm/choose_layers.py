"""Which teacher layers should a 3-layer student start from? Measures it in PyTorch.

For each candidate list of teacher layers (default: every 3 of all-MiniLM-L6-v2's 6), builds the
student that `init_from_teacher = [...]` builds in distill (the teacher's embeddings and the
chosen layers, in order) and scores it against the teacher on data/minilm/test.txt, before any
training: Spearman's rho of the pair cosines over 10,000 random test pairs (seed 0) and the mean
cosine of student and teacher embeddings, as bench/text/bench.py measures them. With
`--train N`, each candidate listed with `--layers` is then trained for one epoch on the first N
lines of data/minilm/train.txt with distill's recipe for student.toml replayed in PyTorch (MSE
on the L2-normalised embeddings, AdamW lr 5e-4, weight decay 0.01, 100 warm-up steps then a
cosine decay to 0, batch 64 of similar-length sentences) and scored again. With `--ffn F`, each
student's feed-forward keeps only its F strongest neurons per layer, as distill's
`init_from_teacher` does for a narrower `mlp_width` (largest |w_in| * |w_out|), or layer i its
Fi with `--ffn F0,F1,F2`; with `--refit N` as well, each cut layer's output projection is refitted by least squares on N
training sentences (`refit_feed_forward`), its neurons chosen `--by` weights or activations.
`--freeze-embeddings` trains with the word embeddings kept as copied; `--heads H` keeps each
layer's H strongest attention heads; `--kv-heads K` makes attention grouped-query with K key-value
heads (mean-pooled); `--pooled-mlp W` adds a residual feed-forward of W neurons on the pooled
vector. AdamW is the fused one, as distill's.

    .venv/bin/python examples/minilm/choose_layers.py                      # ~4 min on 2 cores
    .venv/bin/python examples/minilm/choose_layers.py --layers 0,2,4 --layers 0,4,5 --train 30000
    .venv/bin/python examples/minilm/choose_layers.py --layers 0,4,5 --ffn 896 --train 30000
    .venv/bin/python examples/minilm/choose_layers.py --layers 0,4,5 --ffn 896 --refit 2000 --by activations --train 30000

Measured 2026-12-01 on 2 shared cores: untrained, [0, 4, 5] 0.688 (cosine 0.780), [0, 3, 5]
0.660, [0, 2, 5] 0.618, [1, 3, 5] 0.530, [0, 2, 4] 0.470; after one epoch of 30,000 sentences
[0, 4, 5] 0.897 (cosine 0.943), [0, 3, 5] 0.888 (0.933), [0, 2, 4] 0.839 (0.840). [0, 4, 5]
with its feed-forward cut to 1024 neurons: 0.869 (0.921) after the epoch; to 768: 0.851 (0.907).
Measured 2026-12-03 on 2 idle cores: cut to 896, untrained 0.573 (0.632), refitted by weights
0.657 (0.734), by activations 0.668 (0.751), and 0.867 (0.922) after the epoch (0.860 (0.914)
without the refit); the embeddings frozen, 0.892 (0.941) against 0.897 (0.943). The same 2,688
neurons shared unevenly (`--ffn 512,896,1280` and `--ffn 384,896,1408`, the first layer losing
least to the cut): 0.857 (0.916) and 0.854 (0.915) after the epoch. With `--heads H` each
layer keeps its H attention heads with the largest |W_v| * |W_o|: after the epoch, 6 heads and
1,344 neurons 0.841 (0.894), 4 heads 0.826 (0.882), 6 heads 0.851 (0.903); five layers
[0, 1, 2, 4, 5] with 256 neurons 0.844 (0.887), all six with 128 0.837 (0.876). With 4
key-value heads and 1,152 neurons 0.820 (0.878); 896 neurons with a pooled feed-forward of 1,536
0.861 (0.916).
"""
import argparse
import copy
import itertools
import math
import os
import random
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
from distill_tools.minilm.make_teacher import encode, load_model, model_dir, tokenizer_of
from distill_tools.text_bench import metrics

DATA = os.path.join(HERE, "..", "..", "data", "minilm")
BATCH, MAX_TOKENS = 64, 128


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line.strip()]


def student_of(teacher, layers: list):
    """A copy of `teacher` keeping only `layers` of its encoder, in that order."""
    student = copy.deepcopy(teacher)
    student.encoder.layer = torch.nn.ModuleList(copy.deepcopy(teacher.encoder.layer[j]) for j in layers)
    return student


@torch.no_grad()
def keep_strongest_neurons(student, widths: list):
    """Layer i's feed-forward cut to its `widths[i]` neurons with the largest |w_in| * |w_out|
    (L2 norms of the neuron's `intermediate.dense` row and `output.dense` column), kept in the
    teacher's order: distill's `init_from_teacher` for `mlp_width` below the teacher's."""
    for layer, width in zip(student.encoder.layer, widths):
        fc1, fc2 = layer.intermediate.dense, layer.output.dense
        keep = (fc1.weight.norm(dim=1) * fc2.weight.norm(dim=0)).topk(width).indices.sort().values
        narrow1, narrow2 = torch.nn.Linear(fc1.in_features, width), torch.nn.Linear(width, fc2.out_features)
        narrow1.weight.copy_(fc1.weight[keep])
        narrow1.bias.copy_(fc1.bias[keep])
        narrow2.weight.copy_(fc2.weight[:, keep])
        narrow2.bias.copy_(fc2.bias)
        layer.intermediate.dense, layer.output.dense = narrow1, narrow2
    return student


class PrunedSelfAttention(torch.nn.Module):
    """bert.py's self-attention keeping `len(keep)` of its heads (their query, key and value
    rows, each head `head_dim` wide): the inner width shrinks from d to heads x head_dim."""

    def __init__(self, full, keep: list, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = len(keep), head_dim
        rows = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in keep])
        for name in ("query", "key", "value"):
            old = getattr(full, name)
            new = torch.nn.Linear(old.in_features, len(rows))
            new.weight.data.copy_(old.weight.data[rows])
            new.bias.data.copy_(old.bias.data[rows])
            setattr(self, name, new)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        split = lambda x: x.view(b, s, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
        o = torch.softmax(scores, dim=-1) @ v
        return o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)


@torch.no_grad()
def keep_strongest_heads(student, heads: int):
    """Each layer's attention cut to its `heads` heads with the largest |W_v| * |W_o| (Frobenius
    norms of the head's value rows and output-projection columns: the size of what the head can
    add to the residual stream), kept in the teacher's order; the output projection keeps the
    matching columns. Head pruning as in Michel et al. 2019 (arXiv:1905.10650), ranked by
    weights instead of gradients."""
    for layer in student.encoder.layer:
        full, out = getattr(layer.attention, "self"), layer.attention.output.dense
        head_dim = full.query.out_features // full.heads
        strength = [
            full.value.weight[h * head_dim : (h + 1) * head_dim].norm() * out.weight[:, h * head_dim : (h + 1) * head_dim].norm()
            for h in range(full.heads)
        ]
        keep = sorted(torch.tensor(strength).topk(heads).indices.tolist())
        cols = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in keep])
        setattr(layer.attention, "self", PrunedSelfAttention(full, keep, head_dim))
        narrow = torch.nn.Linear(len(cols), out.out_features)
        narrow.weight.copy_(out.weight[:, cols])
        narrow.bias.copy_(out.bias)
        layer.attention.output.dense = narrow
    return student


class GroupedSelfAttention(torch.nn.Module):
    """bert.py's self-attention with grouped-query attention: every query head kept, the keys
    and values shared by groups of `heads / kv_heads` consecutive heads, each group's key and
    value projections the mean of its heads' (Ainslie et al. 2023, arXiv:2305.13245, mean-pooled
    "uptraining" initialisation). The key and value width shrinks from d to kv_heads x head_dim."""

    def __init__(self, full, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = full.heads, kv_heads, head_dim
        self.query = copy.deepcopy(full.query)
        group = full.heads // kv_heads
        for name in ("key", "value"):
            old = getattr(full, name)
            new = torch.nn.Linear(old.in_features, kv_heads * head_dim)
            new.weight.data.copy_(old.weight.data.view(kv_heads, group, head_dim, -1).mean(1).reshape(kv_heads * head_dim, -1))
            new.bias.data.copy_(old.bias.data.view(kv_heads, group, head_dim).mean(1).reshape(-1))
            setattr(self, name, new)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        group = self.heads // self.kv_heads
        q = self.query(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = (x.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2).repeat_interleave(group, 1) for x in (self.key(h), self.value(h)))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
        o = torch.softmax(scores, dim=-1) @ v
        return o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)


@torch.no_grad()
def group_key_values(student, kv_heads: int):
    """Each layer's attention turned grouped-query with `kv_heads` key-value heads
    (`GroupedSelfAttention`)."""
    for layer in student.encoder.layer:
        full = getattr(layer.attention, "self")
        setattr(layer.attention, "self", GroupedSelfAttention(full, kv_heads, full.query.out_features // full.heads))
    return student


class PooledMlp(torch.nn.Module):
    """A student with a residual feed-forward on its mean-pooled vector p [B, d] before the L2
    normalisation: `p + W2 gelu(W1 norm(p) + b1) + b2`, `W2` zero at the start so the student
    starts as it was. It runs once per sentence, not per token, so its cost is about 1/S of a
    per-token feed-forward's of the same width."""

    def __init__(self, student, width: int):
        super().__init__()
        self.student = student
        d = student.embeddings.word_embeddings.weight.shape[1]
        self.norm, self.up, self.down = torch.nn.LayerNorm(d), torch.nn.Linear(d, width), torch.nn.Linear(width, d)
        torch.nn.init.zeros_(self.down.weight)
        torch.nn.init.zeros_(self.down.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = self.student
        h = s.embeddings(input_ids)
        m = attention_mask.to(h.dtype)
        h = s.encoder(h, (1.0 - m)[:, None, None, :] * -3.4028234663852886e38)
        p = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
        p = p + self.down(torch.nn.functional.gelu(self.up(self.norm(p))))
        return p / p.norm(2, -1, keepdim=True).clamp_min(1e-12)


@torch.no_grad()
def refit_feed_forward(student, tok, sentences: list, width: int, by: str, damping: float = 0.01):
    """Each layer's feed-forward cut to `width` neurons, then its output projection refitted by
    least squares so the cut layer reproduces the whole one's output on `sentences`' tokens.

    Layer by layer, in order: the inputs of layer i's feed-forward come from the student whose
    layers before i are already cut, so each refit also absorbs the earlier cuts' error. Keeps
    the neurons with the largest |w_in| * |w_out| (`by="weights"`) or RMS activation * |w_out|
    (`by="activations"`); solves `[A_S, 1] W = A w_out^T` (A [N, 1536] the GELU outputs, S the
    kept columns), damped by `damping` x the mean diagonal of the normal matrix.
    """
    captured = []
    for i, layer in enumerate(student.encoder.layer):
        fc1, fc2 = layer.intermediate.dense, layer.output.dense
        hook = layer.intermediate.register_forward_hook(lambda m, x, y: captured.append(y.detach()))
        masks = []
        for j in range(0, len(sentences), 128):
            ids, mask = encode(tok, sentences[j : j + 128])
            student(ids, mask)
            masks.append(mask.bool())
        hook.remove()
        a = torch.cat([y[m] for y, m in zip(captured, masks)]).double()  # [N, 1536]
        captured.clear()
        w2 = fc2.weight.double()  # [d, 1536]
        target = a @ w2.T  # [N, d], the whole feed-forward's output before its bias
        if by == "weights":
            strength = fc1.weight.norm(dim=1) * fc2.weight.norm(dim=0)
        else:
            strength = a.square().mean(0).sqrt() * w2.norm(dim=0)
        keep = strength.topk(width).indices.sort().values
        x = torch.cat([a[:, keep], torch.ones(len(a), 1, dtype=a.dtype)], 1)
        normal = x.T @ x
        normal += torch.eye(len(normal), dtype=a.dtype) * damping * normal.diagonal().mean()
        solved = torch.linalg.solve(normal, x.T @ target)  # [width + 1, d]
        narrow1, narrow2 = torch.nn.Linear(fc1.in_features, width), torch.nn.Linear(width, fc2.out_features)
        narrow1.weight.copy_(fc1.weight[keep])
        narrow1.bias.copy_(fc1.bias[keep])
        narrow2.weight.copy_(solved[:width].T.float())
        narrow2.bias.copy_(fc2.bias + solved[width].float())
        layer.intermediate.dense, layer.output.dense = narrow1, narrow2
        variance = (target - target.mean(0)).square().sum()
        missed = ((x @ solved - target).square().sum() / variance).item()
        cut = ((a[:, keep] @ w2[:, keep].T - target).square().sum() / variance).item()
        print(f"  layer {i}: {len(a):,} tokens; of the output's variance the cut misses {cut:.4f}, the refit {missed:.4f}", flush=True)
    return student


@torch.no_grad()
def embed(model, tok, sentences: list) -> torch.Tensor:
    """Embeddings [n, 384] in row order, computed in batches of similar length."""
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out = torch.zeros(len(sentences), 384)
    for i in range(0, len(order), 128):
        rows = order[i : i + 128]
        out[rows] = model(*encode(tok, [sentences[r] for r in rows]))
    return out


def score(teacher_emb: torch.Tensor, student_emb: torch.Tensor, pairs) -> tuple:
    """(Spearman of the pair cosines, mean cosine of the same sentence's embeddings)."""
    t, s = teacher_emb.numpy(), student_emb.numpy()
    rho = metrics.spearman(metrics.pair_cosines(t, pairs), metrics.pair_cosines(s, pairs))
    return rho, float((teacher_emb * student_emb).sum(1).mean())


def train_one_epoch(student, tok, sentences: list, targets: torch.Tensor, seed: int = 0, freeze: bool = False):
    """distill's student.toml recipe (module docstring) for one epoch, in place; `freeze` keeps
    the word embeddings as copied from the teacher."""
    torch.manual_seed(seed)
    getattr(student, "student", student).embeddings.word_embeddings.weight.requires_grad_(not freeze)
    rng = random.Random(seed)
    order = list(range(len(sentences)))
    rng.shuffle(order)
    batches = []
    for i in range(0, len(order), BATCH * 50):  # pools of 50 batches, sorted by length
        pool = sorted(order[i : i + BATCH * 50], key=lambda r: len(sentences[r]))
        batches += [pool[j : j + BATCH] for j in range(0, len(pool), BATCH)]
    rng.shuffle(batches)
    trainable = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=5e-4, weight_decay=0.01, fused=True)
    steps = len(batches)
    lr_at = lambda k: min(1.0, (k + 1) / 100) * 0.5 * (1 + math.cos(math.pi * k / steps))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    student.train()
    for rows in batches:
        e = student(*encode(tok, [sentences[r] for r in rows]))
        loss = ((e - targets[rows]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", action="append", help="teacher layers, e.g. 0,4,5 (repeatable)")
    p.add_argument("--train", type=int, default=0, help="train each --layers list on N sentences")
    p.add_argument("--ffn", default="", help="keep each layer's F strongest feed-forward neurons (F, or F0,F1,... per layer)")
    p.add_argument("--refit", type=int, default=0, help="with --ffn: refit each cut layer's output on N sentences")
    p.add_argument("--by", choices=["weights", "activations"], default="weights", help="with --refit: which neurons to keep")
    p.add_argument("--freeze-embeddings", action="store_true", help="train with the word embeddings frozen")
    p.add_argument("--heads", type=int, default=0, help="keep each layer's H strongest attention heads")
    p.add_argument("--kv-heads", type=int, default=0, help="grouped-query attention: K key-value heads, mean-pooled")
    p.add_argument("--pooled-mlp", type=int, default=0, help="a residual feed-forward of W neurons on the pooled vector")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    d = model_dir()
    teacher, tok = load_model(d).eval(), tokenizer_of(d)
    tok.enable_truncation(MAX_TOKENS)
    candidates = [[int(x) for x in s.split(",")] for s in a.layers] if a.layers else None
    if a.train and not candidates:
        p.error("--train needs the candidates to train, given with --layers")
    test = read_lines(os.path.join(DATA, "test.txt"))
    pairs = metrics.random_pairs(len(test), 10_000, 0)
    teacher_test = embed(teacher, tok, test)

    fit_lines = read_lines(os.path.join(DATA, "train.txt"))[-a.refit :] if a.refit else []

    def build(layers):
        student = student_of(teacher, layers)
        widths = [int(w) for w in a.ffn.split(",")] if a.ffn else []
        widths = widths * len(layers) if len(widths) == 1 else widths
        if a.ffn and a.refit:
            if len(set(widths)) > 1:
                p.error("--refit needs one --ffn width for every layer")
            return refit_feed_forward(student, tok, fit_lines, widths[0], a.by)
        student = keep_strongest_neurons(student, widths) if a.ffn else student
        student = keep_strongest_heads(student, a.heads) if a.heads else student
        student = group_key_values(student, a.kv_heads) if a.kv_heads else student
        return PooledMlp(student, a.pooled_mlp) if a.pooled_mlp else student

    untrained = []
    for layers in candidates or [list(c) for c in itertools.combinations(range(6), 3)]:
        untrained.append((score(teacher_test, embed(build(layers), tok, test), pairs), layers))
    print("untrained: Spearman, mean cosine, teacher layers (best first)")
    for (rho, cos), layers in sorted(untrained, reverse=True):
        print(f"  {rho:.3f}  {cos:.3f}  {layers}", flush=True)
    if a.train:
        train = read_lines(os.path.join(DATA, "train.txt"))[: a.train]
        targets = embed(teacher, tok, train)
        print(f"after one epoch of {len(train):,} sentences: Spearman, mean cosine, teacher layers")
        for layers in candidates:
            student = build(layers)
            start = time.time()
            train_one_epoch(student, tok, train, targets, freeze=a.freeze_embeddings)
            print(f"  trained in {time.time() - start:.0f} s", flush=True)
            rho, cos = score(teacher_test, embed(student, tok, test), pairs)
            print(f"  {rho:.3f}  {cos:.3f}  {layers}", flush=True)


if __name__ == "__main__":
    main()
