"""The sentence-encoder distillation loop a PyTorch user would write by hand, for the transformer
students `distill` builds from a cfg.toml (`examples/minilm/student.toml`): the reference side of
`scripts/bench-throughput`'s `minilm` case, as `kd_eager.py` is for the image students.

It trains the same thing as `distill --teacher T --student CFG`:
- sentences: the non-blank lines of the train file, tokenised with `data.tokenizer` (Hugging Face
  `tokenizers`, padding off, truncation to `data.input_shape[0]` tokens with the special tokens
  kept: `distill/src/inputs/data/tokenizer.rs`), each batch right-padded to its longest sentence with a
  0/1 attention mask (`distill/src/inputs/data/text.rs`);
- the post-norm BERT student of `[student.transformer]` with distill's parameter names and
  forward (`distill/src/student/`: the embedding sum with position ids 0..S and token type 0,
  LayerNorm; per layer `norm(h + proj(attn(qkv(h))))` with the math attention kernel and the
  additive bias `(1 - mask) * finfo(float32).min`, then `norm(h + fc2(gelu(fc1(h))))`; mean
  pooling over the mask, L2 normalisation);
- initial weights: `--write-init` copies the teacher's embeddings and the layers of
  `student.init_from_teacher` into distill's names (`distill/src/student/teacher_init.rs`:
  query, key and value stacked into `qkv`); both sides then start from that file;
- the teacher's embeddings of the train set computed once before training, in batches of
  `train.eval_batch_size` sentences sorted by length (`teacher.cache_logits = true`);
- the loss `alpha * mean((s - t)^2)` over [B, E] in fp32 (`kd.objective = "embedding_mse"`);
- AdamW, decay on `.weight`s of two or more dimensions (the embedding tables too), the learning
  rate of each step from linear warm-up then cosine to `min_lr` (`kd_eager.py`'s `lr_at`);
- batches of each epoch from `--order FILE`: distill's own length-bucketed orders (the
  `epoch_order` example given `--write-lengths`' token counts), so both sides see the same
  batches;
- fp32, or bf16 autocast on the student's forward, the loss in fp32;
- after every epoch the mean cosine of the student's and the teacher's test embeddings (distill's
  agreement), then the student saved as safetensors and TorchScript.

Usage:
  kd_eager_text.py --student CFG --teacher T --write-init OUT.safetensors
  kd_eager_text.py --student CFG --write-lengths OUT.i64 [--train FILE]
  kd_eager_text.py --student CFG --teacher T --init INIT --order FILE [--train FILE] [--epochs N]
                   [--batch-size B] [--precision fp32|bf16] [--threads N] [--compile] [--out DIR]

Prints one JSON line in the format of `distill_tools.eager_result`, as `kd_eager.py` does
(`test_accuracy` is the mean cosine; device cpu, no allocator peaks).
"""
import argparse
import json
import math
import os
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

START = time.perf_counter()
from distill_tools.eager_result import eager_result_line
from distill_tools.throughput.kd_eager import LossLog, lr_at, read_safetensors, write_safetensors


