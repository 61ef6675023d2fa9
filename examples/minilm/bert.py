"""A small BERT sentence encoder in plain PyTorch: the teacher of the text demo and of the text
fixtures, written for this project (not Hugging Face's code).

Its parameters carry Hugging Face `BertModel` state_dict names (`embeddings.word_embeddings.weight`,
`encoder.layer.{j}.attention.self.query.weight`, ...; no pooler), so the MiniLM safetensors file
loads into it key for key. The forward is the sentence-transformers recipe of all-MiniLM-L6-v2:
BERT's post-norm encoder (Devlin et al. 2019), exact (erf) GELU, then the mean of the token
states over the attention mask and an L2 normalisation.

    forward(input_ids: int64 [B, S], attention_mask: int64 [B, S]) -> float32 [B, hidden]

with 1 = token and 0 = padding in the mask, S <= max_positions. The module is
`torch.jit.script`-able, so the saved teacher takes any B and S. `BertWithHiddenStates` wraps
the same weights and also returns every layer's token states, for hidden-state distillation.
"""
import math
from dataclasses import dataclass
from typing import List, Tuple

import torch
from torch import nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    """The shape of a BERT encoder, in the names of Hugging Face's config.json."""

    vocab_size: int
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, d: dict) -> "BertConfig":
        """Reads the fields above from a parsed config.json (other keys are ignored)."""
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: d[k] for k in names if k in d})


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[B, S] int64 -> [B, S, hidden]: tokens + positions 0..S-1 + token type 0, normalised."""
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        h = h + self.token_type_embeddings.weight[0]
        return self.LayerNorm(h)


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """h [B, S, d], bias [B, 1, 1, S] (0 or the dtype's minimum) -> [B, S, d]."""
        b, s, d = h.shape
        q, k, v = self.split(self.query(h)), self.split(self.key(h)), self.split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias
        o = torch.softmax(scores, dim=-1) @ v
        return o.transpose(1, 2).reshape(b, s, d)


class BertDenseNorm(nn.Module):
    """`norm(residual + dense(x))`: BERT's `attention.output` and `output` sub-modules."""

    def __init__(self, d_in: int, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(d_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dense(x))


class BertAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        # `self` is Hugging Face's name for this sub-module; setattr keeps Python's `self` free.
        setattr(self, "self", BertSelfAttention(c))
        self.output = BertDenseNorm(c.hidden_size, c)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.output(getattr(self, "self")(h, bias), h)


class BertIntermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(h))  # exact (erf) GELU, as BERT's "gelu"


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertDenseNorm(c.intermediate_size, c)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = self.attention(h, bias)
        return self.output(self.intermediate(h), h)


class BertEncoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            h = layer(h, bias)
        return h


class BertSentenceEncoder(nn.Module):
    """BERT encoder + masked mean pooling + L2 normalisation (no pooler)."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask int64 [B, S] -> unit-length embeddings float32 [B, hidden]."""
        h = self.embeddings(input_ids)
        m = attention_mask.to(h.dtype)
        # Additive key bias: 0 for tokens, torch.finfo(float32).min for padding (the
        # teacher runs in float32; TorchScript has no torch.finfo).
        bias = (1.0 - m)[:, None, None, :] * -3.4028234663852886e38
        h = self.encoder(h, bias)
        pooled = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
        return pooled / pooled.norm(2, -1, keepdim=True).clamp_min(1e-12)


class BertWithHiddenStates(nn.Module):
    """The same encoder (its own sub-modules, so the same parameter names and values) returning
    its hidden states beside the embedding, in Hugging Face's order:

        forward(input_ids, attention_mask) -> (float32 [B, hidden], [h_0, ..., h_L])

    h_0 the embeddings' output and h_i layer i's, each float32 [B, S, hidden] (padding positions
    included), L = num_hidden_layers; the embedding equals `BertSentenceEncoder`'s. A distill
    teacher reads them with `teacher.output = 0` and `teacher.hidden_output = 1`."""

    def __init__(self, model: BertSentenceEncoder):
        super().__init__()
        self.embeddings = model.embeddings
        self.encoder = model.encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        h = self.embeddings(input_ids)
        m = attention_mask.to(h.dtype)
        bias = (1.0 - m)[:, None, None, :] * -3.4028234663852886e38  # as BertSentenceEncoder
        states = [h]
        for layer in self.encoder.layer:
            h = layer(h, bias)
            states.append(h)
        pooled = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
        return pooled / pooled.norm(2, -1, keepdim=True).clamp_min(1e-12), states


def scripted(model: nn.Module) -> torch.jit.ScriptModule:
    """The model in eval mode as TorchScript (dynamic batch size and sequence length)."""
    return torch.jit.script(model.eval())
