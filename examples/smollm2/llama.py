"""A Llama decoder in plain PyTorch: the causal-LM teacher of the SmolLM2 demo and of the LM test
fixtures, written for this project (not Hugging Face's code, no `transformers`).

    forward(input_ids: int64 [B, S], attention_mask: int64 [B, S]) -> logits float32 [B, S, vocab]

The mask has 1 for tokens and 0 for padding, right padding only (each row's tokens first); token
positions are 0..S-1 in every row. Each position attends to the tokens at or before it (causal
attention combined with the padding mask). The logits of padding positions are finite and
meaningless. Cast to bfloat16 or float16 (`.to(dtype)`), the module computes in that dtype and
returns logits in it, with RMSNorm, the rotary angles and the softmax in float32 as Hugging Face
does.

The architecture is Llama's (Touvron et al. 2023) as SmolLM2 uses it: token embedding, then
`layers` pre-norm blocks
    h = h + o(attention(rope(q(rmsnorm(h))), rope(k(...)), v(...)))      grouped-query attention
    h = h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h)))                   SwiGLU MLP
then a final RMSNorm and an LM head tied to the embedding (logits = h @ embed_tokens.weight.T).
No biases. Rotary positions follow Hugging Face's "rotate_half" convention: dimension i of a head
is paired with i + d_head/2 and turns at the angle position * theta^(-2i/d_head).

Parameter names are Hugging Face `LlamaModel`'s without the `model.` prefix, so a Hugging Face
checkpoint loads key for key: `embed_tokens.weight`, `layers.{i}.input_layernorm.weight`,
`layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `layers.{i}.post_attention_layernorm.weight`,
`layers.{i}.mlp.{gate,up,down}_proj.weight`, `norm.weight`. There is no `lm_head.weight` (tied)
and no buffer. `scripted(model)` is the TorchScript that make_teacher.py and the LM fixtures
save: it runs at any B and S and on the device of its inputs. The module also traces (`traced`): the
traced graph reads B and S from the inputs too, but it keeps the tracing device in its
`arange`/`eye` calls, so it runs on CPU only. `check_dynamic` compares either with eager.
"""
import warnings
from dataclasses import asdict, dataclass

import torch
from torch import nn
import torch.nn.functional as F

@dataclass
class LlamaConfig:
    vocab: int
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    mlp_width: int
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    def to_dict(self) -> dict:
        return asdict(self)

    def check(self) -> None:
        """ValueError unless the heads divide the width and the kv heads divide the heads."""
        if self.d_model % self.heads or self.heads % self.kv_heads or self.d_head % 2:
            raise ValueError(f"inconsistent heads: {self}")


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # in float32 whatever the model's dtype, as Hugging Face's LlamaRMSNorm
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads, self.d_head = c.heads, c.kv_heads, c.d_head
        self.q_proj = nn.Linear(c.d_model, c.heads * c.d_head, bias=False)
        self.k_proj = nn.Linear(c.d_model, c.kv_heads * c.d_head, bias=False)
        self.v_proj = nn.Linear(c.d_model, c.kv_heads * c.d_head, bias=False)
        self.o_proj = nn.Linear(c.heads * c.d_head, c.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """x [B, S, d]; cos, sin [S, d_head]; allowed bool [B, 1, S, S] (query, key) -> [B, S, d]."""
        b, s = x.size(0), x.size(1)
        q = self.q_proj(x).view(b, s, self.heads, self.d_head).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d_head).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        # Query head j reads kv head j // groups (Hugging Face's repeat_kv).
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = ((q @ k.transpose(-1, -2)) * (self.d_head**-0.5)).float()
        # The softmax runs in float32; a masked key scores float32's lowest (TorchScript has no
        # torch.finfo).
        scores = scores.masked_fill(~allowed, -3.4028234663852886e38)
        o = torch.softmax(scores, dim=-1).to(v.dtype) @ v
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.heads * self.d_head))


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.d_model, c.mlp_width, bias=False)
        self.up_proj = nn.Linear(c.d_model, c.mlp_width, bias=False)
        self.down_proj = nn.Linear(c.mlp_width, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.d_model, c.rms_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.d_model, c.rms_eps)
        self.mlp = MLP(c)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, allowed)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    """The decoder of the module docstring."""

    def __init__(self, c: LlamaConfig):
        super().__init__()
        c.check()
        self.d_head, self.rope_theta = c.d_head, float(c.rope_theta)
        self.embed_tokens = nn.Embedding(c.vocab, c.d_model)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.d_model, c.rms_eps)

    def rope(self, s: int, device: torch.device):
        """cos, sin [S, d_head] for positions 0..S-1 (float32, as Hugging Face computes them)."""
        exponents = torch.arange(0, self.d_head, 2, dtype=torch.int64, device=device).float() / self.d_head
        inv_freq = 1.0 / torch.pow(torch.full_like(exponents, self.rope_theta), exponents)
        positions = torch.arange(s, dtype=torch.int64, device=device).float()
        angles = positions[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = input_ids.size(1)
        h = self.embed_tokens(input_ids)
        cos, sin = self.rope(s, input_ids.device)
        cos, sin = cos.to(h.dtype), sin.to(h.dtype)
        positions = torch.arange(s, device=input_ids.device)
        causal = positions[None, :] <= positions[:, None]  # [query, key]
        allowed = causal[None, None, :, :] & (attention_mask != 0)[:, None, None, :]
        # A query may always read itself, so an all-padding row stays finite (never NaN).
        allowed = allowed | torch.eye(s, dtype=torch.bool, device=input_ids.device)[None, None]
        for layer in self.layers:
            h = layer(h, cos, sin, allowed)
        return F.linear(self.norm(h), self.embed_tokens.weight)


def scripted(model: Llama) -> torch.jit.ScriptModule:
    """The model in eval mode as TorchScript (any batch size, sequence length and device)."""
    return torch.jit.script(model.eval())


def traced(model: Llama) -> torch.jit.ScriptModule:
    """The model in eval mode traced on a small padded batch: any B and S, but CPU only."""
    model = model.eval()
    ids = torch.zeros(2, 5, dtype=torch.int64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.11 deprecates jit.trace
        return torch.jit.trace(model, (ids, mask), check_trace=False)


def check_dynamic(model: Llama, module, vocab: int, tol: float = 1e-5) -> float:
    """The largest |eager - module| logit over batches of shapes other than the trace's, right
    padded; ValueError above tol. Seeded, so the same model gives the same answer."""
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for b, s in ((1, 1), (3, 17), (4, 9)):
        ids = torch.randint(0, vocab, (b, s), generator=g)
        lengths = torch.randint(1, s + 1, (b,), generator=g)
        lengths[0] = s
        mask = (torch.arange(s)[None, :] < lengths[:, None]).long()
        with torch.no_grad():
            diff = float((model(ids, mask) - module(ids, mask)).abs().max())
        worst = max(worst, diff)
    if worst > tol:
        raise ValueError(f"the TorchScript module differs from eager by {worst:.2e} > {tol:.0e}")
    return worst