def read_sentences(path):
    """distill's reading: a UTF-8 BOM dropped, lines split on \\n (a trailing \\r removed), blank lines skipped."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    text = text.removeprefix("\ufeff").removesuffix("\n")
    return [line.removesuffix("\r") for line in text.split("\n") if line.strip()]


def tokenizer_of(path, max_tokens):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.enable_truncation(max_tokens)
    return tok


def encode_all(tok, sentences):
    return [e.ids for e in tok.encode_batch(sentences)]


def padded(ids, rows, pad_id):
    """ids and mask int64 [B, S] of `rows`, right-padded to the longest."""
    s = max(len(ids[r]) for r in rows)
    x = torch.full((len(rows), s), pad_id, dtype=torch.int64)
    m = torch.zeros((len(rows), s), dtype=torch.int64)
    for i, r in enumerate(rows):
        x[i, : len(ids[r])] = torch.tensor(ids[r])
        m[i, : len(ids[r])] = 1
    return x, m


class Block(nn.Module):
    """One post-norm layer: distill's `blk{i}_attn` and `blk{i}_mlp` in one module."""

    def __init__(self, d, heads, width, eps):
        super().__init__()
        self.heads, self.d = heads, d
        self.attn_norm, self.qkv, self.proj = nn.LayerNorm(d, eps=eps), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp_norm, self.fc1, self.fc2 = nn.LayerNorm(d, eps=eps), nn.Linear(d, width), nn.Linear(width, d)

    def forward(self, h, bias):
        dh = self.d // self.heads
        q, k, v = (t.unflatten(-1, (self.heads, dh)).transpose(1, 2) for t in self.qkv(h).split(self.d, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh) + bias
        o = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
        h = self.attn_norm(h + self.proj(o))
        return self.mlp_norm(h + self.fc2(F.gelu(self.fc1(h))))


class Encoder(nn.Module):
    """The student: embeddings, post-norm layers, mean pooling over the mask, L2 normalisation."""

    def __init__(self, t, classes):
        super().__init__()
        d, eps = t["d_model"], float(t.get("norm_eps", 1e-5))
        if t.get("norm_position") != "post" or classes != d or t.get("pooling", "mean") != "mean":
            raise SystemExit("kd_eager_text.py builds post-norm, mean-pooled students without a head")
        self.tokens = nn.Embedding(t["vocab"], d)
        self.positions = nn.Embedding(t["max_positions"], d)
        self.token_types = nn.Embedding(t.get("token_types", 2), d)
        self.embed_norm = nn.LayerNorm(d, eps=eps)
        self.blocks = nn.ModuleList(Block(d, t["heads"], t["mlp_width"], eps) for _ in range(t["layers"]))

    def forward(self, ids, mask):
        h = self.tokens(ids) + self.positions(torch.arange(ids.shape[1])) + self.token_types.weight[0]
        h = self.embed_norm(h)
        bias = ((1.0 - mask.float()) * torch.finfo(torch.float32).min)[:, None, None, :]
        for block in self.blocks:
            h = block(h, bias)
        m = mask.to(h.dtype).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return F.normalize(pooled.float(), dim=-1, eps=1e-12)


def distill_names(model):
    """{distill's name: tensor} of the student's state."""
    out = {
        "embed.tokens.weight": model.tokens.weight,
        "embed.positions.weight": model.positions.weight,
        "embed.token_types.weight": model.token_types.weight,
        "embed_norm.weight": model.embed_norm.weight,
        "embed_norm.bias": model.embed_norm.bias,
    }
    for i, b in enumerate(model.blocks, 1):
        for ours, theirs in [("attn_norm", "attn.norm"), ("qkv", "attn.qkv"), ("proj", "attn.proj"),
                             ("mlp_norm", "mlp.norm"), ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")]:
            for leaf in ("weight", "bias"):
                prefix, part = theirs.split(".")
                out[f"blk{i}_{prefix}.{part}.{leaf}"] = getattr(getattr(b, ours), leaf)
    return out


def teacher_init(teacher_state, layers):
    """distill's `init_from_teacher` for a same-width student: {distill name: tensor}."""
    e = lambda leaf: teacher_state[f"embeddings.{leaf}"]  # noqa: E731
    out = {
        "embed.tokens.weight": e("word_embeddings.weight"),
        "embed.positions.weight": e("position_embeddings.weight"),
        "embed.token_types.weight": e("token_type_embeddings.weight"),
        "embed_norm.weight": e("LayerNorm.weight"),
        "embed_norm.bias": e("LayerNorm.bias"),
    }
    for i, j in enumerate(layers, 1):
        src = lambda part, leaf: teacher_state[f"encoder.layer.{j}.{part}.{leaf}"]  # noqa: E731
        for leaf in ("weight", "bias"):
            qkv = [src(f"attention.self.{p}", leaf) for p in ("query", "key", "value")]
            out[f"blk{i}_attn.qkv.{leaf}"] = torch.cat(qkv, 0)
            out[f"blk{i}_attn.proj.{leaf}"] = src("attention.output.dense", leaf)
            out[f"blk{i}_attn.norm.{leaf}"] = src("attention.output.LayerNorm", leaf)
            out[f"blk{i}_mlp.fc1.{leaf}"] = src("intermediate.dense", leaf)
            out[f"blk{i}_mlp.fc2.{leaf}"] = src("output.dense", leaf)
            out[f"blk{i}_mlp.norm.{leaf}"] = src("output.LayerNorm", leaf)
    return out


@torch.no_grad()
def embed(model, ids, pad_id, batch):
    """Embeddings [n, E] in row order, in batches of `batch` rows sorted by length (distill's eval_batches)."""
    order = sorted(range(len(ids)), key=lambda r: len(ids[r]))
    out = None
    for i in range(0, len(order), batch):
        rows = order[i : i + batch]
        e = model(*padded(ids, rows, pad_id)).float()
        out = torch.zeros(len(ids), e.shape[1]) if out is None else out
        out[rows] = e
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", required=True, help="cfg.toml")
    p.add_argument("--teacher", help="TorchScript teacher")
    p.add_argument("--write-init", metavar="OUT", help="write the teacher-initialised weights and exit")
    p.add_argument("--write-lengths", metavar="OUT", help="write each train sentence's token count (int64) and exit")
    p.add_argument("--train", help="train file instead of data.train")
    p.add_argument("--init", help="safetensors of initial weights (as distill's student.init)")
    p.add_argument("--order", help="epoch orders from distill's epoch_order example (int64 [epochs, n])")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--precision", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--compile", action="store_true", help="torch.compile the student")
    p.add_argument("--out", help="folder for student.safetensors and student.pt")
    args = p.parse_args()

    with open(args.student, "rb") as f:
        cfg = tomllib.load(f)
    base = os.path.dirname(os.path.abspath(args.student))
    data, student, kd, train = cfg["data"], cfg["student"], cfg.get("kd", {}), cfg.get("train", {})
    t = student["transformer"]
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(int(train.get("seed", 0)))
    max_tokens = int(data["input_shape"][0])
    tok = tokenizer_of(os.path.join(base, data["tokenizer"]), max_tokens)
    pad_id = tok.token_to_id("[PAD]") or 0
    train_path = args.train or os.path.join(base, data["train"])
    if args.write_lengths:
        lengths = np.array([len(i) for i in encode_all(tok, read_sentences(train_path))], dtype="<i8")
        lengths.tofile(args.write_lengths)
        print(json.dumps({"wrote": args.write_lengths, "sentences": len(lengths)}))
        return
    if not args.teacher:
        raise SystemExit("--teacher is required")
    teacher = torch.jit.load(args.teacher, map_location="cpu").eval()
    if args.write_init:
        layers = student.get("init_from_teacher") or list(range(t["layers"]))
        state = {k: v.detach().float() for k, v in teacher.state_dict().items()}
        write_safetensors(teacher_init(state, layers), args.write_init)
        print(json.dumps({"wrote": args.write_init, "teacher_layers": layers}))
        return

    model = Encoder(t, int(data["classes"]))
    if args.init:
        state = read_safetensors(args.init)
        with torch.no_grad():
            for name, param in distill_names(model).items():
                if name not in state:
                    raise SystemExit(f"{args.init} lacks {name}")
                param.copy_(state[name])
    epochs = args.epochs or int(train.get("epochs", 10))
    batch = args.batch_size or int(train.get("batch_size", 128))
    precision = args.precision or train.get("precision", "fp32")
    eval_batch = int(train.get("eval_batch_size", 256))
    alpha, log_every = float(kd.get("alpha", 0.5)), int(train.get("log_every", 50))

    ids_train = encode_all(tok, read_sentences(train_path))
    ids_test = encode_all(tok, read_sentences(os.path.join(base, data["test"])))
    cache_start = time.perf_counter()
    teacher_test = embed(teacher, ids_test, pad_id, eval_batch)
    targets = embed(teacher, ids_train, pad_id, eval_batch)
    cache_seconds = time.perf_counter() - cache_start

    n = len(ids_train)
    size = min(batch, n)
    steps_per_epoch = math.ceil(n / size)
    total = steps_per_epoch * epochs
    if not args.order:
        raise SystemExit("--order is required (distill's length-bucketed batches)")
    orders = torch.from_numpy(np.fromfile(args.order, "<i8").reshape(-1, n))
    if len(orders) < epochs:
        raise SystemExit(f"{args.order} holds {len(orders)} epoch orders, {epochs} needed")

    named = list(distill_names(model).items())
    decay = [p for name, p in named if name.endswith(".weight") and p.dim() >= 2]
    other = [p for name, p in named if not (name.endswith(".weight") and p.dim() >= 2)]
    wd = float(train.get("weight_decay", 0.01))
    groups = [{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}]
    lr, min_lr = float(train.get("lr", 1e-3)), float(train.get("min_lr", 0.0))
    betas = tuple(train.get("betas", [0.9, 0.999]))
    opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=float(train.get("eps", 1e-8)))
    forward = torch.compile(model) if args.compile else model
    autocast = precision == "bf16"

    step, train_seconds, samples = 0, 0.0, 0
    log, agreement = LossLog(min(log_every, total)), float("nan")
    train_start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = orders[epoch].tolist()
        loss_sum = seen = 0.0
        epoch_start_seconds = train_seconds
        for i in range(steps_per_epoch):
            t0 = time.perf_counter()
            rows = order[i * size : (i + 1) * size]
            x, m = padded(ids_train, rows, pad_id)
            target = targets[rows]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, lr, min_lr, int(train.get("warmup_steps", 0)), total)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = forward(x, m)
            loss = alpha * F.mse_loss(out.float(), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            value = loss.item()
            train_seconds += time.perf_counter() - t0
            log.record(value, step + 1)
            samples += len(rows)
            seen += len(rows)
            loss_sum += value * len(rows)
            step += 1
        model.eval()
        agreement = (embed(model, ids_test, pad_id, eval_batch) * teacher_test).sum(1).mean().item()
        print(
            f"epoch {epoch + 1}/{epochs}: loss {loss_sum / max(seen, 1):.6f} cosine {agreement:.4f}"
            f" {seen / max(train_seconds - epoch_start_seconds, 1e-9):.0f} samples/s",
            file=sys.stderr,
            flush=True,
        )
    loop_seconds = time.perf_counter() - train_start

    if args.out:
        os.makedirs(args.out, exist_ok=True)
        write_safetensors({k: v.detach() for k, v in distill_names(model).items()},
                          os.path.join(args.out, "student.safetensors"))
        torch.jit.trace(model.eval(), padded(ids_test, [0, 1], pad_id)).save(os.path.join(args.out, "student.pt"))

    print(eager_result_line(
        side="eager" + ("+compile" if args.compile else ""),
        precision=precision,
        device="cpu",
        peak_allocated_bytes=None,
        peak_reserved_bytes=None,
        threads=torch.get_num_threads(),
        epochs=epochs,
        batch_size=size,
        steps=step,
        samples=samples,
        samples_per_s=samples / max(train_seconds, 1e-9),
        train_seconds=train_seconds,
        loop_seconds=loop_seconds,
        first_loss=log.first,
        first_window_loss=log.first_window,
        log_every=log_every,
        test_accuracy=agreement,
        agreement=agreement,
        teacher_accuracy=float("nan"),
        teacher_cache_seconds=cache_seconds,
        order="distill",
        wall_seconds=time.perf_counter() - START,
    ), flush=True)


if __name__ == "__main__":
    main()
