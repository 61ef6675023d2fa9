"""Measure what PyTorch allocates for a distillation step of each fidelity configuration.

For every cfg.toml under fidelity/configs/ this builds the student exactly as
`estimator_wasm::schema::arch::layers` expands it (same layer ids, parameter names and shapes), runs one
training step on CPU the way `distill` does (forward, fp32 KD + CE loss, backward, optimiser
step), and records PyTorch's own accounting. Sentence encoders (`data.tokenizer`, `head =
"embedding"`) follow the forward `distill` builds for them: an attention mask with padding
(an additive fp32 bias on the scores), post- or pre-norm blocks, masked mean or CLS pooling,
the projection `head`, L2 normalize, and the embedding MSE or cosine loss (no CE on text).
The records:

* parameters, buffers, gradients and optimiser states: `nbytes` of the tensors PyTorch holds
  (the optimiser's 0-dim `step` tensors are reported apart: distill keeps the step on the host);
* saved activations: `torch.autograd.graph.saved_tensors_hooks` around forward and loss, each
  storage counted once by `untyped_storage().data_ptr()`, parameter and buffer storages excluded
  (docs/memory-model.md section 11 A), attributed to the layer running when it was first saved.

Checkpointing uses `torch.utils.checkpoint` (non-reentrant) over the segments of
`arch::checkpoint_segments`; the outer hook then sees each segment's input, which is what the
trainer keeps. Precisions: fp32; autocast bf16/fp16 on CPU (`torch.autocast("cpu", ...)`);
pure_bf16 (the model cast to bf16, AdamW states in bf16).

Usage: python measure.py [--configs DIR] [--out FILE]   (FILE "-" or absent: stdout)
"""
import argparse
import glob
import json
import math
import os
import sys
import tomllib

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))


# --- the layer list of estimator_wasm::schema::arch::layers -------------------------------

ACT = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "leaky_relu": F.leaky_relu,
}


class Fn(nn.Module):
    """A parameter-free layer."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# The batch's attention mask (text inputs): int64 [B, S], 1 = token, 0 = padding; set per step.
TEXT = {"mask": None}


class Embedding(nn.Module):
    """tokens[ids] + positions[arange(S)] + token_types[0] (each when configured)."""

    def __init__(self, vocab, dim, positions, token_types):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(positions, dim) if positions else None
        self.token_types = nn.Embedding(token_types, dim) if token_types else None

    def forward(self, ids):
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1]))
        if self.token_types is not None:
            x = x + self.token_types.weight[0]
        return x


def mean_pool(x):
    """Mean over the tokens whose mask is 1 (text), else over all tokens."""
    if TEXT["mask"] is None:
        return x.mean(1)
    m = TEXT["mask"].to(x.dtype)
    return (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)


def l2_normalize(x):
    return x / x.norm(2, -1, keepdim=True).clamp_min(1e-12)


def norm(kind, dim):
    return nn.LayerNorm(dim) if kind == "layer" else nn.RMSNorm(dim)


class SelfAttention(nn.Module):
    """x + dropout(proj(attention(norm(x)))), fused qkv, optional grouped-query heads."""

    def __init__(self, dim, heads, kv_heads, kernel, norm_kind, attention_dropout, dropout, bias, causal, seq, post,
                 rope_theta=None):
        super().__init__()
        self.post, self.rope_theta = post, rope_theta
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.kernel, self.pa, self.p, self.causal = kernel, attention_dropout, dropout, causal
        self.norm = norm(norm_kind, dim)
        self.qkv = nn.Linear(dim, dim + 2 * kv_heads * self.hd, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        if causal:
            self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        h, kv, hd = self.heads, self.kv_heads, self.hd
        qkv = self.qkv(x if self.post else self.norm(x)).view(b, s, h + 2 * kv, hd)
        q, k, v = qkv.split([h, kv, kv], dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.rope_theta is not None:
            # rotary positions as distill's student/rotary.rs: pairs (i, i + d/2) turned by
            # pos * theta^(-2i/d); cos and sin in q's dtype, built from no tensor needing grad
            inv = 1.0 / self.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            freqs = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
            angles = torch.cat([freqs, freqs], -1)
            cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)

            def rope(t):
                half = t.shape[-1] // 2
                return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

            q, k = rope(q), rope(k)
        if self.kernel == "math":
            if kv < h:
                k = k[:, :, None].expand(b, kv, h // kv, s, hd).reshape(b, h, s, hd)
                v = v[:, :, None].expand(b, kv, h // kv, s, hd).reshape(b, h, s, hd)
            scores = (q @ k.transpose(-2, -1)) * hd**-0.5
            if self.causal:
                scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
            if TEXT["mask"] is not None:
                # the additive padding bias, [B, 1, 1, S], in the scores' dtype
                bias = (1 - TEXT["mask"])[:, None, None, :] * torch.finfo(scores.dtype).min
                scores = scores + bias
            probs = F.dropout(torch.softmax(scores, -1), self.pa, True)
            out = probs @ v
        else:
            keys = None if TEXT["mask"] is None else TEXT["mask"].bool()[:, None, None, :]
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=keys, dropout_p=self.pa, is_causal=self.causal, enable_gqa=kv < h
            )
        out = out.transpose(1, 2).reshape(b, s, d)
        r = x + F.dropout(self.proj(out), self.p, True)
        return self.norm(r) if self.post else r


class FeedForward(nn.Module):
    """x + dropout(fc2(act(fc1(norm(x))))); SwiGLU: fc1 gives gate and up."""

    def __init__(self, dim, width, kind, activation, norm_kind, dropout, bias, post):
        super().__init__()
        self.post = post
        self.kind, self.act, self.p = kind, ACT[activation], dropout
        self.norm = norm(norm_kind, dim)
        self.fc1 = nn.Linear(dim, 2 * width if kind == "swiglu" else width, bias=bias)
        self.fc2 = nn.Linear(width, dim, bias=bias)

    def forward(self, x):
        h = self.fc1(x if self.post else self.norm(x))
        if self.kind == "swiglu":
            gate, up = h.chunk(2, -1)
            h = F.silu(gate) * up
        else:
            h = self.act(h)
        r = x + F.dropout(self.fc2(h), self.p, True)
        return self.norm(r) if self.post else r


class Head(nn.Module):
    def __init__(self, dim, classes, bias, tied_to):
        super().__init__()
        self.tied_to = [tied_to] if tied_to is not None else None
        self.weight = None if tied_to is not None else nn.Parameter(torch.empty(classes, dim).uniform_(-0.1, 0.1))
        self.bias = nn.Parameter(torch.zeros(classes)) if bias else None

    def forward(self, x):
        w = self.tied_to[0].weight if self.tied_to else self.weight
        return F.linear(x, w, self.bias)


class LowRankHead(nn.Module):
    """head_rank: z = x down^T [.., r], logits = z up^T (+ bias)."""

    def __init__(self, dim, rank, classes, bias):
        super().__init__()
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, classes, bias=False)
        self.bias = nn.Parameter(torch.zeros(classes)) if bias else None

    def forward(self, x):
        return F.linear(self.down(x), self.up.weight, self.bias)


def layers_of(cfg):
    """[(id, module)] as arch::layers builds them, and the input shape per sample."""
    data, st = cfg["data"], cfg["student"]
    shape = list(data["input_shape"])
    classes = data["classes"]
    act = st.get("activation", "relu")
    norm_kind = st.get("norm", "none")
    p = st.get("dropout", 0.0)
    out = []
    if st["family"] == "transformer":
        t = st["transformer"]
        s, d = shape[0], t["d_model"]
        heads = t["heads"]
        kv = t.get("kv_heads", heads)
        width = t.get("mlp_width", 4 * d)
        nk = t.get("norm", "layer")
        head = t.get("head", "lm")
        bias = t.get("bias", True)
        post = t.get("norm_position", "pre") == "post"
        emb = Embedding(t["vocab"], d, t.get("max_positions", 0), t.get("token_types", 0))
        out.append(("embed", emb))
        if post:
            out.append(("embed_norm", norm(nk, d)))
        if p > 0:
            out.append(("embed_drop", Fn(lambda x: F.dropout(x, p, True))))
        for i in range(1, t["layers"] + 1):
            attn = SelfAttention(
                d, heads, kv, t.get("attention", "math"), nk, t.get("attention_dropout", 0.0), p, bias,
                head == "lm", s, post, t.get("rope_theta"),
            )
            out.append((f"blk{i}_attn", attn))
            out.append((f"blk{i}_mlp", FeedForward(d, width, t.get("mlp", "standard"), act, nk, p, bias, post)))
        if not post:
            out.append(("final_norm", norm(nk, d)))
        pool = Fn(mean_pool) if t.get("pooling", "mean") == "mean" else Fn(lambda x: x[:, 0])
        if head == "lm":
            tied = t.get("tie_embeddings", False)
            if "head_rank" in t:
                out.append(("head", LowRankHead(d, t["head_rank"], classes, bias)))
            else:
                out.append(("head", Head(d, classes, bias and not tied, emb.tokens if tied else None)))
        elif head == "classifier":
            out.append(("pool", pool))
            out.append(("head", Head(d, classes, True, None)))
        else:
            out.append(("pool", pool))
            if classes != d:
                out.append(("head", nn.Linear(d, classes)))
            if t.get("normalize", False):
                out.append(("normalize", Fn(l2_normalize)))
        return out, shape
    cur = list(shape)
    if st["family"] == "cnn":
        k = st.get("kernel", 3)
        pool = st.get("pool", "max")
        for i, ch in enumerate(st["channels"], 1):
            out.append((f"conv{i}", nn.Conv2d(cur[0], ch, k, padding=k // 2, bias=norm_kind != "batch")))
            cur = [ch, cur[1], cur[2]]
            if norm_kind == "batch":
                out.append((f"conv{i}_bn", nn.BatchNorm2d(ch)))
            out.append((f"conv{i}_act", Fn(ACT[act])))
            if pool != "none":
                fn = (lambda x: F.max_pool2d(x, 2)) if pool == "max" else (lambda x: F.avg_pool2d(x, 2))
                out.append((f"conv{i}_pool", Fn(fn)))
                cur = [ch, cur[1] // 2, cur[2] // 2]
    if len(cur) > 1:
        out.append(("flatten", Fn(lambda x: x.flatten(1))))
        cur = [math.prod(cur)]
    for j, w in enumerate(st.get("hidden", []), 1):
        out.append((f"fc{j}", nn.Linear(cur[0], w)))
        if norm_kind == "batch":
            out.append((f"fc{j}_norm", nn.BatchNorm1d(w)))
        elif norm_kind == "layer":
            out.append((f"fc{j}_norm", nn.LayerNorm(w)))
        out.append((f"fc{j}_act", Fn(ACT[act])))
        if p > 0:
            out.append((f"fc{j}_drop", Fn(lambda x: F.dropout(x, p, True))))
        cur = [w]
    out.append(("head", nn.Linear(cur[0], classes)))
    return out, shape


# --- checkpoint segments: arch::checkpoint_segments ---------------------------------------


def split(n, k):
    k = max(1, min(k, n))
    base, extra = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        length = base + (1 if i < extra else 0)
        out.append(range(start, start + length))
        start += length
    return out


def checkpoint_segments(n, ckpt):
    if ckpt == "none":
        return None
    if ckpt == "sqrt":
        r = math.isqrt(n)
        return split(n, max(1, r + 1 if n > r * r + r else r))
    return split(n, int(ckpt))


def logit_loss(z, y, teacher_logits, temperature, alpha):
    """distill/src/train/objective/logit_kd.rs: CE always, KD when alpha > 0, both in fp32."""
    ce = F.nll_loss(F.log_softmax(z, -1), y.reshape(-1))
    loss = (1 - alpha) * ce
    if alpha > 0:
        s_logp = F.log_softmax(z / temperature, -1)
        t_logp = F.log_softmax(teacher_logits / temperature, -1)
        kl = F.kl_div(s_logp, t_logp, reduction="sum", log_target=True) * (temperature**2 / z.shape[0])
        loss = loss + alpha * kl
    return loss


# --- one measured step ---------------------------------------------------------------------


def batch_of(cfg, shape, b, precision):
    """The step's inputs (x, labels, cached teacher logits, logit rows per sample); for text,
    sets TEXT["mask"] (sample i has S - i tokens, the rest padding: S is the batch's longest)."""
    TEXT["mask"] = None
    classes = cfg["data"]["classes"]
    if cfg["student"]["family"] == "transformer":
        t = cfg["student"]["transformer"]
        x = torch.randint(0, t["vocab"], [b] + shape)
        rows = shape[0] if t.get("head", "lm") == "lm" else 1
        y = torch.randint(0, classes, (b, rows))
        if "tokenizer" in cfg["data"]:
            lengths = torch.tensor([max(1, shape[0] - i) for i in range(b)])
            TEXT["mask"] = (torch.arange(shape[0])[None, :] < lengths[:, None]).long()
    else:
        x = torch.randn([b] + shape)
        if precision == "pure_bf16":
            x = x.to(torch.bfloat16)
        rows = 1
        y = torch.randint(0, classes, (b,))
    return x, y, torch.randn(b * rows, classes), rows


def measure(path):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    torch.manual_seed(0)
    layers, shape = layers_of(cfg)
    net = nn.ModuleDict(layers)
    train = cfg.get("train", {})
    precision = train.get("precision", "fp32")
    b = train.get("batch_size", 128)
    kd = cfg.get("kd", {})
    temperature, alpha = kd.get("temperature", 4.0), kd.get("alpha", 0.9)
    classes = cfg["data"]["classes"]
    if precision == "pure_bf16":
        net = net.to(torch.bfloat16)
    net.train()

    objective = kd.get("objective", "logits")
    x, y, teacher_logits, rows = batch_of(cfg, shape, b, precision)

    params = list(net.parameters())
    buffers = list(net.buffers())
    excluded = {t.untyped_storage().data_ptr() for t in params + buffers}
    seen = {}
    current = ["?"]

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in excluded and key not in seen:
            seen[key] = (current[0], st.nbytes())
        return t

    def run(i, h):
        current[0] = layers[i][0]
        return layers[i][1](h)

    def run_range(r):
        def f(h):
            for i in r:
                h = run(i, h)
            return h

        return f

    segments = checkpoint_segments(len(layers), cfg["student"].get("checkpointing", "none"))
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    def forward():
        h = x
        if segments is None:
            for i in range(len(layers)):
                h = run(i, h)
            return h
        for r in segments:
            current[0] = layers[r.start][0]
            h = checkpoint(run_range(r), h, use_reentrant=False)
        return h

    with saved_tensors_hooks(pack, lambda t: t):
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                logits = forward()
        else:
            logits = forward()
        current[0] = "loss"
        z = logits.reshape(b * rows, classes).to(torch.float32)
        if objective != "logits":
            # embedding distillation on the teacher's (cached, fp32) unit vectors; no CE on text
            target = F.normalize(teacher_logits, dim=-1)
            if objective == "embedding_mse":
                kd_term = F.mse_loss(z, target)
            else:
                kd_term = (1 - F.cosine_similarity(z, target, dim=-1)).mean()
            loss = alpha * kd_term
        else:
            loss = logit_loss(z, y, teacher_logits, temperature, alpha)

    saved_by_layer = {}
    for layer, nbytes in seen.values():
        saved_by_layer[layer] = saved_by_layer.get(layer, 0) + nbytes

    if train.get("optimizer", "adamw") == "sgd":
        opt = torch.optim.SGD(params, lr=0.01, momentum=train.get("momentum", 0.9))
    else:
        opt = torch.optim.AdamW(params, lr=1e-3)
    loss.backward()
    grad_bytes = sum(p.grad.nbytes for p in params if p.grad is not None)
    opt.step()
    state_bytes = step_bytes = 0
    for state in opt.state.values():
        for key, t in state.items():
            if torch.is_tensor(t):
                if key == "step":
                    step_bytes += t.nbytes
                else:
                    state_bytes += t.nbytes
    names = {}
    for lid, module in layers:
        for leaf, p in module.named_parameters():
            names[f"{lid}.{leaf}"] = list(p.shape)
    return {
        "batch": b,
        "precision": precision,
        "layers": [lid for lid, _ in layers],
        "param_shapes": names,
        "param_count": sum(p.numel() for p in params),
        "param_bytes": sum(p.nbytes for p in params),
        "buffer_bytes": sum(t.nbytes for t in buffers),
        "grad_bytes": grad_bytes,
        "optimizer_bytes": state_bytes,
        "optimizer_step_tensor_bytes": step_bytes,
        "saved_bytes": sum(n for _, n in seen.values()),
        "saved_by_layer": saved_by_layer,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=os.path.join(HERE, "configs"))
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    for path in sorted(glob.glob(os.path.join(args.configs, "*.toml"))):
        name = os.path.splitext(os.path.basename(path))[0]
        results[name] = measure(path)
    meta = {"torch": torch.__version__, "device": "cpu"}
    text = json.dumps({"meta": meta, "configs": results}, indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
